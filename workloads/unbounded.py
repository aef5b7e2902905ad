"""The `unbounded` workload: one unbounded ledger per stream, handed over by terms.

Each stream is a single unbounded ledger (reference 000). Its designated writer appends;
a process taking the stream over calls the client's takeover (`take-over`): the term goes
up, which fences the previous writer, the previous term is recovered and ended by a
truncating no-op, and the new writer appends after it. Appends carry the writer's term so
the agent sends them through that writer's own handle, even when the new and the old
writer share an agent. The ledger is one stream (`seq` 0) whose order is its entry order,
so `realtime-order` applies across terms. Readers only follow the tail: a closed read
would recover, and so close, the stream.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from workloads.common import Op
from workloads.streams import Stream, StreamWorkload


@dataclass
class UnboundedWorkload(StreamWorkload):
    audits_copies = False
    """Terms end in a truncating no-op and fragments rotate: which copies an unbounded
    ledger must keep is reference 000's protocol, which the copies audit does not model."""

    def acquire_op(self, p: int, stream: Stream) -> Op:
        if stream.ledger is None:
            return self.create(mode="unbounded", stream=stream.name, seq=0)
        return {"f": "take-over", "value": {"ledger": stream.ledger, "stream": stream.name}}

    def acquired(self, p: int, stream: Stream, op: Op, value: Any) -> None:
        if op["f"] == "create":
            stream.ledger, stream.seq = value["ledger"], 0
        self.start_writing(p, stream, stream.ledger, seq=0, term=value["term"])
