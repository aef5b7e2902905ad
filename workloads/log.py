"""The `log` workload: streams made of successive ledgers, as Pulsar's managed ledger and
DistributedLog build them.

A stream is a sequence of ledgers (`seq` 0, 1, …) with one designated writer appending
to the current one. The writer rolls over now and then (closes its ledger and creates
the next); a process taking the stream over first fences the current ledger by
recovering it, then creates the next. Either way ledger k is closed before ledger k+1
exists, so every append acknowledged before another was invoked must come first in
stream order `(seq, entry)`: the stream checker's `realtime-order`. Creates and appends
carry `stream` and `seq` (docs/history.md §2). Readers follow the current ledgers' tails
and now and then read a sealed ledger closed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from core.generator import Context
from workloads.common import Op
from workloads.streams import Stream, StreamWorkload, Writing


@dataclass
class LogWorkload(StreamWorkload):
    rollover_fraction: float = 0.01
    """Per append of a designated writer: chance it closes its ledger and starts the next."""
    closed_read_fraction: float = 0.05
    sealed: list[Any] = field(default_factory=list)

    def writer_op(self, ctx: Context, mine: Writing) -> Op:
        p: int = ctx.process  # type: ignore[assignment]
        if mine.stream.owner == p and ctx.rng.random() < self.rollover_fraction:
            self.acquiring[p] = mine.stream
            return self.acquire_op(p, mine.stream)
        return super().writer_op(ctx, mine)

    def reader_op(self, ctx: Context) -> Op | Any:
        if self.sealed and ctx.rng.random() < self.closed_read_fraction:
            return {"f": "read", "value": {"ledger": ctx.rng.choice(self.sealed), "mode": "closed"}}
        return super().reader_op(ctx)

    def acquire_op(self, p: int, stream: Stream) -> Op:
        """Seal the current ledger (close it if `p` writes it, else recover it), then
        create the next."""
        if not stream.sealed:
            mine = self.writing.get(p)
            f = "close" if mine is not None and mine.ledger == stream.ledger else "recover"
            return {"f": f, "value": {"ledger": stream.ledger, "stream": stream.name}}
        return self.create(stream=stream.name, seq=stream.seq + 1)

    def acquired(self, p: int, stream: Stream, op: Op, value: Any) -> None:
        if op["f"] == "create":
            stream.ledger, stream.seq, stream.sealed = value["ledger"], value["seq"], False
            self.start_writing(p, stream, value["ledger"], seq=value["seq"])
            return
        if op["f"] == "close":
            self.writing.pop(p, None)
        if value["ledger"] == stream.ledger and not stream.sealed:
            stream.sealed = True
            self.sealed.append(stream.ledger)
