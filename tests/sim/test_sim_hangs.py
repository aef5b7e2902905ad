"""`hang` (docs/anomalies.md): in the simulation an op its agent gave up on at its timeout
runs on, and one still running `HANG_S` after the run — every fault healed, nothing else
running — is an anomaly of the run; one that ends later than its timeout but ends is not."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from bookie_image.client.ledger import LedgerHandle
from harness.runtime.sim import HANG_S, SimSpec, run_sim, with_hangs

pytestmark = pytest.mark.sim

SPEC = SimSpec(seed=1, time_limit=2.0)
"""A short `ledger` run: its writers' handles are closed after the heal (the held
closes), so a close that never ends is sure to be asked for."""


def _history(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "history.jsonl").read_text().splitlines()]


def test_a_close_that_never_ends_is_a_hang_citing_its_op(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def never_ends(self: LedgerHandle) -> None:
        await asyncio.get_running_loop().create_future()

    monkeypatch.setattr(LedgerHandle, "close", never_ends)
    run = run_sim(SPEC, tmp_path)
    assert "hang" in run.results["anomaly_types"], run.results["anomaly_types"]
    cases = run.results["anomalies"]["hang"]
    ops = {o["index"]: o for o in _history(tmp_path)}
    heal = max(i for i, o in ops.items() if o["f"] == "heal")
    for c in cases:
        assert c["f"] == "close" and c["waiting_at"].startswith("bookie_image/agent/executor.py")
        invoke, done = (ops[i] for i in c["ops"] if ops[i]["process"] != "nemesis")
        assert (invoke["type"], invoke["f"], invoke["node"]) == ("invoke", "close", c["agent"])
        assert invoke["value"]["ledger"] == c["ledger"] and done["error"] == "ETIMEOUT"
        assert heal in c["ops"]
    assert run.results["sim"]["late_ops"] >= len(cases)
    assert run.simulated_s > HANG_S  # it was given its time before it was judged


def test_a_close_that_ends_after_its_timeout_is_no_hang(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ended: list[float] = []
    close = LedgerHandle.close

    async def slow(self: LedgerHandle) -> None:
        await asyncio.sleep(2 * SPEC.op_timeout)
        await close(self)
        ended.append(asyncio.get_running_loop().time())

    monkeypatch.setattr(LedgerHandle, "close", slow)
    run = run_sim(SPEC, tmp_path)
    timed_out = [
        o for o in _history(tmp_path) if o["f"] == "close" and o.get("error") == "ETIMEOUT"
    ]
    assert timed_out and run.results["sim"]["late_ops"] == len(timed_out) == len(ended)
    assert "hang" not in run.results["anomaly_types"] and "hang" not in run.results["checkers"]


def test_without_a_proven_heal_a_hang_is_not_judged(tmp_path: Path) -> None:
    """A node left down may hold an op up: the run says so instead of judging it."""
    lines = [
        {"index": 0, "time": 0, "type": "invoke", "process": "nemesis", "f": "heal", "value": None},
        {"index": 1, "time": 5, "type": "info", "process": "nemesis", "f": "heal", "value": None,
         "error": "RuntimeError: b1 does not serve"},
    ]  # fmt: skip
    history = tmp_path / "history.jsonl"
    history.write_text("".join(json.dumps(line) + "\n" for line in lines))
    hung = [{"agent": "c1", "f": "close", "ledger": 4, "invoked_s": 1.0, "time": 10**9,
             "waiting_at": None}]  # fmt: skip
    valid = {"valid": True, "anomaly_types": [], "anomalies": {}, "checkers": {}}
    result = with_hangs(valid, hung, history)
    assert result["valid"] is True and result["anomaly_types"] == []
    assert result["checkers"]["hang"]["not_judged"] and result["checkers"]["hang"]["hung"] == hung
