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
sooner (docs/performance.md). With `--writer-crashes`, a writer now and then crashes
between two appends: it leaves its ledger open, the last acknowledged entry not yet covered
by any LAC (only the next add would have carried it), and takeovers recover crashed ledgers
first, oldest first — the case recovery exists for. With crashes more frequent than
takeovers, crashed ledgers wait seconds for theirs, and the faults that come and go
meanwhile are what recovery then has to get right. With `--pipeline K`, each writer's
ledger is shared by K workers of its client agent: the others only append to it, so up to
K adds of one ledger are in flight at once, as a broker pipelines a topic's adds — the
state an ensemble change must carry over (entries acknowledged by some bookies, not yet by
others). Every ledger ever created is read in full, closed, in the final phase; the
per-ledger checkers then apply.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from core.generator import PENDING, Context
from workloads.common import LOST_WRITER_ERRORS, BaseWorkload, WorkloadSettings


@dataclass
class LedgerWorkload(BaseWorkload):
    """Op source plus the little state it needs: who writes which ledger, which are orphaned."""

    read_fraction: float = 0.1
    recover_fraction: float = 0.01
    orphans: list[Any] = field(default_factory=list)
    """Ledgers whose writer gave up on an error of its own: the next free process recovers."""
    crash_fraction: float = 0.0
    crashed: list[Any] = field(default_factory=list)
    """Ledgers whose writer crashed, left open: takeovers recover these first, oldest first."""

    @classmethod
    def own_settings(cls, spec: WorkloadSettings) -> dict[str, Any]:
        taken = {} if spec.takeovers is None else {"recover_fraction": spec.takeovers}
        return {"crash_fraction": spec.writer_crashes, **taken}

    def next_op(self, ctx: Context) -> dict[str, Any] | Any:
        leader = self.leader(ctx.process)  # type: ignore[arg-type]
        if leader is not None:  # a co-writer: it appends to its leader's ledger, nothing else
            shared = self.leaders_writing(leader)
            return PENDING if shared is None else self.append(ctx, shared)
        mine = self.writing.get(ctx.process)  # type: ignore[arg-type]
        if self.orphans:
            return self.recover(self.orphans.pop(0))
        if mine is None:
            return self.create()
        live = sorted(lid for lid in self.writing.values() if lid != mine)
        roll = ctx.rng.random()
        if roll < self.recover_fraction and len(self.ledgers) > 1:
            if self.crashed:
                return self.recover(self.crashed.pop(0))
            # A takeover of a ledger someone is writing right now, when there is one: that
            # is the failover whose fencing and recovery reads the faults put to the test.
            others = live or [lid for lid in self.ledgers if lid != mine]
            return self.recover(ctx.rng.choice(others))
        if roll < self.recover_fraction + self.read_fraction:
            return self.tail_read(ctx.rng.choice(live or self.ledgers))
        if roll < self.recover_fraction + self.read_fraction + self.crash_fraction:
            del self.writing[ctx.process]  # type: ignore[arg-type]
            self.crashed.append(mine)
            return self.create()
        return self.append(ctx, mine)

    def learn(
        self, process: int, op: dict[str, Any], kind: str, value: Any, error: str | None
    ) -> None:
        """Learn from a completion: new ledgers to write, and writers that lost theirs."""
        if op["f"] == "create" and kind == "ok":
            self.writing[process] = value["ledger"]
        elif op["f"] == "append" and kind != "ok":
            # A failed add ends the ledger for its whole group (leader and co-writers), as
            # a broker moves a topic to a new ledger on its first failed add, rather than
            # co-writers failing on the broken handle while the leader waits on its own.
            ledger = op["value"]["ledger"]
            owner = next((p for p, w in self.writing.items() if w == ledger), None)
            if owner is not None:
                del self.writing[owner]
                if error not in LOST_WRITER_ERRORS:
                    self.orphans.append(ledger)
