"""A short soak in the simulation: the workload rolls over every epoch while the faults
go on, and the streaming checker cuts the history between epochs (docs/history.md §9)."""

from __future__ import annotations

import json
from pathlib import Path

from checkers import check
from checkers.history import read_ops
from checkers.segments import index_segments
from harness.runner import run_test
from harness.testspec import TestSpec


def test_a_short_soak_rolls_over_and_checks_in_segments(tmp_path: Path) -> None:
    spec = TestSpec(
        runtime="sim",
        workload="log",
        time_limit=12.0,
        soak_epoch=4.0,
        nemesis=("kill",),
        nemesis_interval=1.0,
        seed=5,
        store=str(tmp_path),
    )
    run_dir, results = run_test(spec)
    assert results["valid"] is True, results["anomaly_types"]
    history = run_dir / "history.jsonl"
    ops = [json.loads(line) for line in history.read_text().splitlines()]
    created = {
        op["value"].get("stream") for op in ops if op["f"] == "create" and op["type"] == "ok"
    }
    assert {"s0", "s0.1", "s0.2"} <= created  # fresh streams every epoch
    faults = [op["time"] / 1e9 for op in ops if op["process"] == "nemesis" and op["f"] == "kill"]
    assert max(faults) > 2 * spec.soak_epoch  # faults go on after the first epochs
    _, segments = index_segments(read_ops(history), 1)  # no later op refers back
    assert segments.count >= 3
    assert json.dumps(check(history, segment_lines=1)) == json.dumps(check(history))
