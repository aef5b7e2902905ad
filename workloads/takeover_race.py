"""The `takeover-race` workload: several clients take the same unbounded stream over at
once while its writer is still appending — the unbounded analogue of `recovery-race`.

It is the `unbounded` workload (one unbounded ledger per stream, handed over by terms,
readers following the tail) in which, every so often, a race starts on one stream: each
worker that holds no stream, as soon as it is free, takes that stream over. The takeovers
overlap with each other and with the deposed writer's appends: each raises the term, so
fencing by term, recovery reads of the previous term, the truncating no-op and the
reopening CAS all race, and a takeover can lose to a newer one at any step. Whoever wins
last writes on; a writer that was superseded is not told and keeps appending until the
bookies refuse its term. Entries of every term must then read in order, once, with no
acknowledged append missing (`realtime-order`, `divergence`, `lost-append`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from harness.generator import Context
from workloads.common import Op
from workloads.streams import Stream
from workloads.unbounded import UnboundedWorkload

RACERS = 3
"""At most this many workers join one race (each takes the stream over once)."""


@dataclass
class _Race:
    stream: Stream
    remaining: int


@dataclass
class TakeoverRaceWorkload(UnboundedWorkload):
    race_fraction: float = 0.02
    """Per op of a worker holding no stream: chance it starts a race (if none is on)."""
    race: _Race | None = None

    def next_op(self, ctx: Context) -> Op | Any:
        p: int = ctx.process  # type: ignore[assignment]
        if self.leader(p) is not None or p in self.acquiring or p in self.writing:
            return super().next_op(ctx)
        if self.race is None:
            live = [s for s in self.streams if s.ledger is not None]
            if live and ctx.rng.random() < self.race_fraction:
                self.race = _Race(ctx.rng.choice(live), RACERS)
        if self.race is None:
            return super().next_op(ctx)
        stream = self.race.stream
        self.race.remaining -= 1
        if self.race.remaining <= 0:
            self.race = None
        stream.owner = p  # the latest taker is designated; a newer term fences the others
        self.acquiring[p] = stream
        return self.acquire_op(p, stream)
