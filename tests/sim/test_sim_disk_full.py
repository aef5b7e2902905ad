"""The `disk-full` fault in the simulation: a filled ledger disk turns its bookie read-only
(it refuses adds, the writers move on), freeing it turns it writable again; the heal frees
a disk still full, and the progress check after it then makes progress."""

from __future__ import annotations

import json
from pathlib import Path

from harness.runtime.sim import SimSpec, run_sim


def _nemesis_ops(run_dir: Path) -> list[dict]:
    lines = (run_dir / "history.jsonl").read_text().splitlines()
    return [op for op in map(json.loads, lines) if op["process"] == "nemesis"]


def test_a_filled_disk_turns_its_bookie_read_only_and_a_freed_one_writable(tmp_path: Path) -> None:
    schedule = (
        {"at": 0.5, "f": "fill-disk", "value": {"nodes": ["b1"]}},
        {"at": 2.5, "f": "free-disk", "value": {"nodes": ["b1"]}},
    )
    run = run_sim(SimSpec(seed=1, bookies=4, time_limit=3.0, schedule=schedule), tmp_path)
    assert run.results["valid"] is True, run.results["anomaly_types"]
    fill, free = (op["value"]["proof"]["b1"] for op in _nemesis_ops(tmp_path) if "proof" in (
        op.get("value") or {}) and op["f"] in ("fill-disk", "free-disk"))  # fmt: skip
    assert fill["mode"] == "disk-usage" and fill["usage"] >= 0.95
    assert fill["registered"].endswith("/available/readonly/b1:3181")
    assert free["mode"] == "writable" and free["registered"].endswith("/available/b1:3181")
    coverage = run.results["coverage"]
    assert coverage["bookie-readonly"] >= 1 and coverage["bookie-readonly-add-refused"] >= 1


def test_the_heal_frees_a_full_disk_and_the_cluster_makes_progress(tmp_path: Path) -> None:
    """Three bookies for an ensemble of three: with b2 read-only no ledger can be made,
    so the progress check passes only if the heal really turned it writable."""
    schedule = ({"at": 0.5, "f": "fill-disk", "value": {"nodes": ["b2"]}},)
    run = run_sim(SimSpec(seed=2, time_limit=2.0, schedule=schedule), tmp_path)
    heal = [op for op in _nemesis_ops(tmp_path) if op["f"] == "heal"][-1]
    (freed,) = [p for p in heal["value"]["proof"] if "b2" in p]
    assert freed["b2"]["mode"] == "writable"
    assert run.results["checkers"]["liveness"]["passed_at"] == 1


def test_a_found_test_that_fills_disks_replays_where_that_can_be_done() -> None:
    """Docker cannot fill a bookie's disk (docs/nemeses.md): the search's replay command
    for such a test names the local runtime, or the simulation when local cannot either."""
    fill = ({"at": 0.1, "f": "fill-disk", "value": {"nodes": ["b1"]}},)
    assert SimSpec(schedule=fill).as_replay("docker").runtime == "local"
    cut = ({"at": 0.2, "f": "start-partition", "value": {"nodes": ["b2"]}},)
    assert SimSpec(schedule=fill + cut).as_replay("docker").runtime == "sim"
    assert SimSpec(schedule=cut).as_replay("docker").runtime == "docker"
