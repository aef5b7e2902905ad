"""Faults triggered by protocol events: a schedule's ``on`` steps (nemesis/schedule.py).

A fault on a clock beat rarely lands in the protocol's narrow windows — between a
recovery's fencing and its write-back, while an ensemble change is being written, as a
takeover fences. In the simulation every probe the product reaches (bookie_image/probes.py)
is heard in-process, at the very moment it is reached, so a step can wait for one: armed at
its ``at``, it fires at the next reach of its probe, aimed at the bookies that probe names
(``@k``: the k-th of the ensemble it reports; ``@self``: the bookie that reached it), and
is stopped ``hold`` seconds later.

A step is armed by the run's clock when its ``at`` comes, also while the nemesis worker is
busy with another fault. The fault still goes through that worker (one op at a time,
recorded with its proof like any other); the probe wakes it, and an idle worker hands the
fault to the nemesis in the same virtual instant — before any message the product sends
after the probe can arrive (the simulated network has no zero latency). A worker busy with
another fault (a restart waiting for its bookie to register) starts it right after: the
history records when. A step whose targets cannot
be hit when it fires (a bookie already down, paused or busy with another fault, a probe
that names no such bookie) stays armed for the next reach. Everything is a function of the
schedule and the seed: the same test fires the same faults at the same points.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from core.generator import NOT_FOR_THIS_ASKER, Answer, Context, Generator, Pending
from harness.sim.cluster import SimCluster
from harness.sim.nemesis import STARTS
from harness.sim.zk import ZK_NODE
from nemesis.schedule import SPLIT, START_STOP, STEP_KIND, TRIGGER, is_triggered

__all__ = ["TriggeredFaults", "triggered_steps"]


def triggered_steps(schedule: tuple[dict[str, Any], ...]) -> tuple[dict[str, Any], ...]:
    return tuple(step for step in schedule if is_triggered(step))


@dataclass
class _Reached:
    """A probe reach that fired an armed step: what its targets are resolved against."""

    step: dict[str, Any]
    fields: dict[str, Any]
    node: str


@dataclass
class TriggeredFaults(Generator):
    """The nemesis generator of a simulated run with triggered steps: the clock-driven
    schedule (`inner`, if any) plus `steps` fired by probes (`on_probe`, which the sim's
    probe listener calls). `wake` nudges the controller's idle nemesis worker."""

    cluster: SimCluster
    steps: tuple[dict[str, Any], ...]
    inner: Generator | None = None
    wake: Callable[[], None] = lambda: None
    now: Callable[[], float] | None = None
    """The run's clock (the controller's history time, what `ctx.time` reads): a probe
    reached arms every step whose `at` has come, whether or not the worker asked since."""
    start: float | None = None
    armed: list[dict[str, Any]] = field(default_factory=list)
    _waiting: list[dict[str, Any]] = field(default_factory=list)  # not yet armed, in order
    _reached: list[_Reached] = field(default_factory=list)
    _stops: list[tuple[float, dict[str, Any]]] = field(default_factory=list)
    _busy: set[str] = field(default_factory=set)  # nodes a triggered fault holds
    fired: list[dict[str, Any]] = field(default_factory=list)
    """Each fired step with the probe and op it fired as (what a test looks at)."""

    def __post_init__(self) -> None:
        self._waiting = list(self.steps)

    # -- heard from the product ------------------------------------------------------------

    def on_probe(self, name: str, fields: dict[str, Any], node: str) -> None:
        """A probe was reached on `node`: the first armed step waiting for it fires."""
        if self.now is not None:
            self._arm(self.now())
        for step in self.armed:
            if step[TRIGGER] == name:
                self.armed.remove(step)
                self._reached.append(_Reached(step, dict(fields), node))
                self.wake()
                return

    # -- asked by the nemesis worker -------------------------------------------------------

    def op(self, ctx: Context) -> Answer:
        if not ctx.is_nemesis:
            return NOT_FOR_THIS_ASKER
        self._arm(ctx.time)
        while self._stops and ctx.time >= self._stops[0][0]:
            _, stop = self._stops.pop(0)
            nodes = stop["value"]["nodes"]
            self._busy -= set(nodes)
            if stop["f"] in STARTS:  # a clock fault pulled the disks meanwhile: its
                nodes[:] = [n for n in nodes if not self.cluster.bookies[n].pulled]  # restore
            if nodes:
                return stop
        while self._reached:
            reached = self._reached.pop(0)
            op = self._resolve(reached)
            if op is None:
                self.armed.append(reached.step)  # nothing to hit now: wait for the next reach
                continue
            stop_nodes = [n for n in op["value"]["nodes"] if n in self.cluster.bookies]
            stop = {"f": START_STOP[STEP_KIND[op["f"]]][1], "value": {"nodes": stop_nodes}}
            self._stops.append((ctx.time + reached.step["hold"], stop))
            self._stops.sort(key=lambda due_stop: due_stop[0])
            self._busy |= set(stop_nodes)
            self.fired.append({"step": reached.step, "at": ctx.time, "op": op})
            return op
        answer = self.inner.op(ctx) if self.inner is not None else None
        if answer is not None and not isinstance(answer, Pending):
            return answer
        due = [self.start + s["at"] for s in self._waiting[:1]] + [t for t, _ in self._stops[:1]]
        if answer is None and not due and not self.armed:
            return None
        until = min([*due, math.inf if answer is None else answer.until or 0.0])
        return Pending(until)

    def _arm(self, now: float) -> None:
        """Arm the steps whose `at` has come (the run starts at the first arming)."""
        if self.start is None:
            self.start = now
        while self._waiting and now >= self.start + self._waiting[0]["at"]:
            self.armed.append(self._waiting.pop(0))

    # -- aiming ----------------------------------------------------------------------------

    def _resolve(self, reached: _Reached) -> dict[str, Any] | None:
        """The op `reached.step` fires as, its targets named; None if they cannot be hit."""
        step, cluster = reached.step, self.cluster
        value = dict(step["value"])
        by_id = {bookie.id: name for name, bookie in cluster.bookies.items()}
        ensemble = [by_id.get(b, b) for b in reached.fields.get("bookies", ())]
        targets = []
        for target in value["nodes"]:
            if target == "@self":
                target = reached.node
            elif target.startswith("@"):
                k = int(target[1:])
                target = ensemble[k] if k < len(ensemble) else ""
            if target not in cluster.bookies or target in targets:
                return None
            targets.append(target)
        for target in targets:
            bookie = cluster.bookies[target]
            if target in self._busy or not bookie.running or target in cluster.loop.paused:
                return None
        value["nodes"] = sorted(targets)
        if step["f"] == "start-partition" and value.get("grudge") == SPLIT:
            grudge = self._split(reached.node, ensemble, targets)
            if grudge is None:
                return None
            value["grudge"] = grudge
        value[TRIGGER] = step[TRIGGER]  # the history says what fired it
        return {"f": step["f"], "value": value}

    def _split(
        self, recovering: str, ensemble: list[str], writer_side: list[str]
    ) -> dict[str, list[str]] | None:
        """The old writers (every other client) reach only `writer_side` of the ensemble;
        the client that reached the probe reaches only the rest. ZooKeeper stays reachable."""
        writers = [c for c in self.cluster.agents if c != recovering]
        rest = [b for b in ensemble if b not in writer_side]
        if recovering not in self.cluster.agents or not writers or not rest:
            return None
        grudge = {writer: sorted(rest) for writer in writers}
        grudge[recovering] = sorted(writer_side)
        assert ZK_NODE not in grudge
        return grudge
