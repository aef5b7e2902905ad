"""Search for a fault schedule that breaks the product, then shrink it to a minimal one.

Hypothesis draws a simulated test (the seed, the run length, a schedule of faults, and the
workload settings the caller leaves open: workers, pipeline, quorums, takeover and
writer-crash shares) and the simulation runs it in a fraction of the real time; the first
invalid history stops the search and Hypothesis shrinks the test — fewer faults, fewer
targets, a shorter run (so fewer ops), smaller seeds, the base's workload settings —
keeping only what still yields the *same* anomaly type.
Since the simulation is deterministic, the shrunk test replays exactly from its seed.

A schedule is the `TestSpec.schedule` format (`{"at", "f", "value": {"nodes": [...]}}`
steps in time order) with the real nemeses' op names (harness/sim/nemesis.py): each drawn
fault is a start step and a later stop step, so a shrunk schedule also replays with
`bkchaos test --schedule` on a real runtime, faults triggered by probes (`max_triggered`,
nemesis/triggers.py) included.
"""

from __future__ import annotations

import random
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, Phase, find, settings
from hypothesis import strategies as st
from hypothesis.errors import NoSuchExample

from harness.runtime.sim import SimSpec, run_sim
from harness.testspec import OP_SHARE_WORKLOADS, PIPELINED_WORKLOADS, SIM_CORRUPT_MODES
from nemesis.kinds import SIM_CLIENT_TARGET_KINDS, SIM_NEMESES, START_STOP, TRIGGERED_KINDS
from nemesis.schedule import (
    NODE_SET_DRAWS,
    NODE_SET_KINDS,
    SPLIT,
    TICKS_PER_S,
    TRIGGER,
    TRIGGER_PROBES,
    drawn_targets,
    node_set,
)

ANOMALY_PRIORITY = ("lost-append", "truncated-ledger", "divergence", "dirty-read")
"""Which anomaly a search keeps while shrinking when a history shows several: the most
damning first; any other is taken in name order."""


PACKET_DELAYS_MS = (None, 100, 200)
"""How long a drawn packet fault holds back what it shapes: None is the nemesis's default
(50±10 ms). Ordered as Hypothesis shrinks: toward the default."""

DRAWN_CHOICES: dict[str, tuple[Any, ...]] = {
    "concurrency": (4, 8, 16),
    "pipeline": (1, 2, 4),
    "quorums": ((2, 2), (3, 2), (3, 3)),
    "takeovers": (None, 0.1, 0.5),
    "writer_crashes": (0.0, 0.05),
    "latency": ((0.0002, 0.002), (0.002, 0.02)),
    "checkpoint_interval": (1.0, 0.1),
}
"""Workload settings a search may draw (its `draw` names them), each among these values and
the base's own, which comes first so that shrinking returns to it where it does not
matter. Quorums stay within an ensemble of 3; a share of ops is drawn for the workloads
that have such ops (`OP_SHARE_WORKLOADS`), a pipeline for a workload that pipelines.

Two belong to the simulated cluster, and only the corpus strategy draws them: the
network's one-way `latency` — a LAN, or one ten times slower, where at the same op rate a
writer has more adds in flight when a fault lands and a recovery finds a longer
unconfirmed tail, so the windows between racing clients widen — and the bookies'
`checkpoint_interval`. A search's runs last seconds, a real bookie's checkpoint comes
every second: with it, a restart early in a run finds nothing in the index and replays
the whole journal, never rebuilding from a checkpoint and replaying the rest; a tenth of
a second makes nearly every restart do that, as it does in a real bookie's life."""


