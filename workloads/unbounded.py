"""The `unbounded` workload: one unbounded ledger per stream, handed over by terms.

Each stream is a single unbounded ledger (reference 000). Its designated writer appends;
a process taking the stream over calls the client's takeover (`take-over`): the term goes
up, which fences the previous writer, the previous term is recovered and ended by a
truncating no-op, and the new writer appends after it. Appends carry the writer's term so
the agent sends them through that writer's own handle, even when the new and the old
writer share an agent. The ledger is one stream (`seq` 0) whose order is its entry order,
so `realtime-order` applies across terms. Readers only follow the tail: a closed read
would recover, and so close, the stream. Each reader follows it as a DistributedLog or
Pulsar reader does, from where its last read stopped, so every entry is read soon after
it is acknowledged — the first entries of a new term included, which are where a replica
that kept the old term's tail answers wrongly (reference 000's divergence).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from core.generator import Context
from workloads.common import Op
from workloads.streams import Stream, StreamWorkload

CATCH_UP = 256
"""How far behind the newest acknowledged entry a reader may fall and still read every
entry since its last read; one further behind skips ahead to there (a read stays cheap)."""


@dataclass
class UnboundedWorkload(StreamWorkload):
    cursors: dict[tuple[int, Any], int] = field(default_factory=dict)
    """(reader process, ledger) -> the first entry its next read asks for."""

    def reader_op(self, ctx: Context) -> Op | Any:
        op = super().reader_op(ctx)  # a new reader starts at the usual tail
        if not isinstance(op, dict):
            return op
        cursor = self.cursors.get((ctx.process, op["value"]["ledger"]))
        if cursor is not None:
            behind = self.acked.get(op["value"]["ledger"], -1) - CATCH_UP
            op["value"]["from"] = max(cursor, behind)
        return op

    def learn(self, process: int, op: Op, kind: str, value: Any, error: str | None) -> None:
        if op["f"] == "read" and kind == "ok":
            key = (process, op["value"]["ledger"])
            self.cursors[key] = max(self.cursors.get(key, 0), value["lac"] + 1)
        super().learn(process, op, kind, value, error)

    def acquire_op(self, p: int, stream: Stream) -> Op:
        if stream.ledger is None:
            return self.create(mode="unbounded", stream=stream.name, seq=0)
        return {"f": "take-over", "value": {"ledger": stream.ledger, "stream": stream.name}}

    def acquired(self, p: int, stream: Stream, op: Op, value: Any) -> None:
        if op["f"] == "create":
            stream.ledger, stream.seq = value["ledger"], 0
        self.start_writing(p, stream, stream.ledger, seq=0, term=value["term"])
