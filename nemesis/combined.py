"""The combined nemesis schedule: several fault kinds at once, with overlaps.

`CombinedCycle` is what a run with more than one `--nemesis` kind plays (one kind plays
`FaultCycle`): every `interval` on average a fault starts on a node that carries no fault
yet, holds for a drawn duration (0.5 to 1.5
intervals) and stops; up to `max_overlap` faults are in force at once. Kinds come from a
shuffled bag — each enabled kind once per round, in a drawn order — so a 60-second run
with four kinds shows all four instead of leaving one out by chance. Network faults
(partition, packet) act on the whole cluster, so at most one of each kind is in force.
`NestedCycle` (`--nemesis-order nested`) plays the kinds in the order given instead, one
inside the other: a bookie slowed while its partner is killed, a partition during which a
bookie loses power — the overlaps a shuffled bag reaches only now and then.
A process started again while a partition cuts it off from ZooKeeper cannot serve (a bookie
gives up after 30 s), so neither schedule restarts a node while a partition is in force:
the partition stops first, its hold cut short (`FaultKind.restarts`).
Everything is drawn from the nemesis's seeded rng and timed by the run's clock, so a seed
replays the schedule. Whatever is still in force when the time limit cuts the schedule
short is undone by the controller's final heal, which runs in a `finally` (also when the
run is interrupted).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

from core.generator import NOT_FOR_THIS_ASKER, Answer, Context, Generator, Pending
from nemesis.kinds import KINDS
from nemesis.schedule import START_STOP, Targets, _op, check_kinds_and_nodes

CLUSTER_WIDE = ("partition", "packet")
PARTITION = "partition"


@dataclass
class CombinedCycle(Generator):
    kinds: tuple[str, ...]
    nodes: tuple[str, ...]
    interval: float
    targets: Targets | None = None
    max_overlap: int = 2
    active: dict[tuple[str, ...], tuple[str, float]] = field(default_factory=dict)
    """target nodes -> (kind, when it stops)."""
    bag: list[str] = field(default_factory=list)
    """Kinds not yet started in this round."""
    next_start: float | None = None

    def __post_init__(self) -> None:
        check_kinds_and_nodes(self.kinds, self.nodes)
        if self.max_overlap < 1:
            raise ValueError(f"max_overlap must be at least 1, got {self.max_overlap}")
        self.targets = self.targets or Targets(self.nodes)

    def _hold(self, ctx: Context) -> float:
        return ctx.rng.uniform(0.5, 1.5) * self.interval

    def _next_change(self) -> Pending:
        """When this schedule next has something to do: a fault's stop or the next start."""
        assert self.next_start is not None
        return Pending(min([self.next_start, *(end for _, end in self.active.values())]))

    def op(self, ctx: Context) -> Answer:
        if not ctx.is_nemesis:
            return NOT_FOR_THIS_ASKER
        if self.next_start is None:
            self.next_start = ctx.time + self._hold(ctx)
        due = sorted((end, nodes) for nodes, (_, end) in self.active.items() if end <= ctx.time)
        if due:
            nodes = due[0][1]
            if KINDS[self.active[nodes][0]].restarts:
                nodes = next((n for n, (k, _) in self.active.items() if k == PARTITION), nodes)
            kind, _ = self.active.pop(nodes)
            return _op(START_STOP[kind][1], nodes)
        if ctx.time < self.next_start:
            return self._next_change()
        self.next_start = ctx.time + self._hold(ctx)
        busy = {n for nodes in self.active for n in nodes}
        free = [n for n in self.nodes if n not in busy]
        busy_kinds = {kind for kind, _ in self.active.values()}
        if not self.bag:
            self.bag = ctx.rng.sample(self.kinds, len(self.kinds))
        kinds = [k for k in self.bag if k not in CLUSTER_WIDE or k not in busy_kinds]
        if len(self.active) >= self.max_overlap or not free or not kinds:
            return self._next_change()
        assert self.targets is not None
        nodes = self.targets.draw(ctx.rng, free)
        if nodes is None:
            return self._next_change()
        kind = kinds[0]
        self.bag.remove(kind)
        self.active[nodes] = (kind, ctx.time + self._hold(ctx))
        return self.targets.start_op(kind, nodes, ctx.rng)


@dataclass
class NestedCycle(Generator):
    """Rounds of nested faults: each round starts every kind in the order given, each on
    nodes none of the round's earlier faults holds, the next one a fifth to a half of
    `interval` after the one before (so it begins while they all still hold); the last
    holds half an interval to a whole one; then they stop, innermost first (a partition
    before any restart), and the next round starts half an interval to a whole one later.
    Ops come no sooner than planned; the nemesis performs one at a time, so a slow fault
    (a restart waiting for its bookie to register) delays the rest of its round rather
    than reordering it."""

    kinds: tuple[str, ...]
    nodes: tuple[str, ...]
    interval: float
    targets: Targets | None = None
    planned: list[tuple[float, dict[str, Any]]] = field(default_factory=list)
    """The current round's ops not yet given, with the time each is due."""
    next_round: float | None = None

    def __post_init__(self) -> None:
        check_kinds_and_nodes(self.kinds, self.nodes)
        if len(self.kinds) < 2:
            raise ValueError(f"nesting needs at least two fault kinds, got {self.kinds}")
        self.targets = self.targets or Targets(self.nodes)

    def op(self, ctx: Context) -> Answer:
        if not ctx.is_nemesis:
            return NOT_FOR_THIS_ASKER
        if self.next_round is None:
            self.next_round = ctx.time + self._gap(ctx.rng)
        if not self.planned:
            if ctx.time < self.next_round:
                return Pending(self.next_round)
            self.planned = self._round(ctx.time, ctx.rng)
            if not self.planned:  # no node free for the first kind: try again later
                self.next_round = ctx.time + self._gap(ctx.rng)
                return Pending(self.next_round)
        due, op = self.planned[0]
        if ctx.time < due:
            return Pending(due)
        self.planned.pop(0)
        if not self.planned:
            self.next_round = ctx.time + self._gap(ctx.rng)
        return op

    def _gap(self, rng: random.Random) -> float:
        return rng.uniform(0.5, 1.0) * self.interval

    def _round(self, now: float, rng: random.Random) -> list[tuple[float, dict[str, Any]]]:
        """One round's ops, due times included: starts in order, stops in reverse."""
        assert self.targets is not None
        started: list[tuple[str, tuple[str, ...]]] = []
        starts: list[tuple[float, dict[str, Any]]] = []
        when = now
        for kind in self.kinds:
            held = {n for _, nodes in started for n in nodes}
            nodes = self.targets.draw(rng, [n for n in self.nodes if n not in held])
            if nodes is None:
                break  # the round nests the faults that found nodes
            if started:
                when += rng.uniform(0.2, 0.5) * self.interval
            started.append((kind, nodes))
            starts.append((when, self.targets.start_op(kind, nodes, rng)))
        when += rng.uniform(0.5, 1.0) * self.interval
        stops = []
        for kind, nodes in _stop_order(started):
            stops.append((when, _op(START_STOP[kind][1], nodes)))
            when += 0.1 * self.interval
        return starts + stops


def _stop_order(started: list[tuple[str, tuple[str, ...]]]) -> list[tuple[str, tuple[str, ...]]]:
    """Innermost first, but a partition before any restart: a node started again while
    it is cut off from ZooKeeper cannot serve."""
    inner_first = list(reversed(started))
    if not any(KINDS[kind].restarts for kind, _ in started):
        return inner_first
    return sorted(inner_first, key=lambda fault: fault[0] != PARTITION)