def sim_schedules(
    nodes: tuple[str, ...] = ("b1", "b2", "b3"),
    kinds: tuple[str, ...] = SIM_NEMESES,
    time_limit: float = 3.0,
    max_faults: int = 3,
    clients: tuple[str, ...] = (),
    max_triggered: int = 0,
) -> st.SearchStrategy[tuple[dict[str, Any], ...]]:
    """Schedules of up to `max_faults` faults within `time_limit` seconds; each fault hits
    one or two nodes at once (two bookies losing power together is what loses data), a
    kill, pause or power loss a node set drawn by size, up to every bookie
    (`NODE_SET_DRAWS`), and a
    corruption flips bits or loses the last write (`SIM_CORRUPT_MODES`; flips shrink first).
    A packet fault may also shape a client's egress and a pause may freeze a client agent
    (`clients`: a writer stalled while another client takes its ledger over); a packet
    fault may shape only what goes to some bookies, for longer than the default delay: one
    slow link between a client and a bookie is what leaves a replica stale. Up to
    `max_triggered` more faults wait for a protocol probe instead of the clock
    (`_triggered_faults`)."""
    ticks = round(time_limit * TICKS_PER_S)

    @st.composite
    def schedules(draw: st.DrawFn) -> tuple[dict[str, Any], ...]:
        events = []
        for _ in range(draw(st.integers(1, max_faults))):
            kind = draw(st.sampled_from(kinds))
            sources = (*nodes, *clients) if kind in SIM_CLIENT_TARGET_KINDS else nodes
            if kind in NODE_SET_KINDS:
                size = draw(st.sampled_from(NODE_SET_DRAWS))
                targets = node_set(size, nodes, sources, partial(_distinct, draw))
            else:
                one_or_two = st.lists(st.sampled_from(sources), min_size=1, max_size=2, unique=True)
                targets = draw(one_or_two)
            start = draw(st.integers(0, ticks - 1))
            begin, finish = START_STOP[kind]
            end = draw(st.integers(start + 1, ticks))
            value: dict[str, Any] = {"nodes": sorted(targets)}
            mode = draw(st.sampled_from(SIM_CORRUPT_MODES)) if kind == "corrupt" else "flip"
            if mode != "flip":  # the default stays implicit, as in schedules found before
                value["mode"] = mode
            if kind == "packet":
                value.update(draw(_packet_shapes([n for n in nodes if n not in targets])))
            events.append((start, 1, begin, value))
            events.append((end, 0, finish, {"nodes": sorted(targets)}))
        steps = [
            {"at": tick / TICKS_PER_S, "f": f, "value": value}
            for tick, _, f, value in sorted(events, key=lambda e: e[:3])
        ]
        triggerable = tuple(k for k in TRIGGERED_KINDS if k in kinds)
        if triggerable and max_triggered:
            steps += draw(_triggered_faults(nodes, triggerable, ticks, max_triggered))
        return tuple(sorted(steps, key=lambda step: step["at"]))  # stable: clock steps first

    return schedules()


def _distinct(draw: st.DrawFn, sources: Sequence[str], count: int) -> list[str]:
    """`count` distinct nodes of `sources`, drawn by Hypothesis."""
    return draw(st.lists(st.sampled_from(sources), min_size=count, max_size=count, unique=True))


@st.composite
def _triggered_faults(
    draw: st.DrawFn, nodes: tuple[str, ...], kinds: tuple[str, ...], ticks: int, most: int
) -> list[dict[str, Any]]:
    """Faults that start when a probe is next reached after their `at` (a recovery
    starting, a write-back, an ensemble change, a takeover fencing, an add sent…), on a
    bookie that probe names or a fixed one, and stop `hold` later (nemesis/triggers.py)."""
    steps = []
    for _ in range(draw(st.integers(0, most))):
        kind = draw(st.sampled_from(kinds))
        probe = draw(st.sampled_from(TRIGGER_PROBES))
        targets = drawn_targets(probe, nodes, kind)
        value: dict[str, Any] = {"nodes": [draw(st.sampled_from(targets))]}
        if kind == "partition":
            value["grudge"] = draw(st.sampled_from(("isolate", SPLIT)))
        steps.append(
            {
                "at": draw(st.integers(0, ticks - 1)) / TICKS_PER_S,
                TRIGGER: probe,
                "f": START_STOP[kind][0],
                "value": value,
                "hold": draw(st.integers(1, ticks)) / TICKS_PER_S,
            }
        )
    return steps


@st.composite
def _packet_shapes(draw: st.DrawFn, destinations: list[str]) -> dict[str, Any]:
    """A packet fault's `to` (none: everything it sends) and delay (none: the default)."""
    shape: dict[str, Any] = {}
    if destinations:
        to = draw(st.lists(st.sampled_from(destinations), max_size=2, unique=True))
        if to:
            shape["to"] = sorted(to)
    delay = draw(st.sampled_from(PACKET_DELAYS_MS))
    if delay is not None:
        shape["delay_ms"] = delay
    return shape


