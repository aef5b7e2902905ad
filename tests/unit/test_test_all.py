"""`bkchaos test-all` (with the runs faked) and the harness benchmark's measurement."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from harness.bench.harness import measure
from harness.cli import cli
from harness.cli import test as test_cli
from harness.testspec import TestSpec


def _results(valid: Any, anomalies: tuple[str, ...] = ()) -> dict[str, Any]:
    return {
        "valid": valid,
        "anomaly_types": list(anomalies),
        "anomalies": {a: [{"explanation": "x"}] for a in anomalies},
        "stats": {"ops": 2, "ok": 1, "fail": 0, "info": 0, "ledgers": 1},
        "checkers": {"nemesis": {"errors": []}},
    }


def test_matrix_runs_every_cell_and_exits_with_the_worst(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    ran: list[TestSpec] = []

    def fake_run(spec: TestSpec, on_progress: Any = None) -> tuple[Path, dict[str, Any]]:
        ran.append(spec)
        if spec.workload == "tail" and spec.nemesis == ("kill",):
            raise RuntimeError("boom")
        verdict = {"log": True, "tail": "unknown"}[spec.workload]
        return tmp_path / spec.name, _results(verdict)

    monkeypatch.setattr(test_cli, "run_test", fake_run)
    args = ["test-all", "--workloads", "log,tail", "--nemeses", "none;kill", "--seed", "3"]
    done = CliRunner().invoke(cli, args, standalone_mode=False)
    assert done.exception is None, done.output
    assert done.return_value == 255  # the crashed cell is the worst
    assert [(s.workload, s.nemesis, s.seed) for s in ran] == [
        ("log", (), 3),
        ("log", ("kill",), 3),
        ("tail", (), 3),
        ("tail", ("kill",), 3),
    ]
    assert "CRASHED" in done.output and "UNKNOWN" in done.output


def test_worst_exit_code_ranks_invalid_over_unknown_over_valid() -> None:
    assert test_cli.worst([0, 2, 0]) == 2
    assert test_cli.worst([2, 1, 0]) == 1
    assert test_cli.worst([1, 254]) == 254


def test_bench_measures_completions_from_first_invoke_to_the_heal(tmp_path: Path) -> None:
    ops = [
        {"time": 0, "process": "nemesis", "f": "kill", "type": "invoke"},
        {"time": 1_000_000_000, "process": 0, "f": "append", "type": "invoke"},
        {"time": 1_500_000_000, "process": 0, "f": "append", "type": "ok"},
        {"time": 2_000_000_000, "process": 1, "f": "read", "type": "invoke"},
        {"time": 2_500_000_000, "process": 1, "f": "read", "type": "fail"},
        {"time": 3_000_000_000, "process": "nemesis", "f": "heal", "type": "invoke"},
        {"time": 4_000_000_000, "process": 9, "f": "read", "type": "ok"},
    ]
    history = tmp_path / "history.jsonl"
    history.write_text("".join(json.dumps(op) + "\n" for op in ops))
    figures = measure(history)
    assert figures == {
        "completions": 2,
        "measured_s": 2.0,
        "ops_per_s": 1.0,
        "ok": 1,
        "fail": 1,
        "info": 0,
    }
