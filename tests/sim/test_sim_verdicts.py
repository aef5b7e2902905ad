"""`bkchaos test --runtime sim` and a later `bkchaos check RUN_DIR` give one verdict, and
the same seed writes a byte-identical history in processes with different hash seeds
(docs/history.md §7). Each run is a real CLI process, as a user would start it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.sim

ROOT = Path(__file__).resolve().parents[2]
UNPROVEN = [  # pausing a killed bookie cannot be proven: the run must be unknown
    {"at": 0.3, "f": "start-partition", "value": {"nodes": ["b1"], "grudge": "bridge"}},
    {"at": 0.6, "f": "kill", "value": {"nodes": ["b2"]}},
    {"at": 0.8, "f": "pause", "value": {"nodes": ["b2"]}},
    {"at": 1.0, "f": "stop-partition", "value": {"nodes": ["b1"]}},
]


def bkchaos(args: list[str], hash_seed: str = "0") -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONHASHSEED": hash_seed, "PYTHONPATH": str(ROOT)}
    code = "from harness.cli import main; main()"
    return subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, env=env, check=False
    )


def sim_run(store: Path, hash_seed: str, *extra: str) -> tuple[int, Path]:
    done = bkchaos(
        ["test", "--runtime", "sim", "--time-limit", "1.5", "--seed", "11", "--store",
         str(store), *extra],
        hash_seed,
    )  # fmt: skip
    assert done.returncode in (0, 1, 2), done.stdout + done.stderr
    return done.returncode, (store / "latest").resolve()


def test_same_seed_same_bytes_across_hash_seeds_and_check_agrees(tmp_path) -> None:
    faults = ["--nemesis", "partition,clock", "--nemesis-interval", "0.3"]
    code, first = sim_run(tmp_path / "a", "1", *faults)
    _, second = sim_run(tmp_path / "b", "2", *faults)
    history = (first / "history.jsonl").read_bytes()
    assert history == (second / "history.jsonl").read_bytes()
    assert b'"f":"start-partition"' in history  # a grudge map was written
    stored = json.loads((first / "results.json").read_text())
    assert stored["format"] == 1 and json.loads((first / "test.json").read_text())["format"] == 1
    checked = bkchaos(["check", "--json", str(first)])
    assert checked.returncode == code
    result = json.loads(checked.stdout)
    assert result["valid"] == stored["valid"]
    assert result["checkers"]["nemesis"] == stored["checkers"]["nemesis"]
    assert json.loads((first / "results.json").read_text()) == stored  # nothing written


def test_an_unproven_fault_is_unknown_from_test_and_from_check(tmp_path) -> None:
    schedule = tmp_path / "schedule.json"
    schedule.write_text(json.dumps(UNPROVEN))
    code, run = sim_run(tmp_path / "store", "0", "--schedule", str(schedule))
    stored = json.loads((run / "results.json").read_text())
    assert stored["checkers"]["nemesis"]["valid"] == "unknown"
    assert any(e.startswith("pause: ") for e in stored["checkers"]["nemesis"]["errors"])
    assert code == {True: 0, False: 1, "unknown": 2}[stored["valid"]] != 0
    checked = bkchaos(["check", str(run), "--write"])
    assert checked.returncode == code
    assert "fault not proven: pause: " in checked.stdout
    rewritten = json.loads((run / "results.json").read_text())
    assert rewritten["sim"] == stored["sim"]  # --write keeps what a history cannot give
    assert rewritten["valid"] == stored["valid"]