def sim_workloads(base: SimSpec, draw: frozenset[str]) -> st.SearchStrategy[SimSpec]:
    """`base` with the workload settings named in `draw` drawn from `DRAWN_CHOICES`."""

    def among(name: str, current: Any) -> st.SearchStrategy[Any]:
        if name not in draw:
            return st.just(current)
        return st.sampled_from([current, *(v for v in DRAWN_CHOICES[name] if v != current)])

    pipelined = base.workload in PIPELINED_WORKLOADS
    least_workers = base.clients * (1 if "pipeline" in draw else base.pipeline)

    @st.composite
    def workloads(draw_from: st.DrawFn) -> SimSpec:
        concurrency = draw_from(
            among("concurrency", base.concurrency).filter(lambda c: c >= least_workers)
        )
        most = max(1, concurrency // base.clients) if pipelined else 1
        pipeline = draw_from(among("pipeline", base.pipeline).filter(lambda p: p <= most))
        write_quorum, ack_quorum = draw_from(among("quorums", (base.write_quorum, base.ack_quorum)))
        shares = {
            name: draw_from(among(name, getattr(base, name)))
            for name, workloads in OP_SHARE_WORKLOADS.items()
            if base.workload in workloads
        }
        return replace(
            base,
            concurrency=concurrency,
            pipeline=pipeline,
            write_quorum=write_quorum,
            ack_quorum=ack_quorum,
            **shares,
        )

    return workloads()


def sim_tests(
    base: SimSpec,
    max_time: float = 3.0,
    max_faults: int = 3,
    kinds: tuple[str, ...] = SIM_NEMESES,
    draw: frozenset[str] = frozenset(),
    max_triggered: int = 0,
) -> st.SearchStrategy[SimSpec]:
    """Simulated tests around `base`: its workload settings named in `draw`, a seed, a run
    length, a schedule of faults of `kinds` (up to `max_triggered` of them triggered by
    probes; 0 keeps the draws — and so the searches recorded in docs — as they were)."""
    return st.builds(
        lambda workload, seed, tenths, schedule: replace(
            workload, seed=seed, time_limit=tenths / TICKS_PER_S, schedule=schedule
        ),
        sim_workloads(base, draw),
        st.integers(0, 2**16),
        st.integers(5, round(max_time * TICKS_PER_S)),
        sim_schedules(
            nodes=tuple(f"b{i}" for i in range(1, base.bookies + 1)),
            kinds=kinds,
            time_limit=max_time / 2,
            max_faults=max_faults,
            clients=tuple(f"c{i}" for i in range(1, base.clients + 1)),
            max_triggered=max_triggered,
        ),
    )


def target_anomaly(anomaly_types: list[str]) -> str:
    ranked = [a for a in ANOMALY_PRIORITY if a in anomaly_types]
    return ranked[0] if ranked else sorted(anomaly_types)[0]


class _OutOfBudget(Exception):
    pass


def _budget_ran_out(exc: BaseException) -> bool:
    if isinstance(exc, BaseExceptionGroup):
        return exc.subgroup(_OutOfBudget) is not None
    return isinstance(exc, _OutOfBudget)


@dataclass
class SearchOutcome:
    """What a search found: the minimal failing test (None if none), and its cost."""

    found: SimSpec | None
    anomaly: str | None
    examples: int
    seconds_to_find: float | None
    seconds_total: float
    first: SimSpec | None = None
    shrink_steps: int = 0
    coverage: list[str] = field(default_factory=list)
    """What the search's tests reached (probes, op outcomes), for a steered search."""


def search(
    base: SimSpec,
    budget_s: float,
    *,
    max_time: float = 3.0,
    max_faults: int = 3,
    max_examples: int = 10_000,
    search_seed: int = 0,
    kinds: tuple[str, ...] = SIM_NEMESES,
    draw: frozenset[str] = frozenset(),
    on_example: Callable[[SimSpec, dict[str, Any]], None] | None = None,
    max_triggered: int = 0,
) -> SearchOutcome:
    """Run simulated tests drawn by Hypothesis (faults of `kinds`; the workload settings
    named in `draw`, the others `base`'s) until one is invalid; then shrink it. Either
    stops after `max_examples` simulated runs in all (drawn and shrinking alike: the same
    outcome on any machine) or `budget_s` real seconds, whichever comes first."""
    started = time.monotonic()
    state: dict[str, Any] = {"examples": 0, "target": None, "best": None, "found_at": None}

    def invalid(spec: SimSpec) -> bool:
        if state["examples"] >= max_examples or time.monotonic() - started > budget_s:
            raise _OutOfBudget
        with tempfile.TemporaryDirectory(prefix="bkchaos-search-") as tmp:
            results = run_sim(spec, Path(tmp)).results
        state["examples"] += 1
        if on_example is not None:
            on_example(spec, results)
        if results["valid"] is not False:
            return False
        if state["target"] is None:
            state["target"] = target_anomaly(results["anomaly_types"])
            state["found_at"] = time.monotonic() - started
            state["first"] = spec
        if state["target"] not in results["anomaly_types"]:
            return False
        state["best"] = spec
        state["shrinks"] = state.get("shrinks", 0) + 1
        return True

    options = settings(
        max_examples=max_examples,
        deadline=None,
        database=None,
        phases=(Phase.generate, Phase.shrink),
        suppress_health_check=list(HealthCheck),
    )
    try:
        found = find(
            sim_tests(base, max_time, max_faults, kinds, draw, max_triggered),
            invalid,
            settings=options,
            random=random.Random(search_seed),
        )
    except NoSuchExample:
        found = None
    except BaseException as exc:  # Hypothesis may wrap the budget's end in an exception group
        if not _budget_ran_out(exc):
            raise
        found = state["best"]
    return SearchOutcome(
        found=found,
        anomaly=state["target"] if found is not None else None,
        examples=state["examples"],
        seconds_to_find=state["found_at"],
        seconds_total=time.monotonic() - started,
        first=state.get("first"),
        shrink_steps=max(0, state.get("shrinks", 0) - 1),
    )
