"""Cycles that point at the cause: the shortest one (detours through the realtime
frontier replaced by the direct realtime edge), a sentence per step, and a cycle that
only restates a lost append marked as derived from it."""

from __future__ import annotations

from typing import Any

from checkers import check


def lost_append_long_before_the_read(between: int) -> list[dict[str, Any]]:
    """p-lost acked at entry 1 of ledger 7, then `between` appends to ledger 8 one after
    another (each by its own process), then a closed read of 7 without entry 1."""
    ops: list[dict[str, Any]] = []

    def call(process: int, f: str, value: dict[str, Any], done: dict[str, Any]) -> None:
        n = len(ops)
        ops.append({"index": n, "time": n, "type": "invoke", "process": process, "f": f,
                    "value": value})  # fmt: skip
        ops.append({"index": n + 1, "time": n + 1, "type": "ok", "process": process, "f": f,
                    "value": {**value, **done}})  # fmt: skip

    call(0, "append", {"ledger": 7, "payload": "p0"}, {"entry": 0})
    call(0, "append", {"ledger": 7, "payload": "p-lost"}, {"entry": 1})
    for i in range(between):
        call(10 + i, "append", {"ledger": 8, "payload": f"q{i}"}, {"entry": i})
    call(1, "read", {"ledger": 8, "mode": "closed"},
         {"lac": between - 1, "entries": [[i, f"q{i}"] for i in range(between)]})  # fmt: skip
    call(2, "read", {"ledger": 7, "mode": "closed"}, {"lac": 0, "entries": [[0, "p0"]]})
    return ops


def test_a_lost_append_long_acknowledged_is_a_two_step_cycle_derived_from_it() -> None:
    result = check(lost_append_long_before_the_read(between=40))
    assert result["anomaly_types"] == ["G-single-realtime", "lost-append", "truncated-ledger"]
    (cycle,) = result["anomalies"]["G-single-realtime"]
    assert [(e["from"], e["to"], e["kind"]) for e in cycle["cycle"]] == [
        (2, 86, "realtime"),
        (86, 2, "rw"),
    ]
    assert cycle["derived_from"] == [{"anomaly": "lost-append", "ledger": 7, "entry": 1}]
    first, second = (e["step"] for e in cycle["cycle"])
    assert first.startswith("op 2 (append of 'p-lost') precedes op 86 (closed read of ledger 7)")
    assert "completed (op 3) before op 86 was invoked (realtime)" in first
    assert "op 86 read ledger 7 closed without op 2's acked entry 1 (rw)" in second


def test_a_cycle_not_resting_on_a_closed_read_is_not_derived() -> None:
    ops = [
        {"index": 0, "time": 0, "type": "invoke", "process": 0, "f": "read",
         "value": {"ledger": 7, "mode": "tail"}},
        {"index": 1, "time": 1, "type": "ok", "process": 0, "f": "read",
         "value": {"ledger": 7, "mode": "tail", "lac": 0, "entries": [[0, "pb"]]}},
        {"index": 2, "time": 2, "type": "invoke", "process": 1, "f": "append",
         "value": {"ledger": 7, "payload": "pb"}},
        {"index": 3, "time": 3, "type": "ok", "process": 1, "f": "append",
         "value": {"ledger": 7, "payload": "pb", "entry": 0}},
    ]  # fmt: skip
    (cycle,) = check(ops)["anomalies"]["G1c-realtime"]
    assert "derived_from" not in cycle
