"""The `recovery-race` workload: several clients recover the same ledger at once while
its writer is still appending.

A quarter of the workers write (create a ledger, append until fenced, start another).
Every so often a race starts on one writer's current ledger: each of the other workers,
as soon as it is free, recovers that ledger — with `recover`, or with a `closed` read,
which recovers it too — through whichever agent it is on. A writer whose add fails on its
own (no bookies, a timeout: not a fence) abandons its ledger, and the next race is on that
ledger (the latest such) at once — as brokers compete to take over a topic whose owner
lost its bookies — while the fault that broke the writer is still on, and its last adds
may have reached some bookies and not others. The recoveries overlap with each other and
with the writer's appends: fencing, recovery reads, write-back and the closing CAS all
race. Every closed read must then report the same last entry and the same entries, and
no acknowledged append may be missing (`divergence`, `lost-append`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from core.generator import PENDING, Context
from workloads.common import LOST_WRITER_ERRORS, BaseWorkload, Op


@dataclass
class Race:
    ledger: Any
    remaining: int


@dataclass
class RecoveryRaceWorkload(BaseWorkload):
    race_fraction: float = 0.02
    """Per op of a worker that does not write: chance it starts a race (if none is on)."""
    race: Race | None = None
    raced: set[Any] = field(default_factory=set)
    abandoned: Any = None
    """The latest ledger whose writer gave up on an error of its own: raced next. (Under a
    fault that leaves too few bookies, writers give up on ledger after ledger; the latest
    is the one the fault is still acting on.)"""

    @property
    def writers(self) -> int:
        return max(1, self.concurrency // 4)

    @property
    def racers(self) -> int:
        return max(1, self.concurrency - self.writers)

    def next_op(self, ctx: Context) -> Op | Any:
        p: int = ctx.process  # type: ignore[assignment]
        if self.worker(p) < self.writers:
            mine = self.writing.get(p)
            return self.create() if mine is None else self.append(ctx, mine)
        if self.race is None and (target := self._race_target(ctx)) is not None:
            self.race = Race(target, self.racers)
            self.raced.add(target)
        if self.race is not None:
            ledger = self.race.ledger
            self.race.remaining -= 1
            if self.race.remaining <= 0:
                self.race = None
            if ctx.rng.random() < 0.5:
                return self.recover(ledger)
            return {"f": "read", "value": {"ledger": ledger, "mode": "closed"}}
        live = list(self.writing.values())
        return self.tail_read(ctx.rng.choice(live)) if live else PENDING

    def _race_target(self, ctx: Context) -> Any:
        """The ledger a new race takes: the latest abandoned one, else now and then a live
        one not raced before; None for no race yet."""
        if self.abandoned is not None:
            target, self.abandoned = self.abandoned, None
            return target
        targets = [lid for lid in self.writing.values() if lid not in self.raced]
        if targets and ctx.rng.random() < self.race_fraction:
            return ctx.rng.choice(targets)
        return None

    def learn(self, process: int, op: Op, kind: str, value: Any, error: str | None) -> None:
        if op["f"] == "create" and kind == "ok":
            self.writing[process] = value["ledger"]
        elif op["f"] == "append" and kind != "ok":
            ledger = self.writing.pop(process, None)  # fenced by the race, or lost: start anew
            if ledger is not None and ledger not in self.raced and error not in LOST_WRITER_ERRORS:
                self.abandoned = ledger
