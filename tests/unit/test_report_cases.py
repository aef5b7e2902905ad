"""Reports that point at the cause: root anomalies before the cycles that restate them,
a per-ledger roll-up, and per case the ensemble, the entry's write set and the faults
in force between its first and last op."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import checkers
from harness.report.cases import Ensembles, faults_during, ledger_rollup
from harness.report.figures import Fault
from harness.report.render import write_report
from harness.report.run import Call, Op


def test_the_write_set_is_the_round_robin_of_the_covering_fragment() -> None:
    ensembles = Ensembles([[0, ["b1", "b2", "b3"]], [5, ["b1", "b4", "b3"]]], 2)
    assert ensembles.at(1) == {"first": 0, "bookies": ["b1", "b2", "b3"], "write_set": ["b2", "b3"]}
    assert ensembles.at(6)["write_set"] == ["b1", "b4"]  # (entry + i) mod E
    assert Ensembles([[3, ["b1"]]], 1).at(0) is None


def test_faults_in_force_overlap_the_span_of_the_cases_ops() -> None:
    def call(start: int, end: int) -> Call:
        return Call(Op(0, start, "invoke", 0, "append"), Op(1, end, "ok", 0, "append"), "ok")

    faults = [Fault("kill b1", 1.0, 2.0, 10, None), Fault("pause b2", 5.0, 6.0, 20, None)]
    assert faults_during([call(1_500_000_000, 1_600_000_000), call(3_000_000_000, 4_000_000_000)],
                         faults) == faults[:1]  # fmt: skip
    assert faults_during([call(0, 5_500_000_000)], faults) == faults


def test_the_rollup_counts_cases_per_ledger_most_affected_first() -> None:
    anomalies = {
        "dirty-read": [{"ledger": 7, "entry": e} for e in (9, 4, 12)],
        "lost-append": [{"ledger": 8, "entry": 2}, {"ledger": 7, "entry": 3}],
        "G-single": [{"cycle": []}],
    }
    assert ledger_rollup(anomalies) == [
        {"ledger": 7, "counts": {"dirty-read": 3, "lost-append": 1}, "total": 4,
         "first_entry": 3, "last_entry": 12},
        {"ledger": 8, "counts": {"lost-append": 1}, "total": 1, "first_entry": 2,
         "last_entry": 2},
    ]  # fmt: skip


def _history() -> list[dict[str, Any]]:
    """Ledger 7 on b1 b2 b3 (WQ 2); p1 acked at entry 1 while b2 is killed, then missing
    from the closed read: a lost append, and the G-single-realtime cycle restating it."""
    ops: list[dict[str, Any]] = []

    def call(process: Any, f: str, value: Any, kind: str, done: Any) -> None:
        n = len(ops)
        ops.append({"index": n, "time": n * 10**9, "type": "invoke", "process": process,
                    "f": f, "value": value})  # fmt: skip
        ops.append({"index": n + 1, "time": n * 10**9 + 10**8, "type": kind,
                    "process": process, "f": f, "value": {**(value or {}), **done}})  # fmt: skip

    call(0, "create", {}, "ok", {"ledger": 7, "ensemble": 3, "wq": 2, "aq": 2,
                                 "ensembles": [[0, ["b1", "b2", "b3"]]]})  # fmt: skip
    call(0, "append", {"ledger": 7, "payload": "p0"}, "ok", {"entry": 0})
    call("nemesis", "kill", {"nodes": ["b2"]}, "info", {"proof": {"b2": "killed"}})
    call(0, "append", {"ledger": 7, "payload": "p1"}, "ok", {"entry": 1})
    call("nemesis", "restart", {"nodes": ["b2"]}, "info", {"proof": {"b2": "up"}})
    call("nemesis", "heal", None, "info", {"proof": []})
    call(1, "read", {"ledger": 7, "mode": "closed"}, "ok", {"lac": 0, "entries": [[0, "p0"]]})
    return ops


def test_a_lost_append_reads_root_first_with_its_bookies_and_faults(tmp_path: Path) -> None:
    run_dir = tmp_path / "t" / "20261127T000000"
    run_dir.mkdir(parents=True)
    history = run_dir / "history.jsonl"
    history.write_text("".join(json.dumps(op) + "\n" for op in _history()))
    results = checkers.check(history)
    assert results["anomaly_types"] == ["G-single-realtime", "lost-append", "truncated-ledger"]
    (results_path := run_dir / "results.json").write_text(json.dumps(results))
    html = write_report(run_dir).read_text()
    order = [html.index(f'id="anomaly-{name}"') for name in
             ("lost-append", "truncated-ledger", "G-single-realtime")]  # fmt: skip
    assert order == sorted(order)
    assert html.index('id="ledger-rollup"') < order[0]
    assert "lost-append</a> × 1, <a" in html
    assert "Ensemble from entry 0: <code>b1, b2, b3</code>" in html
    assert "write set of entry 1: <code>b2, b3</code>" in html
    assert 'href="timeline.html#op-4">kill b2</a>' in html
    assert "Derived: this cycle only restates the lost-append of ledger 7 entry 1" in html
    assert "timeline.html#op-6,7,12,13,4" in html  # the case's ops and the fault
    assert results_path.is_file()


def test_a_case_whose_write_quorum_is_unknown_shows_its_ensemble_alone(tmp_path: Path) -> None:
    """A create without `wq` (an older history): the report shows the fragment and no
    write set, instead of failing to render."""
    ops = _history()
    del ops[1]["value"]["wq"]
    run_dir = tmp_path / "t" / "20261127T000000"
    run_dir.mkdir(parents=True)
    history = run_dir / "history.jsonl"
    history.write_text("".join(json.dumps(op) + "\n" for op in ops))
    (run_dir / "results.json").write_text(json.dumps(checkers.check(history)))
    html = write_report(run_dir).read_text()
    assert "Ensemble from entry 0: <code>b1, b2, b3</code>" in html
    assert "write set of entry" not in html
