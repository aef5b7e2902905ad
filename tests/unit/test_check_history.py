"""The history reader and pairing: strict, except for a crash-truncated last line."""

from __future__ import annotations

import json
import types
from pathlib import Path
from typing import Any

import pytest

import checkers
import checkers.history
from checkers import HistoryError, check, index_history, read_ops
from checkers.compose import compose
from checkers.history import ops_from_dicts
from tests.helpers.histories import APPEND_THEN_CLOSED_READ

GOOD = APPEND_THEN_CLOSED_READ


def write(tmp_path: Path, ops: list[Any], tail: bytes = b"") -> Path:
    path = tmp_path / "history.jsonl"
    lines = [op if isinstance(op, bytes) else json.dumps(op).encode() for op in ops]
    path.write_bytes(b"".join(line + b"\n" for line in lines) + tail)
    return path


def test_reads_every_op_across_chunk_boundaries(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(checkers.history, "_CHUNK", 7)
    assert [op.index for op in read_ops(write(tmp_path, GOOD))] == [0, 1, 2, 3]


def test_truncated_last_line_is_dropped_with_a_warning(tmp_path) -> None:
    path = write(tmp_path, GOOD, tail=b'{"index":4,"time":5,"type":"inv')
    with pytest.warns(UserWarning, match="line 5 is truncated"):
        assert check(path)["valid"] is True


@pytest.mark.parametrize(
    ("line", "message"),
    [
        (b"{not json", "line 3: bad JSON"),
        (b"", "line 3: bad JSON"),
        (b'{"index": 2, "time": 3, "type": "invoke", "process": 1}', "line 3: not an op.*`f`"),
        (b'{"index": 2, "time": 3, "type": "done", "process": 1, "f": "read"}', "line 3: not an"),
    ],
)
def test_a_bad_line_names_its_number(tmp_path, monkeypatch, line: bytes, message: str) -> None:
    monkeypatch.setattr(checkers.history, "_CHUNK", 64)
    path = write(tmp_path, [*GOOD[:2], line, *GOOD[2:]])
    with pytest.raises(HistoryError, match=message):
        list(read_ops(path))


def test_a_truncated_line_that_is_not_last_is_an_error(tmp_path) -> None:
    path = write(tmp_path, [GOOD[0], b'{"index": 1, "ti', GOOD[1]])
    with pytest.raises(HistoryError, match="line 2: bad JSON"):
        list(read_ops(path))


def test_a_last_line_that_parses_but_is_not_an_op_is_an_error(tmp_path) -> None:
    path = write(tmp_path, GOOD, tail=b'{"index": 4}')
    with pytest.raises(HistoryError, match="line 5: not an op"):
        list(read_ops(path))


def _pairing_error(ops: list[dict[str, Any]]) -> str:
    with pytest.raises(HistoryError) as exc:
        index_history(ops_from_dicts(ops))
    return str(exc.value)


def test_completion_without_invoke() -> None:
    assert _pairing_error(GOOD[1:]) == "line 1: ok of process 0 without an invoke"


def test_index_must_increase() -> None:
    ops = [GOOD[0], {**GOOD[1], "index": 0}]
    assert _pairing_error(ops) == "line 2: index 0 does not increase"


def test_one_outstanding_op_per_process() -> None:
    ops = [GOOD[0], {**GOOD[2], "process": 0}]
    assert "process 0 invokes while op 0 is still outstanding" in _pairing_error(ops)


def test_completion_of_another_f() -> None:
    ops = [GOOD[0], {**GOOD[3], "process": 0}]
    assert "completes 'read' but op 0 is 'append'" in _pairing_error(ops)


def test_malformed_value() -> None:
    ops = [GOOD[0], {**GOOD[1], "value": {"ledger": 7}}]
    assert "line 2: op 1 (append) has a malformed value" in _pairing_error(ops)


AUDITED = {"ledger": 7, "last_entry": 1, "wq": 2, "aq": 2, "lacking": []}


@pytest.mark.parametrize(
    "done",
    [
        {"ledger": 7, "last_entry": 1, "wq": 2, "aq": 2},  # no lacking
        {"ledger": 7, "last_entry": 1, "wq": "2", "aq": 2, "lacking": []},
        {"ledger": 7, "last_entry": 1, "wq": 2, "aq": 2, "lacking": [[1, "b1", []]]},
        {**AUDITED, "divergent": {"1": {"b1": "p"}}},
        {**AUDITED, "divergent": [[1, [["b1", "p"]]]]},
        {**AUDITED, "divergent": [["1", {"b1": "p"}]]},
        {**AUDITED, "divergent": [[1, {"b1": 7}]]},
        {**AUDITED, "unbounded": "yes"},
    ],
)
def test_malformed_audit(done: dict) -> None:
    invoke = {"index": 0, "time": 1, "type": "invoke", "process": 0, "f": "audit"}
    ops = [{**invoke, "value": {"ledger": 7}}, {**invoke, "index": 1, "type": "ok", "value": done}]
    assert "line 2: op 1 (audit) has a malformed value" in _pairing_error(ops)


def test_string_process_other_than_nemesis() -> None:
    assert "neither an int nor nemesis" in _pairing_error([{**GOOD[0], "process": "x"}])


def test_public_api_is_exactly_all() -> None:
    public = {
        name
        for name, value in vars(checkers).items()
        if not name.startswith("_") and not isinstance(value, types.ModuleType)
    }
    assert public == set(checkers.__all__)


def test_a_checker_that_raises_is_unknown_not_a_crash() -> None:
    def broken(h: Any) -> dict[str, Any]:
        raise RuntimeError("boom")

    def fine(h: Any) -> dict[str, Any]:
        return {"valid": True}

    r = compose({"broken": broken, "fine": fine})(index_history(ops_from_dicts(GOOD)))
    assert r["valid"] == "unknown"
    assert r["checkers"]["broken"] == {"valid": "unknown", "error": "RuntimeError: boom"}
    assert r["checkers"]["fine"] == {"valid": True}


def test_result_shape_and_perf_windows() -> None:
    ops = [
        *GOOD[:2],
        {"index": 2, "time": 10, "type": "invoke", "process": "nemesis", "f": "kill"},
        {"index": 3, "time": 11, "type": "info", "process": "nemesis", "f": "kill"},
        {"index": 4, "time": 20, "type": "invoke", "process": 0, "f": "append",
         "value": {"ledger": 7, "payload": "p1"}},
        {"index": 5, "time": 50, "type": "ok", "process": 0, "f": "append",
         "value": {"ledger": 7, "payload": "p1", "entry": 1}},
        {"index": 6, "time": 60, "type": "invoke", "process": "nemesis", "f": "restart"},
        {"index": 7, "time": 70, "type": "info", "process": "nemesis", "f": "restart"},
    ]  # fmt: skip
    r = check(ops)
    assert set(r) == {"format", "valid", "anomaly_types", "anomalies", "stats", "checkers"}
    assert r["stats"] == {"ops": 8, "invoke": 4, "ok": 2, "fail": 0, "info": 2, "ledgers": 1,
                          "unchecked_ledgers": [7], "appends_ok": 2}  # fmt: skip
    perf = r["checkers"]["perf"]
    assert perf["fault_windows_ns"] == [(10, 70)]
    assert perf["by_f"]["append"]["calm"]["latency_ms"]["0.5"] == 1e-6
    assert perf["by_f"]["append"]["fault"]["latency_ms"]["1.0"] == 30e-6


def test_cases_are_capped_but_counted() -> None:
    ops = [*GOOD[:2]]
    for n in range(checkers.MAX_CASES + 5):
        ops += [
            {"index": 2 * n + 2, "time": 0, "type": "invoke", "process": 1, "f": "read",
             "value": {"ledger": 7, "mode": "tail"}},
            {"index": 2 * n + 3, "time": 0, "type": "ok", "process": 1, "f": "read",
             "value": {"ledger": 7, "mode": "tail", "lac": -1, "entries": [[0, f"g{n}"]]}},
        ]  # fmt: skip
    r = check(ops)
    assert len(r["anomalies"]["garbage-read"]) == checkers.MAX_CASES
    assert r["checkers"]["ledger"]["anomaly_counts"]["garbage-read"] == checkers.MAX_CASES + 5


@pytest.mark.parametrize(
    ("values", "merged"),
    [([], True), ([True, True], True), ([True, "unknown"], "unknown"),
     (["unknown", False, True], False)],
)  # fmt: skip
def test_merge_valid(values: list[Any], merged: Any) -> None:
    assert checkers.merge_valid(values) == merged


def test_every_nemesis_stop_op_closes_a_fault_window() -> None:
    from checkers.perf import is_healing
    from nemesis.schedule import START_STOP

    for start, stop in START_STOP.values():
        assert is_healing(stop), f"{stop} (which ends {start}) must close a fault window"
        assert not is_healing(start), f"{start} starts a fault"
