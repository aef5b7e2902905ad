"""Faults triggered by protocol events: a schedule's ``on`` steps (nemesis/schedule.py).

A fault on a clock beat rarely lands in the protocol's narrow windows — between a
recovery's fencing and its write-back, while an ensemble change is being written, as a
takeover fences. The product reports reaching those windows as probes
(bookie_image/probes.py); a runtime that hears them calls `TriggeredFaults.on_probe`, and
a step waiting for that probe fires: armed at its ``at``, it fires at the next reach of
its probe, aimed at the bookies that probe names (``@k``: the k-th of the ensemble it
reports; ``@self``: the bookie that reached it; ``@all``: every bookie of the cluster)
or, for a pause, at the clients but the one that reached it (``@others``: the old
writers when a recovery reached it), and is stopped ``hold`` seconds later. Every step
armed for a probe fires at its next reach: a client paused ``@others`` and every bookie
killed on the same probe are one correlated failure, not two at different reaches.

A step is armed by the run's clock when its ``at`` comes, also while the nemesis worker is
busy with another fault. The fault still goes through that worker (one op at a time,
recorded with its proof like any other); the probe wakes it. A step whose targets cannot
be hit when it fires (a bookie already down, paused or busy with another fault, a probe
that names no such bookie) stays armed for the next reach. How soon after the probe the
fault lands is the runtime's: the simulation hears a probe in-process, in the very
instant it is reached (harness/sim/triggers.py); real processes write it to their logs,
which the controller follows (harness/runtime/probe_tail.py), so the fault lands
milliseconds later and the op records when the probe was written and heard.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from core.generator import NOT_FOR_THIS_ASKER, Answer, Context, Generator, Pending
from nemesis.kinds import START_STOP, STEP_KIND
from nemesis.schedule import ALL_BOOKIES, OTHER_CLIENTS, SPLIT, TRIGGER, is_triggered

__all__ = ["TriggerView", "TriggeredFaults", "resolve_targets", "triggered_steps"]

log = logging.getLogger("bkchaos.triggers")


def triggered_steps(schedule: tuple[dict[str, Any], ...]) -> tuple[dict[str, Any], ...]:
    return tuple(step for step in schedule if is_triggered(step))


class TriggerView(Protocol):
    """What aiming a triggered step asks of the cluster, at the moment it fires."""

    def bookie_names(self) -> dict[str, str]:
        """Bookie id (as probes and ledger metadata name it) -> node name."""
        ...

    def clients(self) -> list[str]:
        """The client agents' node names (a `@split` partition's two sides)."""
        ...

    def hittable(self, node: str) -> bool:
        """Whether a fault can start on `node` (a bookie or a client agent) now: it runs
        and is not paused."""
        ...

    def startable(self, node: str) -> bool:
        """Whether a stop that starts `node` again (restart, power-on) still can."""
        ...


def resolve_targets(
    targets: list[str],
    ensemble: list[str],
    reached_on: str,
    bookies: set[str],
    clients: Sequence[str] = (),
) -> list[str] | None:
    """`targets` named: ``@self`` is the node that reached the probe, ``@k`` the k-th of
    the probe's `ensemble` (node names), ``@all`` every one of `bookies`, ``@others`` the
    `clients` but the one that reached it; None if one is no bookie (nor such a client),
    none is left, or one is named twice."""
    named: list[str] = []
    for target in targets:
        if target == ALL_BOOKIES:
            if bookies & set(named):
                return None
            named += sorted(bookies)
            continue
        if target == OTHER_CLIENTS:
            others = [c for c in clients if c != reached_on]
            if reached_on not in clients or not others or set(others) & set(named):
                return None
            named += others
            continue
        if target == "@self":
            target = reached_on
        elif target.startswith("@"):
            k = int(target[1:])
            target = ensemble[k] if k < len(ensemble) else ""
        if target not in bookies or target in named:
            return None
        named.append(target)
    return named


@dataclass
class _Reached:
    """A probe reach that fired an armed step: what its targets are resolved against."""

    step: dict[str, Any]
    fields: dict[str, Any]
    node: str
    heard_s: float | None
    """The run's clock when the runtime heard the reach (None: no clock was given)."""
    timing: dict[str, Any]
    """What a real runtime records of when the probe was written and heard."""


