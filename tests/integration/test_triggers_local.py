"""Faults triggered by probes on the local runtime: the controller follows the probe
lines of real bookie and agent processes and fires the armed steps on them."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from harness.runtime.probe_tail import LATE_S
from tests.helpers.cli import BKCHAOS

TRIGGERED = (
    {"at": 0.5, "on": "recovery-started", "f": "kill", "value": {"nodes": ["@0"]}, "hold": 0.4},
    {"at": 2.0, "on": "recovery-started", "f": "pause", "value": {"nodes": ["@1"]}, "hold": 0.4},
)


def _probe_lines(log: Path, probe: str) -> list[dict[str, Any]]:
    return [
        event
        for event in map(json.loads, filter(None, log.read_text().splitlines()))
        if event.get("event") == "probe" and event.get("probe") == probe
    ]


def test_a_kill_and_a_pause_fire_on_recovery_started_on_the_bookie_it_names(
    tmp_path: Path,
) -> None:
    """Each step fires after a client agent logged `recovery-started`, at most LATE_S after
    the line was read, on the bookie of that recovery's ensemble its `@k` names, and its
    nemesis proves it (the pid gone; the process stopped). Writers crash and ledgers are
    taken over often, so recoveries start every few tenths of a second."""
    store, schedule = tmp_path / "store", tmp_path / "schedule.json"
    schedule.write_text(json.dumps(TRIGGERED))
    args = ["--schedule", str(schedule), "--time-limit", "6", "--seed", "3"]
    crashes = ["--writer-crashes", "0.1", "--takeovers", "0.1", "--bookies", "3"]
    done = subprocess.run(
        [*BKCHAOS, "test", "--runtime", "local", "--store", str(store), *args, *crashes],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    run_dir = (store / "latest").resolve()
    ops = [json.loads(line) for line in (run_dir / "history.jsonl").read_text().splitlines()]
    bookie_ids = _bookie_ids(run_dir)
    for f, k, proof in (("kill", 0, {"gone": True}), ("pause", 1, {"state": "T"})):
        invoke, completed = (
            next(op for op in ops if op["f"] == f and op["type"] == kind)
            for kind in ("invoke", "info")
        )
        assert invoke["value"]["on"] == "recovery-started"
        timing = invoke["value"]["probe_timing"]
        assert timing["node"] in ("c1", "c2")  # the recovery probes are the agents'
        assert timing["written_s"] <= timing["read_s"] <= invoke["time"] / 1e9
        assert invoke["time"] / 1e9 - timing["read_s"] <= LATE_S + 0.01
        (node,) = invoke["value"]["nodes"]
        agent_log = run_dir / "logs" / timing["node"] / "agent.log"
        recoveries = _probe_lines(agent_log, "recovery-started")
        assert any(r["bookies"][k] == bookie_ids[node] for r in recoveries), (node, recoveries)
        assert proof.items() <= completed["value"]["proof"][node].items(), completed


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
