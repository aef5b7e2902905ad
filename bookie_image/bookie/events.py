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
batches; every 0.5 s while they change), ``stopping``, ``stopped``; and ``probe`` (probe,
and the probe's fields) for every protocol probe reached (bookie_image/probes.py), which
the harness counts as coverage.
"""

from __future__ import annotations

import json
from typing import Any, TextIO

from .env import Clock, SystemClock


class EventLog:
    def __init__(self, stream: TextIO, clock: Clock | None = None, **common: Any) -> None:
        self._stream = stream
        self._clock = clock or SystemClock()
        self._common = common

    def emit(self, event: str, **fields: Any) -> None:
        record = {"ts": round(self._clock.time(), 6), "event": event, **self._common, **fields}
        self._stream.write(json.dumps(record, default=str) + "\n")
        self._stream.flush()
