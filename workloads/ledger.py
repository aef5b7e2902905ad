"""The `ledger` workload: writers append to their own ledgers; others read and take over.

Each client process creates a ledger and appends unique payloads to it. Now and then a
process reads the newest entries of a ledger being written (through a handle that does not
recover it; only the last few, so reads cost the same however long the ledger grows), as a
reader following the writer would, or takes a ledger over by recovering it — writer
failover, which fences the old writer, so its next add fails and it starts a new ledger.

Failover happens the way a broker cluster does it: a writer whose add fails for any reason
but a fence or a close (no bookies, a timeout) abandons its ledger, and the next process
free to do so recovers that ledger at once — while the fault that broke the writer is
still in force, which is what puts fencing, recovery reads and write-back to the test.
Besides, a fraction of ops (`--takeovers`, 1% by default) take over a ledger someone is
writing right now; under partitions, raising it is what catches lost acknowledged entries
sooner (docs/performance.md). Every ledger ever created is read in full, closed, in the
final phase; the per-ledger checkers then apply.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from harness.generator import Context
from workloads.common import BaseWorkload, LedgerConfig

if TYPE_CHECKING:
    from harness.testspec import TestSpec

LOST_WRITER_ERRORS = frozenset({"EFENCED", "ELEDGERCLOSED", "ENOHANDLE"})
"""Errors that mean someone else already took the ledger over (or it is gone)."""


@dataclass
class LedgerWorkload(BaseWorkload):
    """Op source plus the little state it needs: who writes which ledger, which are orphaned."""

    read_fraction: float = 0.1
    recover_fraction: float = 0.01
    orphans: list[Any] = field(default_factory=list)
    """Ledgers whose writer gave up on an error of its own: the next free process recovers."""

    @classmethod
    def from_spec(cls, spec: TestSpec) -> LedgerWorkload:
        return cls(
            config=LedgerConfig.from_spec(spec),
            concurrency=spec.concurrency,
            recover_fraction=spec.takeovers,
        )

    def next_op(self, ctx: Context) -> dict[str, Any]:
        mine = self.writing.get(ctx.process)  # type: ignore[arg-type]
        if self.orphans:
            return {"f": "recover", "value": {"ledger": self.orphans.pop(0)}}
        if mine is None:
            return self.create()
        live = sorted(lid for lid in self.writing.values() if lid != mine)
        roll = ctx.rng.random()
        if roll < self.recover_fraction and len(self.ledgers) > 1:
            # A takeover of a ledger someone is writing right now, when there is one: that
            # is the failover whose fencing and recovery reads the faults put to the test.
            others = live or [lid for lid in self.ledgers if lid != mine]
            return {"f": "recover", "value": {"ledger": ctx.rng.choice(others)}}
        if roll < self.recover_fraction + self.read_fraction:
            return self.tail_read(ctx.rng.choice(live or self.ledgers))
        return self.append(ctx, mine)

    def learn(
        self, process: int, op: dict[str, Any], kind: str, value: Any, error: str | None
    ) -> None:
        """Learn from a completion: new ledgers to write, and writers that lost theirs."""
        if op["f"] == "create" and kind == "ok":
            self.writing[process] = value["ledger"]
        elif op["f"] == "append" and kind != "ok":
            ledger = op["value"]["ledger"]
            if self.writing.get(process) == ledger:
                del self.writing[process]
                if error not in LOST_WRITER_ERRORS:
                    self.orphans.append(ledger)
