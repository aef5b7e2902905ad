"""Writes `history.jsonl` as the test runs (shared/spec/history.md §1).

Each op is one JSON line, written and flushed the moment the controller observes it, so a
run that crashes or is interrupted still leaves a valid, checkable prefix. `index` counts
from 0 in file order; `time` is nanoseconds since the test started, on the controller's
monotonic clock.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

OP_TYPES = frozenset({"invoke", "ok", "fail", "info"})


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
            "value": value,
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
