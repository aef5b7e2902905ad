"""Structured log lines: one JSON object per line, with `ts`, `event` and fields.

Why JSON lines: the harness, the nemeses and the local launcher read these logs (the
launcher waits for `ready`, the benchmark reads `journal-stats`), and a reader should
never have to parse prose. Events emitted by the bookie:

``cookie-checked`` (action new / ok / restore-zk), ``cookie-refused`` (dir, reason,
advice), ``journal-replayed`` (count), ``journal-damaged`` (file, offset, reason),
``listening``, ``ready`` (znode), ``fenced`` (ledger), ``term-advanced`` (ledger, term,
was), ``truncated`` (ledger, after), ``readonly`` (reason), ``writable``,
``protocol-error`` (peer, error, action answered / closed), ``corrupt-entry`` (ledger,
entry, error), ``checkpoint-failed``, ``registration-failed``, ``journal-stats`` (fsyncs,
batches; every 0.5 s while they change), ``stopping``, ``stopped``, ``log-capped``
(max_bytes: past it, only the rare lifecycle events in ALWAYS_LOGGED are written); and
``probe`` (probe, and the probe's fields) for every protocol probe reached
(bookie_image/probes.py; a per-add probe only the first time), which the harness counts as
coverage.

A log is capped at MAX_LOG_BYTES, so a peer that floods protocol errors cannot fill the
disk the bookie's data shares.
"""

from __future__ import annotations

import json
from typing import Any, TextIO

from .env import Clock, SystemClock

MAX_LOG_BYTES = 64 << 20
"""Far above what a day's run writes (`journal-stats` twice a second is ~17 MB a day)."""
ALWAYS_LOGGED = frozenset(
    {"ready", "readonly", "writable", "cookie-refused", "stopping", "stopped", "log-capped"}
)
"""Events written past the cap: a handful per process lifetime, and what readers wait for."""


class EventLog:
    def __init__(
        self,
        stream: TextIO,
        clock: Clock | None = None,
        max_bytes: int = MAX_LOG_BYTES,
        **common: Any,
    ) -> None:
        self._stream = stream
        self._clock = clock or SystemClock()
        self._common = common
        self._max_bytes = max_bytes
        self._written = 0
        self._capped = False

    def emit(self, event: str, **fields: Any) -> None:
        if self._written >= self._max_bytes and event not in ALWAYS_LOGGED:
            if not self._capped:
                self._capped = True
                self.emit("log-capped", max_bytes=self._max_bytes)
            return
        record = {"ts": round(self._clock.time(), 6), "event": event, **self._common, **fields}
        line = json.dumps(record, default=str) + "\n"
        self._written += len(line)
        self._stream.write(line)
        self._stream.flush()
