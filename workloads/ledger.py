"""The `ledger` workload: writers append to their own ledgers; others read and take over.

Each client process creates a ledger and appends unique payloads to it. Now and then a
process reads the newest entries of some ledger (through a handle that does not recover
it; only the last few, so reads cost the same however long the ledger grows) or
takes a ledger over by recovering it — writer failover, which fences the old writer, so
its next add fails and it starts a new ledger. Takeovers pick a ledger another process is
writing right now (an old, closed one only when there is none): recovering live ledgers
while faults are in force is what exposes recovery bugs. Every ledger ever created is read in full,
closed, in the final phase; the per-ledger checkers then apply.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from harness.generator import Context
from workloads.common import BaseWorkload

LOST_WRITER_ERRORS = frozenset({"EFENCED", "ELEDGERCLOSED", "ENOHANDLE"})


@dataclass
class LedgerWorkload(BaseWorkload):
    """Op source plus the little state it needs: who writes which ledger."""

    read_fraction: float = 0.1
    recover_fraction: float = 0.01

    def next_op(self, ctx: Context) -> dict[str, Any]:
        mine = self.writing.get(ctx.process)  # type: ignore[arg-type]
        if mine is None:
            return self.config.create()
        roll = ctx.rng.random()
        if roll < self.recover_fraction and len(self.ledgers) > 1:
            # A takeover of a ledger someone is writing right now, when there is one: that
            # is the failover whose fencing and recovery reads the faults put to the test.
            live = sorted(lid for lid in self.writing.values() if lid != mine)
            others = live or [lid for lid in self.ledgers if lid != mine]
            return {"f": "recover", "value": {"ledger": ctx.rng.choice(others)}}
        if roll < self.recover_fraction + self.read_fraction:
            return self.tail_read(ctx.rng.choice(self.ledgers))
        return self.append(ctx, mine)

    def learn(
        self, process: int, op: dict[str, Any], kind: str, value: Any, error: str | None
    ) -> None:
        """Learn from a completion: new ledgers to write, and writers that lost theirs."""
        if op["f"] == "create" and kind == "ok":
            self.writing[process] = value["ledger"]
        elif op["f"] == "append" and kind != "ok" and error in LOST_WRITER_ERRORS:
            self.writing.pop(process, None)
