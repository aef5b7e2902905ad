"""What the tests of whole runs read back from a run's history."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from harness.coverage import probe_event


def proven_faults(history: Path) -> set[str]:
    """The fault ops (start, stop) whose completion carries a proof that they took effect."""
    ops = [json.loads(line) for line in history.read_text().splitlines() if '"nemesis"' in line]
    return {op["f"] for op in ops if op["type"] == "info" and "proof" in (op["value"] or {})}


KILL_AND_PAUSE_ON_RECOVERIES = (
    {"at": 0.5, "on": "recovery-started", "f": "kill", "value": {"nodes": ["@0"]}, "hold": 0.4},
    {"at": 2.0, "on": "recovery-started", "f": "pause", "value": {"nodes": ["@1"]}, "hold": 0.4},
)
"""A kill of the first and a pause of the second bookie of the ensemble a recovery
starts on, each fired by an agent's `recovery-started` probe."""


def assert_fired_on_the_named_bookies(run_dir: Path, late_s: float) -> list[dict[str, Any]]:
    """Each step of KILL_AND_PAUSE_ON_RECOVERIES fired after a client agent logged
    `recovery-started`, at most `late_s` after the line was read, on the bookie of that
    recovery's ensemble its `@k` names, and its nemesis proved it (the pid gone; the
    process stopped). Returns the two fired ops."""
    ops = [json.loads(line) for line in (run_dir / "history.jsonl").read_text().splitlines()]
    bookie_ids = _bookie_ids(run_dir)
    fired = []
    for f, k, proof in (("kill", 0, {"gone": True}), ("pause", 1, {"state": "T"})):
        invoke, completed = (
            next(op for op in ops if op["f"] == f and op["type"] == kind)
            for kind in ("invoke", "info")
        )
        assert invoke["value"]["on"] == "recovery-started"
        timing = invoke["value"]["probe_timing"]
        assert timing["node"] in ("c1", "c2")  # the recovery probes are the agents'
        assert timing["written_s"] <= timing["read_s"] <= invoke["time"] / 1e9
        assert invoke["time"] / 1e9 - timing["read_s"] <= late_s + 0.01
        (node,) = invoke["value"]["nodes"]
        agent_log = run_dir / "logs" / timing["node"] / "agent.log"
        recoveries = _probe_lines(agent_log, "recovery-started")
        assert any(r["bookies"][k] == bookie_ids[node] for r in recoveries), (node, recoveries)
        assert proof.items() <= completed["value"]["proof"][node].items(), completed
        fired.append(invoke)
    return fired


def _probe_lines(log: Path, probe: str) -> list[dict[str, Any]]:
    events = map(probe_event, log.read_text().splitlines())  # a supervisor's notes too
    return [event for event in events if event and event.get("probe") == probe]


def _bookie_ids(run_dir: Path) -> dict[str, str]:
    """Node name -> bookie id (host:port), from the `bookie` field of each bookie's log."""
    ids = {}
    for name in ("b1", "b2", "b3"):
        first = next(
            json.loads(line)
            for line in (run_dir / "logs" / name / "bookie.log").read_text().splitlines()
            if line.startswith("{") and '"bookie"' in line
        )
        ids[name] = first["bookie"]
    return ids
