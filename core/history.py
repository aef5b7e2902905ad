"""Writes `history.jsonl` as the test runs (docs/history.md §1).

Each op is one JSON line, written and flushed the moment the controller observes it, so a
run that crashes or is interrupted still leaves a valid, checkable prefix. `index` counts
from 0 in file order; `time` is nanoseconds since the test started, on the controller's
monotonic clock.

Lines are canonical: the op's fields in the spec's order, and every map inside `value` in
sorted key order (a grudge or a skew map is built from sets and dicts filled in whatever
order the run produced), so the same seed in the simulation writes a byte-identical file
in any process, whatever its PYTHONHASHSEED (docs/history.md §7).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

OP_TYPES = frozenset({"invoke", "ok", "fail", "info"})


def canonical(value: Any) -> Any:
    """`value` with every map's keys in sorted order (compared as strings, as JSON writes
    them), at any depth; lists keep their order, which means something."""
    if isinstance(value, dict):
        return {k: canonical(value[k]) for k in sorted(value, key=str)}
    if isinstance(value, list | tuple):
        return [canonical(v) for v in value]
    return value


class HistoryWriter:
    """Appends ops to one history file; use as a context manager to close it."""

    def __init__(self, path: Path, clock: Callable[[], int] = time.monotonic_ns) -> None:
        self.path = path
        self._file = path.open("a", encoding="utf-8")
        self._clock = clock
        self._start = clock()
        self._index = 0

    def elapsed_s(self) -> float:
        return (self._clock() - self._start) / 1e9

    def record(
        self,
        type: str,
        process: int | str,
        f: str,
        value: Any = None,
        error: str | None = None,
        node: str | None = None,
    ) -> dict[str, Any]:
        """Write one op and return it (with its index and time)."""
        if type not in OP_TYPES:
            raise ValueError(f"op type must be one of {sorted(OP_TYPES)}, not {type!r}")
        op: dict[str, Any] = {
            "index": self._index,
            "time": self._clock() - self._start,
            "type": type,
            "process": process,
            "f": f,
            "value": canonical(value),
        }
        if error is not None:
            op["error"] = error
        if node is not None:
            op["node"] = node
        self._file.write(json.dumps(op, separators=(",", ":")) + "\n")
        self._file.flush()
        self._index += 1
        return op

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> HistoryWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
