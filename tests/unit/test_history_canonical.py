"""History lines are canonical: the op's fields in the spec's order, every map inside
`value` in sorted key order at any depth, lists as they are (docs/history.md §1)."""

from __future__ import annotations

import itertools
from pathlib import Path

from core.history import HistoryWriter, canonical


def test_maps_built_in_any_order_write_the_same_bytes(tmp_path: Path) -> None:
    lines = []
    for order in ({"c2": ["b2"], "b1": ["b2", "c1"]}, {"b1": ["b2", "c1"], "c2": ["b2"]}):
        path = tmp_path / f"{len(lines)}.jsonl"
        clock = itertools.count(0, 5).__next__
        value = {"nodes": ["b1"], "grudge": order, "proof": {"z": 1, "a": 2}}
        with HistoryWriter(path, clock=clock) as writer:
            writer.record("info", "nemesis", "start-partition", value)
        lines.append(path.read_bytes())
    assert lines[0] == lines[1]
    assert lines[0] == (
        b'{"index":0,"time":5,"type":"info","process":"nemesis","f":"start-partition",'
        b'"value":{"grudge":{"b1":["b2","c1"],"c2":["b2"]},"nodes":["b1"],'
        b'"proof":{"a":2,"z":1}}}\n'
    )


def test_lists_keep_their_order_and_mixed_keys_sort_as_text() -> None:
    assert canonical({2: [3, 1], "10": (None,)}) == {"10": [None], 2: [3, 1]}
