"""The `tail` workload: readers following ledgers by their LAC while writers append.

Half the workers write: each creates a ledger, appends to it and now and then closes it
and starts another. The other half follow a ledger being written, as a tailing consumer
does, through the agent's kept read handle: a long-poll `read-lac` (the bookies answer
once the LAC moves past the reader's), a long-poll tail read of the entries from the
reader's position up to the LAC, or a `follow` read — the client's own follower loop
(`ReadHandle.follow`, as a Pulsar or DistributedLog reader tails a ledger) run for a
second, or until the ledger is closed and read to its end. A reader moves on to another
ledger once the one it follows is closed and read to its end, or abandoned by its writer.
Reads must never pass the reader's own LAC nor skip an entry, a reader's LAC must never
go down, and no LAC may pass the ledger's end.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from core.generator import PENDING, Context
from workloads.common import BaseWorkload, Op

LONG_POLL_MS = 500


@dataclass
class Follow:
    """A reader's place in the ledger it follows."""

    ledger: Any
    next: int = 0


@dataclass
class TailWorkload(BaseWorkload):
    rollover_fraction: float = 0.005
    """Per append: chance the writer closes its ledger and starts a new one."""
    long_poll_ms: int = LONG_POLL_MS
    following: dict[int, Follow] = field(default_factory=dict)
    ended: dict[Any, int | None] = field(default_factory=dict)
    """Ledgers no longer written -> their last entry if closed by their writer, else None."""

    def is_writer(self, process: int) -> bool:
        return self.worker(process) < max(1, self.concurrency // 2)

    def next_op(self, ctx: Context) -> Op | Any:
        p: int = ctx.process  # type: ignore[assignment]
        if self.is_writer(p):
            mine = self.writing.get(p)
            if mine is None:
                return self.create()
            if ctx.rng.random() < self.rollover_fraction:
                return {"f": "close", "value": {"ledger": mine}}
            return self.append(ctx, mine)
        follow = self.following.get(p)
        if follow is None:
            live = list(self.writing.values())
            if not live:
                return PENDING
            follow = self.following[p] = Follow(ctx.rng.choice(live))
        poll = {"ledger": follow.ledger, "wait_ms": self.long_poll_ms}
        roll = ctx.rng.random()
        if roll < 1 / 3:
            return {"f": "read-lac", "value": poll}
        mode = "tail" if roll < 2 / 3 else "follow"
        return {"f": "read", "value": {**poll, "mode": mode, "from": follow.next}}

    def learn(self, process: int, op: Op, kind: str, value: Any, error: str | None) -> None:
        f = op["f"]
        ledger = op["value"].get("ledger")
        if f == "create" and kind == "ok":
            self.writing[process] = value["ledger"]
        elif (f == "append" and kind != "ok") or f == "close":
            # A failed append, or any close, ends the writer's handle.
            if self.writing.pop(process, None) is not None:
                self.ended[ledger] = value["last_entry"] if kind == "ok" else None
        elif f in ("read", "read-lac") and process in self.following:
            if kind == "ok" and op["value"].get("mode") == "follow" and value["end"]:
                del self.following[process]  # followed to its end: on to another ledger
            else:
                self._advance(process, _read_to(op, kind, value))

    def _advance(self, process: int, lac: int | None) -> None:
        """Move the reader past what it read (`lac`, None if it read no entries); on to
        another ledger once this one has ended and is read to its end (or cannot be)."""
        follow = self.following[process]
        if lac is not None:
            follow.next = max(follow.next, lac + 1)
        if follow.ledger in self.ended:
            last = self.ended[follow.ledger]
            if last is None or follow.next > last:
                del self.following[process]


def _read_to(op: Op, kind: str, value: Any) -> int | None:
    """The last entry an ok read read the ledger up to: a tail read's LAC, a follow
    read's last entry; None for a read-lac, a read that failed, or one with nothing."""
    if kind != "ok" or op["f"] != "read":
        return None
    if op["value"]["mode"] != "follow":
        return value["lac"]
    return value["entries"][-1][0] if value["entries"] else None