@dataclass
class TriggeredFaults(Generator):
    """The nemesis generator of a run with triggered steps: the clock-driven schedule
    (`inner`, if any) plus `steps` fired by probes (`on_probe`, which the runtime's probe
    listener calls). `wake` nudges the controller's idle nemesis worker."""

    view: TriggerView
    steps: tuple[dict[str, Any], ...]
    inner: Generator | None = None
    wake: Callable[[], None] = lambda: None
    now: Callable[[], float] | None = None
    """The run's clock (the controller's history time, what `ctx.time` reads): a probe
    reached arms every step whose `at` has come, whether or not the worker asked since."""
    late_s: float | None = None
    """A reach whose fault would start more than this after it was heard (the worker was
    busy with another fault, or reading whether the targets can be hit took that long)
    re-arms its step instead of firing: on real processes the window the probe opened has
    closed by then. None (the simulation): it fires, late."""
    start: float | None = None
    armed: list[dict[str, Any]] = field(default_factory=list)
    _waiting: list[dict[str, Any]] = field(default_factory=list)  # not yet armed, in order
    _reached: list[_Reached] = field(default_factory=list)
    _stops: list[tuple[float, dict[str, Any]]] = field(default_factory=list)
    _busy: set[str] = field(default_factory=set)  # nodes a triggered fault holds
    fired: list[dict[str, Any]] = field(default_factory=list)
    """Each fired step with the probe and op it fired as (what a test looks at)."""
    missed: int = 0
    """Reaches whose fault would have started more than `late_s` after them."""

    def __post_init__(self) -> None:
        self._waiting = list(self.steps)

    # -- heard from the product ------------------------------------------------------------

    def on_probe(
        self,
        name: str,
        fields: dict[str, Any],
        node: str,
        timing: dict[str, Any] | None = None,
    ) -> None:
        """A probe was reached on `node`: every armed step waiting for it fires, in the
        order they were armed. `timing` (real runtimes) goes into the fired ops' values as
        `probe_timing`."""
        heard_s = self.now() if self.now is not None else None
        if heard_s is not None:
            self._arm(heard_s)
        waiting = [step for step in self.armed if step[TRIGGER] == name]
        for step in waiting:
            self.armed.remove(step)
            self._reached.append(_Reached(step, dict(fields), node, heard_s, timing or {}))
        if waiting:
            self.wake()

    # -- asked by the nemesis worker -------------------------------------------------------

    def op(self, ctx: Context) -> Answer:
        if not ctx.is_nemesis:
            return NOT_FOR_THIS_ASKER
        self._arm(ctx.time)
        while self._stops and ctx.time >= self._stops[0][0]:
            _, stop = self._stops.pop(0)
            nodes = stop["value"]["nodes"]
            self._busy -= set(nodes)
            if stop["f"] in _STARTS_AGAIN:  # e.g. a clock fault pulled the disks meanwhile
                nodes[:] = [n for n in nodes if self.view.startable(n)]
            if nodes:
                return stop
        while self._reached:
            reached = self._reached.pop(0)
            if self._late(reached, ctx.time):
                self._rearm_late(reached, "heard while the nemesis was busy")
                continue
            op = self._resolve(reached)
            if op is not None and self.now is not None and self._late(reached, self.now()):
                self._rearm_late(reached, "aimed too slowly (the nodes' state read)")
                continue
            if op is None:
                self.armed.append(reached.step)  # nothing to hit now: wait for the next reach
                continue
            stop_nodes = list(op["value"]["nodes"])
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

    def _rearm_late(self, reached: _Reached, why: str) -> None:
        self.missed += 1
        log.info("%s %s: re-armed", reached.step[TRIGGER], why)
        self.armed.append(reached.step)

    def _late(self, reached: _Reached, now: float) -> bool:
        if self.late_s is None or reached.heard_s is None:
            return False
        return now - reached.heard_s > self.late_s

    # -- aiming ----------------------------------------------------------------------------

    def _resolve(self, reached: _Reached) -> dict[str, Any] | None:
        """The op `reached.step` fires as, its targets named; None if they cannot be hit."""
        step, view = reached.step, self.view
        value = dict(step["value"])
        by_id = view.bookie_names()
        ensemble = [by_id.get(b, b) for b in reached.fields.get("bookies", ())]
        targets = resolve_targets(
            value["nodes"], ensemble, reached.node, set(by_id.values()), view.clients()
        )
        if targets is None:
            return None
        if any(t in self._busy or not view.hittable(t) for t in targets):
            return None
        value["nodes"] = sorted(targets)
        if step["f"] == "start-partition" and value.get("grudge") == SPLIT:
            grudge = self._split(reached.node, ensemble, targets)
            if grudge is None:
                return None
            value["grudge"] = grudge
        value[TRIGGER] = step[TRIGGER]  # the history says what fired it
        if reached.timing:
            value["probe_timing"] = reached.timing
        return {"f": step["f"], "value": value}

    def _split(
        self, recovering: str, ensemble: list[str], writer_side: list[str]
    ) -> dict[str, list[str]] | None:
        """The old writers (every other client) reach only `writer_side` of the ensemble;
        the client that reached the probe reaches only the rest. ZooKeeper stays reachable."""
        clients = self.view.clients()
        writers = [c for c in clients if c != recovering]
        rest = [b for b in ensemble if b not in writer_side]
        if recovering not in clients or not writers or not rest:
            return None
        grudge = {writer: sorted(rest) for writer in writers}
        grudge[recovering] = sorted(writer_side)
        return grudge


_STARTS_AGAIN = frozenset({"restart", "power-on"})
"""The stops of triggered kinds that start a bookie again (`TriggerView.startable`)."""
