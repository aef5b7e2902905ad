"""Each new workload, end to end through `bkchaos test` under kills and pauses, in the
simulation (the same workload, client and bookie code as real processes, in virtual
time): a clean build must check valid (a false positive is the worst outcome), and the run
must have done what the workload is for (takeovers, terms, long polls, overlapping
recoveries). Kills and pauses of real processes: tests/integration/test_chaos_local.py."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from harness.cli import main


def _pairs(history: Path) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(invoke, completion) of every client op, in completion order."""
    pending: dict[Any, dict[str, Any]] = {}
    pairs = []
    for line in history.read_text().splitlines():
        op = json.loads(line)
        if op["process"] == "nemesis":
            continue
        if op["type"] == "invoke":
            pending[op["process"]] = op
        else:
            pairs.append((pending.pop(op["process"]), op))
    return pairs


def _overlapping_recoveries(pairs: list[tuple[dict, dict]]) -> int:
    """How many recoveries (recover, or closed read) overlapped another of the same ledger."""
    spans = [
        (inv["value"]["ledger"], inv["time"], done["time"])
        for inv, done in pairs
        if inv["f"] == "recover" or inv["value"].get("mode") == "closed"
    ]
    return sum(
        any(l1 == l2 and s2 < e1 and s1 < e2 for j, (l2, s2, e2) in enumerate(spans) if j != i)
        for i, (l1, s1, e1) in enumerate(spans)
    )


def _did_its_job(workload: str, pairs: list[tuple[dict, dict]]) -> None:
    ok = Counter(inv["f"] for inv, done in pairs if done["type"] == "ok")
    if workload == "log":
        seqs = [done["value"]["seq"] for inv, done in pairs if inv["f"] == "create"]
        assert ok["recover"] + ok["close"] >= 1 and max(seqs, default=0) >= 1, ok
    elif workload == "unbounded":
        assert ok["take-over"] >= 1, ok
        assert any(isinstance(done["value"]["ledger"], str) for _, done in pairs[:5])  # 128-bit
    elif workload == "tail":
        polls = [inv for inv, done in pairs if inv["value"].get("wait_ms") and done["type"] == "ok"]
        assert ok["read-lac"] >= 10 and len(polls) >= 20, ok
    elif workload == "recovery-race":
        assert _overlapping_recoveries(pairs) >= 2


@pytest.mark.parametrize(
    ("workload", "extra"),
    [
        ("log", []),
        ("unbounded", ["--id-bits", "128", "--entry-size", "256"]),
        ("tail", []),
        ("recovery-race", []),
    ],
)
def test_clean_run_under_kills_and_pauses_checks_valid(
    workload: str, extra: list[str], tmp_path: Path
) -> None:
    store = tmp_path / "store"
    args = ["--workload", workload, "--nemesis", "kill,pause", "--nemesis-interval", "3", *extra]
    args += ["--runtime", "sim", "--time-limit", "8", "--seed", "5"]
    with pytest.raises(SystemExit) as exited:
        main(["test", "--store", str(store), *args])
    run_dir = (store / "latest").resolve()
    results = json.loads((run_dir / "results.json").read_text())
    assert exited.value.code == 0, (run_dir, results["anomalies"])
    assert results["valid"] is True
    assert results["stats"]["appends_ok"] > 50
    assert results["checkers"]["nemesis"]["faults"] >= 2
    _did_its_job(workload, _pairs(run_dir / "history.jsonl"))
