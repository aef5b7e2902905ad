"""The history writer: spec-shaped lines, increasing index and time, flushed per op."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest

from core.history import HistoryWriter


def test_lines_follow_the_spec_and_are_readable_before_close(tmp_path: Path) -> None:
    ticks = itertools.count(1000, 500)
    path = tmp_path / "history.jsonl"
    writer = HistoryWriter(path, clock=lambda: next(ticks))
    writer.record("invoke", 0, "append", {"ledger": 7, "payload": "p0"})
    writer.record("ok", 0, "append", {"ledger": 7, "payload": "p0", "entry": 0}, node="c1")
    writer.record("info", "nemesis", "kill", {"node": "b1"}, error="ETIMEOUT")
    lines = [json.loads(line) for line in path.read_text().splitlines()]  # before close
    writer.close()
    assert [op["index"] for op in lines] == [0, 1, 2]
    assert [op["time"] for op in lines] == [500, 1000, 1500]
    assert lines[1] == {
        "index": 1,
        "time": 1000,
        "type": "ok",
        "process": 0,
        "f": "append",
        "value": {"ledger": 7, "payload": "p0", "entry": 0},
        "node": "c1",
    }
    assert lines[2]["error"] == "ETIMEOUT" and "node" not in lines[2]


def test_unknown_op_type_is_refused(tmp_path: Path) -> None:
    with HistoryWriter(tmp_path / "h.jsonl") as writer, pytest.raises(ValueError, match="ok"):
        writer.record("done", 0, "append")
