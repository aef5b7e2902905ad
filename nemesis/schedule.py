"""Seeded fault schedules: which fault, on which node, when.

`FaultCycle` is the nemesis generator of a run: wait, start a fault chosen at random
among the enabled kinds on a randomly chosen node, hold it, stop it, wait, repeat. All
choices come from the nemesis's own seeded rng and all timing from the run's clock, so a
seed replays the same schedule. `ScheduleReplay` plays back an explicit list of steps
(`TestSpec.schedule`, e.g. drawn by `nemesis.strategies.fault_schedules`) exactly.

A schedule may also hold *triggered* steps (nemesis/triggers.py), on every runtime: the
simulation hears probes in-process, the real runtimes follow the `probe` lines of their
nodes' logs (harness/runtime/probe_tail.py).
``{"at": s, "on": probe, "f": start op, "value": {"nodes": [...]}, "hold": s}`` is armed
at ``at`` and starts its fault when the protocol next reaches ``probe`` (a recovery
starting, a write-back, an ensemble change, a takeover fencing a bookie, an add on its
way…), aimed at nodes named outright or relative to the probe (`TRIGGER_TARGETS`, every
bookie as `ALL_BOOKIES`, the other clients as `OTHER_CLIENTS`), and
stops it ``hold`` seconds later. `ScheduleReplay` skips them: they are not on the clock.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from bookie_image.probes import PROBES
from core.generator import NOT_FOR_THIS_ASKER, Answer, Context, Generator, Pending
from nemesis.kinds import SIM_CLIENT_TARGET_KINDS, START_STOP, STEP_KIND, TRIGGERED_KINDS
from nemesis.net import netem_params, packet_destinations


def check_kinds_and_nodes(kinds: tuple[str, ...], nodes: tuple[str, ...]) -> None:
    """What every seeded fault schedule needs: known fault kinds and a node to hit."""
    unknown = [k for k in kinds if k not in START_STOP]
    if unknown or not kinds:
        raise ValueError(f"fault kinds must be among {sorted(START_STOP)}, got {kinds}")
    if not nodes:
        raise ValueError("a fault schedule needs at least one target node")


@dataclass
class Targets:
    """What a seeded schedule aims each fault at: `group` nodes drawn from `nodes` (one,
    or a minority), a partition's grudge (`grudge`, or drawn from DRAWN_GRUDGES), and how
    a corruption damages them."""

    nodes: tuple[str, ...]
    group: int = 1
    grudge: str | dict[str, list[str]] = ""
    live: Callable[[], tuple[str, ...]] | None = field(default=None, compare=False)
    """When set, each fault hits all of what it returns when the fault starts (the current
    writer's bookies) instead of `group` drawn nodes."""
    corruption: str = ""
    """A `corrupt` fault's mode (nemesis.disk.CORRUPT_MODES); empty: the nemesis's default."""
    packet: dict[str, Any] = field(default_factory=dict)
    """A `packet` fault's shaping (nemesis.net.netem_params); empty: the nemesis's default."""

    def draw(self, rng: random.Random, free: list[str]) -> tuple[str, ...] | None:
        """`group` of the `free` nodes (or all `live` ones), or None if none are free."""
        if self.live is not None:
            chosen = self.live()
            return chosen if chosen and set(chosen) <= set(free) else None
        if len(free) < self.group:
            return None
        return tuple(sorted(rng.sample(free, self.group)))

    def start_op(self, kind: str, nodes: tuple[str, ...], rng: random.Random) -> dict[str, Any]:
        """The op that starts a fault of `kind` on `nodes`."""
        op = _op(START_STOP[kind][0], nodes)
        if kind == "partition":
            op["value"]["grudge"] = self.grudge or rng.choice(DRAWN_GRUDGES)
        if kind == "corrupt" and self.corruption:
            op["value"]["mode"] = self.corruption
        if kind == "packet":
            op["value"].update(self.packet)
        return op


@dataclass
class FaultCycle(Generator):
    kinds: tuple[str, ...]
    nodes: tuple[str, ...]
    interval: float
    targets: Targets | None = None
    active: tuple[str, tuple[str, ...]] | None = None
    next_time: float | None = None

    def __post_init__(self) -> None:
        check_kinds_and_nodes(self.kinds, self.nodes)
        self.targets = self.targets or Targets(self.nodes)

    def op(self, ctx: Context) -> Answer:
        if not ctx.is_nemesis:
            return NOT_FOR_THIS_ASKER
        if self.next_time is None:
            self.next_time = ctx.time + self.interval
        if ctx.time < self.next_time:
            return Pending(self.next_time)
        self.next_time = ctx.time + self.interval
        assert self.targets is not None
        if self.active is None:
            kind = ctx.rng.choice(self.kinds)
            nodes = self.targets.draw(ctx.rng, list(self.nodes))
            if nodes is None:
                return Pending(self.next_time)
            self.active = (kind, nodes)
            return self.targets.start_op(kind, nodes, ctx.rng)
        kind, nodes = self.active
        self.active = None
        return _op(START_STOP[kind][1], nodes)


DRAWN_GRUDGES = ("isolate", "random-halves", "majorities-ring", "bridge")
"""The partitions a seeded schedule draws from (nemesis.grudge): isolating the chosen node,
or one of Jepsen's whole-cluster splits — where a writer and the client taking its ledger
over can each reach different bookies, which isolating one node never arranges."""


def _op(f: str, nodes: tuple[str, ...]) -> dict[str, Any]:
    return {"f": f, "value": {"nodes": list(nodes)}}


NODE_SET_KINDS = ("kill", "pause", "power-loss")
"""The kinds a drawn fault (the simulated search and corpus) aims at a node set drawn by
size, as Jepsen's nemeses do: up to every bookie at once — a rack or data centre losing
power, restarting, stalling — which one or two nodes per fault never arrange. The other
kinds hit one or two nodes (a partition draws its own grudge)."""

NODE_SET_DRAWS = ("one",) * 9 + ("minority",) * 3 + ("majority",) * 6 + ("all",) * 2
"""Jepsen's node-set sizes, each as often as a drawn `NODE_SET_KINDS` fault aims at it (in
twentieths): one node most often, every bookie in one draw of ten. With 3 bookies a
minority is one: 60% one node, 30% two, 10% all three. "one" comes first: a search
shrinks toward it."""


def node_set(
    size: str,
    bookies: Sequence[str],
    sources: Sequence[str],
    sample: Callable[[Sequence[str], int], Sequence[str]],
) -> tuple[str, ...]:
    """The targets of a fault aimed at the node set `size` (`NODE_SET_DRAWS`): every
    bookie for "all", else one, a minority or a majority of the bookies' count drawn by
    `sample` among `sources` (the bookies, and the clients a kind may hit)."""
    if size == "all":
        return tuple(sorted(bookies))
    n = len(bookies)
    count = {"one": 1, "minority": max(1, (n - 1) // 2), "majority": n // 2 + 1}[size]
    return tuple(sorted(sample(sources, min(count, len(sources)))))


TICKS_PER_S = 10
"""Drawn schedules (nemesis.strategies, the simulated search and corpus) put their steps on
a grid of tenths of a second: coarse enough to shrink, fine enough for every fault kind."""

TRIGGER = "on"
"""The key that makes a schedule step triggered by a protocol probe instead of the clock."""

ADD_TRIGGER_PROBE = "client-add-sent"
"""The probe of an add on its way to the bookies of its write set: a fault it fires on one
of them (``@k``) lands before the add does, so that bookie never stores the entry while
the others do — the write-path window of a recovery racing the writer. Reached on every
add, a step waiting for it fires at the first add after its ``at``."""

TRIGGER_PROBES = (
    "recovery-started",
    "recovery-writeback",
    "ensemble-change",
    "unbounded-takeover-started",
    "bookie-fenced",
    "unbounded-term-raised",
    "bookie-recovery-add-new-entry",
    ADD_TRIGGER_PROBE,
)
"""The probes (bookie_image/probes.py) a triggered step may wait for: those whose fields
name the bookies involved (the ensemble being recovered, written back to, changed, taken
over; the write set an add is sent to) or that a bookie reaches itself (fencing, a
takeover's term, a write-back bringing it a copy it lacked)."""

TRIGGER_TARGETS = ("@0", "@1", "@2", "@self")
"""Targets relative to the probe: the k-th bookie of the ensemble (or write set) it names,
or the bookie that reached it (``@self``, for the probes a bookie reaches:
`SELF_TRIGGER_PROBES`). A partition's ``"grudge": "@split"`` cuts the old writers
(the other clients) off from every bookie of the ensemble but ``value.nodes``, and the
client that reached the probe off from ``value.nodes``: each side reaches a different
part."""

SELF_TRIGGER_PROBES = tuple(p for p in TRIGGER_PROBES if PROBES[p].side == "bookie")
"""The trigger probes a bookie reaches, the only ones ``@self`` can aim at: the others
are reached by a client agent, which no triggered kind kills (the local runtime faults no
client, the simulation only pauses one or shapes its links)."""

SPLIT = "@split"

ALL_BOOKIES = "@all"
"""A target of a triggered `NODE_SET_KINDS` step: every bookie of the cluster (spares
too), named when the probe is reached — a rack or a data centre losing power, a rolling
restart done at once, as a recovery starts or a takeover fences. It fires only when every
bookie can be hit, and aims at no other bookie (it names them all); a pause may add
`OTHER_CLIENTS` (a writer frozen as the whole cluster stalls)."""

OTHER_CLIENTS = "@others"
"""A target of a triggered pause on a probe a client reaches: every other client agent.
On a recovery's probes those are the old writers, so the step freezes a writer as another
client takes its ledger over — a writer in a long GC pause, the canonical fencing case."""
OTHER_CLIENTS_KINDS = tuple(k for k in TRIGGERED_KINDS if k in SIM_CLIENT_TARGET_KINDS)
"""The triggered kinds that may aim at `OTHER_CLIENTS` (those that can hit a client)."""


def drawn_targets(probe: str, bookies: Sequence[str], kind: str = "") -> tuple[str, ...]:
    """What a search may aim a step of `kind` triggered by `probe` at: the bookies of the
    add's write set for `ADD_TRIGGER_PROBE` (at least two with any WQ a search draws); for
    a probe a bookie reaches, that bookie (``@self``) or one of `bookies` (such probes name
    no ensemble, so an ``@k`` would never fire); else a bookie of the ensemble the probe
    names (``@k``) or one of `bookies`. A kind that can hit a client may also aim at the
    other clients (`OTHER_CLIENTS`) on a probe a client reaches."""
    others = (OTHER_CLIENTS,) if kind in OTHER_CLIENTS_KINDS else ()
    if probe == ADD_TRIGGER_PROBE:
        return ("@0", "@1", *others)
    if probe in SELF_TRIGGER_PROBES:
        return ("@self", *bookies)
    return (*(t for t in TRIGGER_TARGETS if t != "@self"), *bookies, *others)


def drawn_node_set(
    size: str,
    probe: str,
    bookies: Sequence[str],
    kind: str,
    choice: Callable[[Sequence[str]], str],
    sample: Callable[[Sequence[str], int], Sequence[str]],
) -> tuple[str, ...]:
    """The targets of a triggered step of a `NODE_SET_KINDS` `kind` on `probe` aimed at the
    node set `size` (`NODE_SET_DRAWS`), as a clock-timed one is (`node_set`): one target of
    `drawn_targets`; every bookie (`ALL_BOOKIES`); or a minority or majority of the
    bookies' count among the ensemble's members the probe names (``@k``; the write set's for
    `ADD_TRIGGER_PROBE`) — by name on a probe a bookie reaches, which names no ensemble —
    and, for a kind that can hit a client, the other clients (`OTHER_CLIENTS`), as a
    clock-timed pause draws clients among its sources."""
    if size == "one":
        return (choice(drawn_targets(probe, bookies, kind)),)
    if size == "all":
        return (ALL_BOOKIES,)
    if probe in SELF_TRIGGER_PROBES:
        return node_set(size, bookies, bookies, sample)
    members = ("@0", "@1") if probe == ADD_TRIGGER_PROBE else ("@0", "@1", "@2")
    others = (OTHER_CLIENTS,) if kind in OTHER_CLIENTS_KINDS else ()
    return node_set(size, bookies, (*members, *others), sample)


def is_triggered(step: dict[str, Any]) -> bool:
    return isinstance(step, dict) and TRIGGER in step


def check_steps(
    steps: Sequence[Any],
    nodes: Sequence[str],
    clients: Sequence[str] = (),
) -> None:
    """Refuse a schedule that cannot replay, naming the first bad step and how to fix it.

    A step is `{"at": seconds after the run starts, "f": op, "value": {"nodes": [...]}}`;
    steps come in time order and name their targets, so a replay needs no randomness.
    Packet and pause steps may also hit `clients` (a client's link to a bookie, `value.to`;
    a client agent frozen, as a writer in a long GC pause is).
    A step may instead wait for a probe (see above).
    """
    last = 0.0
    for i, step in enumerate(steps):
        where = f"schedule step {i} ({json.dumps(step, default=str)})"
        if is_triggered(step):
            _check_triggered(where, step, nodes, clients)
        elif not isinstance(step, dict) or set(step) != {"at", "f", "value"}:
            raise ValueError(f'{where}: a step is {{"at": seconds, "f": op, "value": {{...}}}}')
        at = step["at"]
        if isinstance(at, bool) or not isinstance(at, int | float) or at < last:
            raise ValueError(
                f"{where}: 'at' must be a number of seconds, >= {last} (steps in time order)"
            )
        last = at
        if is_triggered(step):
            continue
        if step["f"] not in STEP_KIND:
            raise ValueError(f"{where}: 'f' must be one of {sorted(STEP_KIND)}")
        client_kind = STEP_KIND[step["f"]] in SIM_CLIENT_TARGET_KINDS
        allowed = [*nodes, *clients] if client_kind else list(nodes)
        targets = step["value"].get("nodes") if isinstance(step["value"], dict) else None
        if not isinstance(targets, list) or not targets or not set(targets) <= set(allowed):
            raise ValueError(f"{where}: value.nodes must be a non-empty list of {allowed}")
        if step["f"] == "start-packet":
            try:
                netem_params(step["value"])
                packet_destinations(step["value"], [*nodes, *clients])
            except ValueError as exc:
                raise ValueError(f"{where}: {exc}") from None


def _check_triggered(
    where: str, step: dict[str, Any], nodes: Sequence[str], clients: Sequence[str]
) -> None:
    if set(step) != {"at", TRIGGER, "f", "value", "hold"}:
        raise ValueError(
            f'{where}: a triggered step is {{"at": seconds, "{TRIGGER}": probe, "f": op, '
            '"value": {"nodes": [...]}, "hold": seconds}'
        )
    if step[TRIGGER] not in TRIGGER_PROBES:
        raise ValueError(f"{where}: '{TRIGGER}' must be one of {list(TRIGGER_PROBES)}")
    starts = [START_STOP[kind][0] for kind in TRIGGERED_KINDS]
    if step["f"] not in starts:
        raise ValueError(f"{where}: a triggered step's 'f' must be one of {starts}")
    hold = step["hold"]
    if isinstance(hold, bool) or not isinstance(hold, int | float) or hold <= 0:
        raise ValueError(f"{where}: 'hold' must be a positive number of seconds")
    value = step["value"]
    targets = value.get("nodes") if isinstance(value, dict) else None
    kind = STEP_KIND[step["f"]]
    others = [OTHER_CLIENTS] if clients and kind in OTHER_CLIENTS_KINDS else []
    every = [ALL_BOOKIES] if kind in NODE_SET_KINDS else []
    allowed = [*nodes, *TRIGGER_TARGETS, *every, *others]
    if not isinstance(targets, list) or not targets or not set(targets) <= set(allowed):
        raise ValueError(f"{where}: value.nodes must be a non-empty list of {allowed}")
    if ALL_BOOKIES in targets and set(targets) - {ALL_BOOKIES, OTHER_CLIENTS}:
        raise ValueError(
            f"{where}: '{ALL_BOOKIES}' is every bookie of the cluster: name no other bookie "
            f"beside it (only '{OTHER_CLIENTS}' may join it, on a pause)"
        )
    if OTHER_CLIENTS in targets and step[TRIGGER] in SELF_TRIGGER_PROBES:
        raise ValueError(
            f"{where}: '{OTHER_CLIENTS}' are the clients but the one that reached the probe, "
            f"and a bookie reaches {step[TRIGGER]!r}: aim at @self or a bookie"
        )
    if "@self" in targets and step[TRIGGER] not in SELF_TRIGGER_PROBES:
        raise ValueError(
            f"{where}: '@self' is the node that reached the probe, and a client agent reaches "
            f"{step[TRIGGER]!r}: no triggered fault can hit it; aim at @0, @1, @2 or a bookie "
            f"('@self' is for {list(SELF_TRIGGER_PROBES)})"
        )
    grudge = value.get("grudge", "isolate")
    if step["f"] == "start-partition" and grudge not in ("isolate", SPLIT):
        raise ValueError(f"{where}: a triggered partition's grudge is 'isolate' or '{SPLIT}'")


def hits_clients(steps: Sequence[dict[str, Any]], clients: Sequence[str]) -> bool:
    """Whether a schedule faults one of the client agents `clients` (by name, or as
    `OTHER_CLIENTS`)."""
    named = {n for step in steps for n in step["value"].get("nodes") or ()}
    return bool(named & {OTHER_CLIENTS, *clients})


def schedule_kinds(steps: Sequence[dict[str, Any]]) -> tuple[str, ...]:
    """The nemesis kinds a schedule uses, in order of first use."""
    return tuple(dict.fromkeys(STEP_KIND[step["f"]] for step in steps))


@dataclass
class ScheduleReplay(Generator):
    """Replays a fixed schedule: each step's op at `at` seconds after the first ask.

    Unlike `FaultCycle` it draws nothing, so a schedule found by Hypothesis (or written by
    hand) runs the same faults on the same nodes in the same order every time. A step whose
    time has come waits only for the fault before it to finish (a restart waits for the
    bookie to register), so late steps may start a little after their `at`.
    """

    steps: tuple[dict[str, Any], ...]
    start: float | None = None
    position: int = 0

    def op(self, ctx: Context) -> Answer:
        if not ctx.is_nemesis:
            return NOT_FOR_THIS_ASKER
        if self.start is None:
            self.start = ctx.time
        while self.position < len(self.steps) and is_triggered(self.steps[self.position]):
            self.position += 1  # not on the clock: nemesis/triggers.py fires it
        if self.position >= len(self.steps):
            return None
        due = self.start + self.steps[self.position]["at"]
        if ctx.time < due:  # the very sum it answers: no rounding can keep it pending
            return Pending(due)
        step = self.steps[self.position]
        self.position += 1
        return {"f": step["f"], "value": dict(step["value"])}
