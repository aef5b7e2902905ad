"""The combined nemesis schedule: several fault kinds at once, with overlaps.

`CombinedCycle` is what a run with more than one `--nemesis` kind plays (one kind plays
`FaultCycle`): every `interval` on average a fault starts on a node that carries no fault
yet, holds for a drawn duration (0.5 to 1.5
intervals) and stops; up to `max_overlap` faults are in force at once. Kinds come from a
shuffled bag — each enabled kind once per round, in a drawn order — so a 60-second run
with four kinds shows all four instead of leaving one out by chance. Network faults
(partition, packet) act on the whole cluster, so at most one of each kind is in force.
Everything is drawn from the nemesis's seeded rng and timed by the run's clock, so a seed
replays the schedule. Whatever is still in force when the time limit cuts the schedule
short is undone by the controller's final heal, which runs in a `finally` (also when the
run is interrupted).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from harness.generator import NOT_FOR_THIS_ASKER, Answer, Context, Generator, Pending
from nemesis.schedule import START_STOP, Targets, _op, check_kinds_and_nodes

CLUSTER_WIDE = ("partition", "packet")


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
