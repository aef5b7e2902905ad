"""Search for a fault schedule that breaks the product, then shrink it to a minimal one.

Hypothesis draws a simulated test (the seed, the run length and a schedule of faults) and
the simulation runs it in a fraction of the real time; the first invalid history stops
the search and Hypothesis shrinks the test — fewer faults, fewer targets, a shorter run
(so fewer ops), smaller seeds — keeping only what still yields the *same* anomaly type.
Since the simulation is deterministic, the shrunk test replays exactly from its seed.

A schedule is the `TestSpec.schedule` format (`{"at", "f", "value": {"nodes": [...]}}`
steps in time order) with the real nemeses' op names (harness/sim/nemesis.py): each drawn
fault is a start step and a later stop step, so a shrunk schedule also replays with
`bkchaos test --schedule` on a real runtime.
"""

from __future__ import annotations

import random
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, Phase, find, settings
from hypothesis import strategies as st
from hypothesis.errors import NoSuchExample

from harness.runtime.sim import SimSpec, run_sim
from harness.testspec import SIM_CORRUPT_MODES, SIM_NEMESES
from nemesis.schedule import START_STOP

TICKS_PER_S = 10
ANOMALY_PRIORITY = ("lost-append", "truncated-ledger", "divergence", "dirty-read")
"""Which anomaly a search keeps while shrinking when a history shows several: the most
damning first; any other is taken in name order."""


def sim_schedules(
    nodes: tuple[str, ...] = ("b1", "b2", "b3"),
    kinds: tuple[str, ...] = SIM_NEMESES,
    time_limit: float = 3.0,
    max_faults: int = 3,
) -> st.SearchStrategy[tuple[dict[str, Any], ...]]:
    """Schedules of up to `max_faults` faults within `time_limit` seconds; each fault hits
    one or two nodes at once (two bookies losing power together is what loses data), and a
    corruption flips bits or loses the last write (`SIM_CORRUPT_MODES`; flips shrink first)."""
    ticks = round(time_limit * TICKS_PER_S)

    @st.composite
    def schedules(draw: st.DrawFn) -> tuple[dict[str, Any], ...]:
        events = []
        for _ in range(draw(st.integers(1, max_faults))):
            kind = draw(st.sampled_from(kinds))
            targets = draw(st.lists(st.sampled_from(nodes), min_size=1, max_size=2, unique=True))
            start = draw(st.integers(0, ticks - 1))
            begin, finish = START_STOP[kind]
            end = draw(st.integers(start + 1, ticks))
            value: dict[str, Any] = {"nodes": sorted(targets)}
            mode = draw(st.sampled_from(SIM_CORRUPT_MODES)) if kind == "corrupt" else "flip"
            if mode != "flip":  # the default stays implicit, as in schedules found before
                value["mode"] = mode
            events.append((start, 1, begin, value))
            events.append((end, 0, finish, {"nodes": sorted(targets)}))
        return tuple(
            {"at": tick / TICKS_PER_S, "f": f, "value": value}
            for tick, _, f, value in sorted(events, key=lambda e: e[:3])
        )

    return schedules()


def sim_tests(
    base: SimSpec, max_time: float = 3.0, max_faults: int = 3
) -> st.SearchStrategy[SimSpec]:
    """Simulated tests around `base`: a seed, a run length, a schedule."""
    return st.builds(
        lambda seed, tenths, schedule: replace(
            base, seed=seed, time_limit=tenths / TICKS_PER_S, schedule=schedule
        ),
        st.integers(0, 2**16),
        st.integers(5, round(max_time * TICKS_PER_S)),
        sim_schedules(
            nodes=tuple(f"b{i}" for i in range(1, base.bookies + 1)),
            time_limit=max_time / 2,
            max_faults=max_faults,
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


def search(
    base: SimSpec,
    budget_s: float,
    *,
    max_time: float = 3.0,
    max_faults: int = 3,
    max_examples: int = 10_000,
    search_seed: int = 0,
    on_example: Callable[[SimSpec, dict[str, Any]], None] | None = None,
) -> SearchOutcome:
    """Run simulated tests drawn by Hypothesis until one is invalid or `budget_s` real
    seconds pass; then shrink it within what is left of the budget."""
    started = time.monotonic()
    state: dict[str, Any] = {"examples": 0, "target": None, "best": None, "found_at": None}

    def invalid(spec: SimSpec) -> bool:
        if time.monotonic() - started > budget_s:
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
            sim_tests(base, max_time, max_faults),
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
