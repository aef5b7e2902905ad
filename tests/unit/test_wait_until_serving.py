"""After the heal the run waits for the cluster to serve again; a cluster that does not is
a heal that did not take effect, said in words, never a silent pass (harness.runner). The
controller's own ZooKeeper session dropping meanwhile is not held against a node
(harness.runtime.local.ZkPoller)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from kazoo.exceptions import SessionExpiredError

from core.history import HistoryWriter
from harness import runner
from harness.runtime.local import ZkPoller
from nemesis.base import FaultNotProven
from tests.helpers.controller import nemesis_only


class Statuses:
    """A cluster whose `status()` answers the given states in turn, then the last."""

    def __init__(self, *states: dict[str, Any]) -> None:
        self.states = list(states)

    def status(self) -> dict[str, Any]:
        return self.states.pop(0) if len(self.states) > 1 else self.states[0]


def state(zk_serving: bool, **registered: bool) -> dict[str, Any]:
    bookies = [{"name": name, "registered": up} for name, up in registered.items()]
    return {"zk_serving": zk_serving, "bookies": bookies}


def test_returns_once_zookeeper_serves_and_every_bookie_registered(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(runner.time, "sleep", lambda s: None)
    cluster = Statuses(state(False, b1=False), state(True, b1=False), state(True, b1=True))
    runner._wait_until_serving(cluster)()  # type: ignore[arg-type]
    assert cluster.states == [state(True, b1=True)]


def test_a_cluster_still_down_at_the_deadline_is_an_unproven_heal_naming_what_is_down(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(runner, "CLUSTER_READY_TIMEOUT_S", 0.05)
    cluster = Statuses(state(True, b1=True, b2=False, b3=False))
    with pytest.raises(FaultNotProven, match="b2 not registered, b3 not registered"):
        runner._wait_until_serving(cluster)()  # type: ignore[arg-type]
    with pytest.raises(FaultNotProven, match="ZooKeeper not serving"):
        runner._wait_until_serving(Statuses(state(False, b1=True)))()  # type: ignore[arg-type]


class Session:
    """A ZooKeeper session whose client raises `fails` (or answers itself) on a read."""

    def __init__(self, fails: Exception | None) -> None:
        self.fails, self.stopped = fails, False

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopped = True

    def exists(self, path: str) -> str:
        if self.fails is not None:
            raise self.fails
        return path


def test_a_dropped_controller_session_is_reopened_not_blamed_on_the_node() -> None:
    opened = [Session(SessionExpiredError()), Session(None)]
    sessions = iter(opened)
    with ZkPoller(lambda: next(sessions)) as poller:  # type: ignore[arg-type,return-value]
        assert poller.read(lambda zk: zk.exists("/available/b1")) is None
        assert opened[0].stopped and "SessionExpiredError" in poller.why()
        assert poller.read(lambda zk: zk.exists("/available/b1")) == "/available/b1"
        assert not opened[1].stopped
    assert opened[1].stopped


STILL_DOWN = "the cluster does not serve 60s after the heal: b2 not registered"


class HealedNemesis:
    """A nemesis whose heal succeeds with one proof."""

    async def heal(self) -> list[dict[str, Any]]:
        return [{"f": "power-on", "proof": {"b2": {"new_pid": 7}}}]


def test_a_cluster_down_after_the_heal_is_an_unproven_heal_with_its_proofs_kept(
    tmp_path: Path,
) -> None:
    def still_down() -> None:
        raise FaultNotProven(STILL_DOWN)

    with HistoryWriter(tmp_path / "history.jsonl") as history:
        controller = nemesis_only(history, HealedNemesis(), wait_for_cluster=still_down)
        asyncio.run(controller.heal())
    invoke, done = (json.loads(line) for line in history.path.read_text().splitlines())
    assert (invoke["f"], done["f"], done["type"]) == ("heal", "heal", "info")
    assert done["value"] == {"proof": [{"f": "power-on", "proof": {"b2": {"new_pid": 7}}}]}
    assert done["error"] == f"FaultNotProven: {STILL_DOWN}"
    assert controller.counters.fault_errors == [f"heal: FaultNotProven: {STILL_DOWN}"]
