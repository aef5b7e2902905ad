"""`pause` of a client agent in the simulation: SIGSTOP of a writer, as a long GC pause
freezes one while another client takes its ledger over (docs/nemeses.md). Its ops wait
with it, the controller gives up on them as it does on a real paused agent, the heal
resumes it, and a correct build survives it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from harness.agent_client import CONTROLLER_MARGIN_S
from harness.errors import UserError
from harness.runtime.sim import SimSpec, run_sim
from harness.testspec import TestSpec
from nemesis.schedule import check_steps
from nemesis.triggers import resolve_targets

pytestmark = pytest.mark.sim

BOOKIES = {"b1", "b2", "b3"}


def _history(run_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run_dir / "history.jsonl").read_text().splitlines()]


def _clock_pause(node: str, at: float, until: float) -> tuple[dict[str, Any], ...]:
    return (
        {"at": at, "f": "pause", "value": {"nodes": [node]}},
        {"at": until, "f": "resume", "value": {"nodes": [node]}},
    )


def _pause_others_on_recovery(at: float) -> dict[str, Any]:
    """A pause of every client but the recovering one (the old writer), for 1 s."""
    return {
        "at": at,
        "on": "recovery-started",
        "f": "pause",
        "value": {"nodes": ["@others"]},
        "hold": 1.0,
    }


def _fault_times(ops: list[dict[str, Any]], f: str) -> float:
    return next(o["time"] / 1e9 for o in ops if o["process"] == "nemesis" and o["f"] == f)


def test_a_paused_clients_ops_complete_only_after_it_resumes(tmp_path: Path) -> None:
    spec = SimSpec(seed=1, time_limit=3.0, takeovers=0.2, schedule=_clock_pause("c1", 0.5, 1.5))
    result = run_sim(spec, tmp_path)
    assert result.results["valid"] is True, result.results["anomaly_types"]
    ops = _history(tmp_path)
    paused, resumed = _fault_times(ops, "pause"), _fault_times(ops, "resume")
    on_c1 = [o for o in ops if o.get("node") == "c1"]
    done_while_paused = [
        o for o in on_c1 if o["type"] != "invoke" and paused < o["time"] / 1e9 < resumed
    ]
    assert not done_while_paused
    invoked = {o["process"] for o in on_c1 if o["type"] == "invoke" and o["time"] / 1e9 < paused}
    completions = [o for o in on_c1 if o["type"] != "invoke" and o["time"] / 1e9 >= resumed]
    assert invoked & {o["process"] for o in completions}  # held across the pause, then done
    on_c2 = [o for o in ops if o.get("node") == "c2" and paused < o["time"] / 1e9 < resumed]
    assert any(o["type"] == "ok" for o in on_c2)  # everything else went on


def test_the_controller_gives_up_on_a_paused_client_as_on_a_real_one(tmp_path: Path) -> None:
    """Paused past the op timeout plus the controller's margin, the agent's ops complete
    `info` (`fail` for reads); the heal resumes it and nothing it ran on is a hang."""
    long = SimSpec.op_timeout + CONTROLLER_MARGIN_S + 2.0
    spec = SimSpec(
        seed=2,
        time_limit=long + 2.0,
        schedule=({"at": 0.5, "f": "pause", "value": {"nodes": ["c2"]}},),
    )
    result = run_sim(spec, tmp_path)
    assert result.results["valid"] is True, result.results["anomaly_types"]
    ops = _history(tmp_path)
    lost = [o for o in ops if o.get("error") == "agent-lost: TimeoutError"]
    assert lost and all(o["node"] == "c2" and o["type"] in ("info", "fail") for o in lost)
    heal = next(o for o in ops if o["f"] == "heal" and o["type"] == "info")
    assert heal["value"]["proof"] == [{"c2": {"state": "S"}}]
    assert "hang" not in result.results["checkers"]


@pytest.mark.parametrize("workload", ["ledger", "unbounded"])
def test_a_correct_build_stays_valid_while_a_writer_is_frozen_across_a_takeover(
    workload: str, tmp_path: Path
) -> None:
    """A client frozen while the other takes ledgers over and a bookie restarts, then
    writing again: its stale handles must be refused, whatever it still had in flight."""
    schedule = (
        *_clock_pause("c1", 0.3, 1.8),
        {"at": 0.6, "f": "kill", "value": {"nodes": ["b2"]}},
        {"at": 1.2, "f": "restart", "value": {"nodes": ["b2"]}},
    )
    for seed in range(3):
        spec = SimSpec(
            seed=seed,
            time_limit=3.0,
            workload=workload,
            takeovers=0.5,
            checkpoint_interval=0.1,
            schedule=tuple(sorted(schedule, key=lambda step: step["at"])),
        )
        result = run_sim(spec, tmp_path / str(seed))
        assert result.results["valid"] is True, (seed, result.results["anomaly_types"])


def test_a_pause_triggered_by_a_recovery_freezes_the_old_writer(tmp_path: Path) -> None:
    spec = SimSpec(
        seed=1, time_limit=3.0, takeovers=0.2, schedule=(_pause_others_on_recovery(0.2),)
    )
    result = run_sim(spec, tmp_path)
    assert result.results["valid"] is True, result.results["anomaly_types"]
    ops = _history(tmp_path)
    started = next(o for o in ops if o["f"] == "pause" and o["type"] == "info")
    (frozen,) = started["value"]["nodes"]
    recoveries = [o for o in ops if o["f"] == "recover" and o["type"] == "invoke"]
    recovering = {o["node"] for o in recoveries if o["time"] <= started["time"]}
    assert frozen in {"c1", "c2"} and frozen not in recovering
    assert started["value"]["proof"] == {frozen: {"state": "T"}}
    assert any(o["f"] == "resume" and o["type"] == "info" for o in ops)


def test_others_are_the_clients_but_the_one_that_reached_the_probe() -> None:
    assert resolve_targets(["@others"], [], "c1", BOOKIES, ["c1", "c2", "c3"]) == ["c2", "c3"]
    assert resolve_targets(["@others", "b1"], [], "c2", BOOKIES, ["c1", "c2"]) == ["c1", "b1"]
    assert resolve_targets(["@others"], [], "b1", BOOKIES, ["c1", "c2"]) is None  # a bookie's
    assert resolve_targets(["@others"], [], "c1", BOOKIES, ["c1"]) is None  # no other client
    assert resolve_targets(["c1"], [], "c2", BOOKIES, ["c1", "c2"]) is None  # by name: no


def test_client_pauses_are_refused_where_they_cannot_replay() -> None:
    on_recovery = _pause_others_on_recovery(0.0)
    check_steps([on_recovery, *_clock_pause("c2", 0.5, 1.0)], ["b1"], ["c1", "c2"])
    for bad, says in [
        ({**on_recovery, "f": "kill"}, "value.nodes"),  # only a pause hits a client
        ({**on_recovery, "on": "bookie-fenced"}, "a bookie reaches 'bookie-fenced'"),
        ({"at": 0.0, "f": "kill", "value": {"nodes": ["c1"]}}, "value.nodes"),
    ]:
        with pytest.raises(ValueError, match=says):
            check_steps([bad], ["b1"], ["c1", "c2"])
    assert TestSpec(runtime="docker", schedule=_clock_pause("c1", 0.5, 1.0)).nemesis == ("pause",)
    with pytest.raises(UserError, match=r"value\.nodes"):  # the local runtime pauses bookies only
        TestSpec(runtime="local", schedule=_clock_pause("c1", 0.5, 1.0))
    replay = SimSpec(schedule=_clock_pause("c1", 0.5, 1.0)).as_replay("local")
    assert replay.runtime == "sim"
