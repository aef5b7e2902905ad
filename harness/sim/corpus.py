"""A steered search: a fuzzer's corpus of simulated tests, kept for what they reached.

Hypothesis (harness/sim/search.py) draws every test afresh, so a budget is spent on the
corners the first draws reach anyway. Here, as a coverage-guided fuzzer does, a test that
reached something no earlier test reached — a protocol probe (`results["coverage"]`,
bookie_image/probes.py), an op outcome (`append` that failed, `recover` that succeeded…),
or a combination of them not seen before — joins the corpus, and most later tests are
*mutations* of corpus tests: another seed (with BUGGIFY on, another interleaving of the
same faults), a fault moved, added or removed, one workload setting redrawn, BUGGIFY
flipped. Tests that reached rare features are picked more often. The first invalid
history stops the search; a greedy shrinker then removes what the same anomaly does not
need (faults, BUGGIFY, run length, drawn settings, second targets).

Everything is drawn from one `random.Random(search_seed)`: the same search seed walks the
same tests, whatever the machine's speed, up to where the budget stops it. With workers
(`jobs`, harness/sim/workers.py) results are offered in the order drawn, so the seed and
the number of jobs make the walk.
"""

from __future__ import annotations

import random
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import closing
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from harness.errors import UserError
from harness.runtime.sim import SimSpec, run_sim
from harness.sim.search import (
    DRAWN_CHOICES,
    PACKET_DELAYS_MS,
    SearchOutcome,
    target_anomaly,
)
from harness.sim.workers import Run, Runner, in_order, runner_for
from harness.testspec import OP_SHARE_WORKLOADS, PIPELINED_WORKLOADS, SIM_CORRUPT_MODES
from nemesis.kinds import SIM_CLIENT_TARGET_KINDS
from nemesis.schedule import (
    NODE_SET_DRAWS,
    NODE_SET_KINDS,
    OTHER_CLIENTS,
    SELF_TRIGGER_PROBES,
    SPLIT,
    START_STOP,
    TICKS_PER_S,
    TRIGGER,
    TRIGGER_PROBES,
    TRIGGERED_KINDS,
    drawn_node_set,
    node_set,
)

SPARE_BOOKIES = (0, 1, 2)
"""Bookies a search may add beyond the ensemble's when it draws the cluster's size: with a
spare, a writer replaces a failed bookie (an ensemble change) instead of going on degraded."""
FRESH_SHARE = 0.25
"""Share of tests drawn afresh once the corpus holds something (the rest are mutations)."""
SHRINK_SHARE = 0.25
"""The least share of the budget the shrinker gets, even when the find came late."""
OUTAGE_KINDS = ("kill", "power-loss")
"""The kinds that take a bookie down (a correlated pair's outage): a restart after either
brings it back from its disk, with whatever it forgot."""
AIMED_SHARE = 0.5
"""Share of the changes to a kept test that aim a fault at a protocol window the test
reached (a trigger probe among its features): a kill, power loss, pause or partition
that waits for that probe. The child runs as its parent did up to the fault, so the fault
lands in the window: a bookie failing as a recovery writes back, as a ledger is fenced,
as a write-back brings a bookie an entry it lacked."""
CORRELATED_SHARE = 0.25
"""Share of the aimed changes at a window a client reaches that aim a correlated pair
there instead of one fault (`Space._correlate`): the other clients paused on that probe,
and a majority of the bookies or every one killed or powered off on it too, armed as late as
the pause is or up to `fault_ticks` later — at once, or once more takeovers have fenced
and been checkpointed — the pause outlasting the outage: a rack losing power while a
writer sits in a GC pause, as other clients take its ledgers over. Drawn fault by fault,
such a pair is hardly ever drawn (docs/performance.md)."""
CORRELATED_SIZES = ("majority", "all")
"""The node sets a correlated pair's outage hits, as often as `NODE_SET_DRAWS` has each:
a majority of the bookies (no quorum left) or every one (none left)."""
DRAWN_AHEAD_PER_JOB = 2
"""Tests drawn ahead of the results offered, per job: enough that a worker that finishes
finds the next test waiting while a slower one still runs; each is drawn from a corpus that
many tests behind."""


@dataclass(frozen=True)
class Fault:
    """One drawn fault: its start and stop (in ticks of 1/TICKS_PER_S s), kind, targets
    and the extra fields of its start step (corruption mode, packet shaping). With a
    `trigger` (a probe) it is armed at `start`, fires when the probe is next reached and
    holds for `end - start` ticks (nemesis/triggers.py): one step, not two."""

    start: int
    end: int
    kind: str
    targets: tuple[str, ...]
    extra: tuple[tuple[str, Any], ...] = ()
    trigger: str = ""

    def steps(self) -> list[tuple[int, int, str, dict[str, Any]]]:
        """(tick, order within the tick, op, step) for each step of this fault."""
        begin, finish = START_STOP[self.kind]
        value = {"nodes": sorted(self.targets), **dict(self.extra)}
        at = self.start / TICKS_PER_S
        if self.trigger:
            hold = (self.end - self.start) / TICKS_PER_S
            step = {"at": at, TRIGGER: self.trigger, "f": begin, "value": value, "hold": hold}
            return [(self.start, 2, begin, step)]
        stop = {"at": self.end / TICKS_PER_S, "f": finish, "value": {"nodes": sorted(self.targets)}}
        return [
            (self.start, 1, begin, {"at": at, "f": begin, "value": value}),
            (self.end, 0, finish, stop),
        ]


@dataclass(frozen=True)
class Candidate:
    """A test of the search: its settings (`spec`, schedule left empty) and its faults."""

    spec: SimSpec
    faults: tuple[Fault, ...]

    def to_spec(self) -> SimSpec:
        steps = sorted((s for fault in self.faults for s in fault.steps()), key=lambda s: s[:3])
        return replace(self.spec, schedule=tuple(step for *_, step in steps))


@dataclass
class Space:
    """What a search may draw: the workloads, fault kinds, the settings named in `draw`
    (the others are `base`'s), and whether BUGGIFY may be on."""

    base: SimSpec
    workloads: tuple[str, ...]
    kinds: tuple[str, ...]
    draw: frozenset[str]
    buggify: bool = True
    max_time: float = 3.0
    max_faults: int = 3
    triggered_share: float = 1 / 3
    """Share of drawn faults of a triggerable kind that wait for a protocol probe instead
    of a clock tick (a kill as a recovery writes back, a pause as a takeover fences)."""

    @property
    def bookies(self) -> tuple[str, ...]:
        """The bookies faults hit: the first `base.bookies`, which every drawn cluster has
        (spares drawn beyond them only take part as replacements)."""
        return tuple(f"b{i}" for i in range(1, self.base.bookies + 1))

    @property
    def clients(self) -> tuple[str, ...]:
        return tuple(f"c{i}" for i in range(1, self.base.clients + 1))

    # -- fresh draws -------------------------------------------------------------------------

    def fresh(self, rng: random.Random) -> Candidate:
        spec = replace(
            self.base,
            workload=rng.choice(self.workloads),
            seed=rng.randrange(2**16),
            time_limit=rng.randint(5, round(self.max_time * TICKS_PER_S)) / TICKS_PER_S,
            buggify=self.buggify and rng.random() < 0.5,
        )
        spec = self._settings(rng, spec, self.draw)
        faults = tuple(self.fault(rng) for _ in range(rng.randint(1, self.max_faults)))
        return Candidate(spec, faults)

    def _settings(self, rng: random.Random, spec: SimSpec, names: frozenset[str]) -> SimSpec:
        """`spec` with the settings `names` redrawn, kept within what its workload takes."""
        changes: dict[str, Any] = {}
        if "bookies" in names:
            changes["bookies"] = rng.choice(SPARE_BOOKIES) + self.base.bookies
        for name in ("concurrency", "pipeline", "latency", "checkpoint_interval"):
            if name in names:
                changes[name] = rng.choice(DRAWN_CHOICES[name])
        if "quorums" in names:
            changes["write_quorum"], changes["ack_quorum"] = rng.choice(DRAWN_CHOICES["quorums"])
        for share in OP_SHARE_WORKLOADS:
            if share in names:
                changes[share] = rng.choice(DRAWN_CHOICES[share])
        return fit(replace(spec, **changes), self.base)

    @property
    def fault_ticks(self) -> int:
        """Faults start and end within the first half of the longest run (in ticks)."""
        return round(self.max_time / 2 * TICKS_PER_S)

    def fault(self, rng: random.Random) -> Fault:
        ticks = self.fault_ticks
        kind = rng.choice(self.kinds)
        if kind in TRIGGERED_KINDS and rng.random() < self.triggered_share:
            return self._triggered(rng, kind, ticks)
        on_clients = kind in SIM_CLIENT_TARGET_KINDS  # a client's links, a client frozen
        sources = (*self.bookies, *self.clients) if on_clients else self.bookies
        if kind in NODE_SET_KINDS:
            targets = node_set(rng.choice(NODE_SET_DRAWS), self.bookies, sources, rng.sample)
        else:
            targets = tuple(sorted(rng.sample(sources, rng.choice((1, 1, 2)))))
        start = rng.randrange(ticks)
        extra: dict[str, Any] = {}
        if kind == "corrupt" and (mode := rng.choice(SIM_CORRUPT_MODES)) != "flip":
            extra["mode"] = mode
        if kind == "packet":
            others = [b for b in self.bookies if b not in targets]
            if others and rng.random() < 0.5:
                extra["to"] = sorted(rng.sample(others, rng.randint(1, min(2, len(others)))))
            if (delay := rng.choice(PACKET_DELAYS_MS)) is not None:
                extra["delay_ms"] = delay
        return Fault(start, rng.randint(start + 1, ticks), kind, targets, tuple(extra.items()))

    def _triggered(
        self, rng: random.Random, kind: str, ticks: int, probe: str | None = None
    ) -> Fault:
        probe = probe or rng.choice(TRIGGER_PROBES)
        size = rng.choice(NODE_SET_DRAWS) if kind in NODE_SET_KINDS else "one"
        targets = drawn_node_set(size, probe, self.bookies, kind, rng.choice, rng.sample)
        extra = {"grudge": rng.choice(("isolate", SPLIT))} if kind == "partition" else {}
        start = rng.randrange(ticks)
        end = start + rng.randint(1, ticks)
        return Fault(start, end, kind, targets, tuple(extra.items()), probe)

    # -- mutations ---------------------------------------------------------------------------

    def mutate(
        self, rng: random.Random, parent: Candidate, reached: frozenset[str] = frozenset()
    ) -> Candidate:
        """One or two small changes to a corpus test that reached the features `reached`;
        `AIMED_SHARE` of them aim a fault at one of the trigger probes among those."""
        windows = [probe for probe in TRIGGER_PROBES if f"probe:{probe}" in reached]
        triggerable = [kind for kind in self.kinds if kind in TRIGGERED_KINDS]
        child = parent
        for _ in range(rng.choice((1, 1, 2))):
            if windows and triggerable and rng.random() < AIMED_SHARE:
                probe = rng.choice(windows)
                if self._correlatable(probe) and rng.random() < CORRELATED_SHARE:
                    child = self._correlate(rng, child, probe)
                else:
                    child = self._aim(rng, child, probe, rng.choice(triggerable))
            else:
                child = rng.choice(self._mutations)(self, rng, child)
        return child

    def _correlatable(self, probe: str) -> bool:
        """Whether a correlated pair can be aimed at `probe`: a client reaches it, another
        client can be paused, and a kill or power loss is among the kinds."""
        return (
            probe not in SELF_TRIGGER_PROBES
            and len(self.clients) > 1
            and "pause" in self.kinds
            and any(kind in self.kinds for kind in OUTAGE_KINDS)
        )

    def _correlate(self, rng: random.Random, c: Candidate, probe: str) -> Candidate:
        """`c` with a correlated pair on `probe` (`CORRELATED_SHARE`), in place of some of
        its faults when it has too many. Armed at one tick, both fire at the same reach
        (nemesis/triggers.py fires every step armed for it); the outage armed later fires
        at a later reach, while the pause, which holds past the outage's end, still does."""
        faults = list(c.faults)
        while len(faults) > self.max_faults - 2:
            faults.pop(rng.randrange(len(faults)))
        kind = rng.choice([k for k in OUTAGE_KINDS if k in self.kinds])
        size = rng.choice([s for s in NODE_SET_DRAWS if s in CORRELATED_SIZES])
        targets = drawn_node_set(size, probe, self.bookies, kind, rng.choice, rng.sample)
        ticks = self.fault_ticks
        start = rng.randrange(ticks)
        outage_start = start + rng.randrange(ticks)
        outage_end = outage_start + rng.randint(1, ticks)
        pause_end = outage_end + rng.randint(1, ticks)
        outage = Fault(outage_start, outage_end, kind, targets, (), probe)
        pause = Fault(start, pause_end, "pause", (OTHER_CLIENTS,), (), probe)
        return replace(c, faults=(*faults, pause, outage))

    def _aim(self, rng: random.Random, c: Candidate, probe: str, kind: str) -> Candidate:
        """`c` with a fault of `kind` triggered by `probe` (in place of one of its faults
        when it has as many as it may)."""
        faults = c.faults
        if len(faults) >= self.max_faults:
            i = rng.randrange(len(faults))
            faults = faults[:i] + faults[i + 1 :]
        aimed = self._triggered(rng, kind, self.fault_ticks, probe)
        return replace(c, faults=(*faults, aimed))

    def _reseed(self, rng: random.Random, c: Candidate) -> Candidate:
        return replace(c, spec=replace(c.spec, seed=rng.randrange(2**16)))

    def _flip_buggify(self, rng: random.Random, c: Candidate) -> Candidate:
        on = self.buggify and not c.spec.buggify
        return replace(c, spec=replace(c.spec, buggify=on))

    def _move_fault(self, rng: random.Random, c: Candidate) -> Candidate:
        if not c.faults:
            return self._add_fault(rng, c)
        i = rng.randrange(len(c.faults))
        fault = c.faults[i]
        shift = rng.randint(-5, 5)
        start = max(0, fault.start + shift)
        moved = replace(fault, start=start, end=max(start + 1, fault.end + rng.randint(-5, 5)))
        return replace(c, faults=(*c.faults[:i], moved, *c.faults[i + 1 :]))

    def _add_fault(self, rng: random.Random, c: Candidate) -> Candidate:
        if len(c.faults) >= self.max_faults:
            return self._drop_fault(rng, c)
        return replace(c, faults=(*c.faults, self.fault(rng)))

    def _drop_fault(self, rng: random.Random, c: Candidate) -> Candidate:
        if len(c.faults) <= 1:
            return replace(c, faults=(self.fault(rng),))
        i = rng.randrange(len(c.faults))
        return replace(c, faults=c.faults[:i] + c.faults[i + 1 :])

    def _redraw_setting(self, rng: random.Random, c: Candidate) -> Candidate:
        if not self.draw:
            return self._reseed(rng, c)
        name = rng.choice(sorted(self.draw))
        return replace(c, spec=self._settings(rng, c.spec, frozenset({name})))

    def _longer_or_shorter(self, rng: random.Random, c: Candidate) -> Candidate:
        tenths = round(c.spec.time_limit * TICKS_PER_S) + rng.choice((-5, 5, 10))
        limit = min(max(5, tenths), round(self.max_time * TICKS_PER_S)) / TICKS_PER_S
        return replace(c, spec=replace(c.spec, time_limit=limit))

    _mutations: tuple[Callable[[Space, random.Random, Candidate], Candidate], ...] = (
        _reseed,
        _reseed,
        _flip_buggify,
        _move_fault,
        _add_fault,
        _drop_fault,
        _redraw_setting,
        _longer_or_shorter,
    )


def fit(spec: SimSpec, base: SimSpec) -> SimSpec:
    """`spec` made acceptable to its workload: a share only where the workload has it
    (else the base's default), a pipeline only for one that pipelines and at most the
    workers of one agent, enough workers to feed it."""
    shares = {
        name: getattr(spec, name) if spec.workload in workloads else getattr(SimSpec, name)
        for name, workloads in OP_SHARE_WORKLOADS.items()
    }
    pipeline = spec.pipeline if spec.workload in PIPELINED_WORKLOADS else 1
    pipeline = min(pipeline, max(1, spec.concurrency // spec.clients))
    fitted = replace(spec, pipeline=pipeline, **shares)
    try:
        fitted.as_test()
    except UserError:
        return replace(base, seed=spec.seed, time_limit=spec.time_limit, workload=spec.workload)
    return fitted


def features(results: dict[str, Any]) -> frozenset[str]:
    """What a run reached: its probes, and its op outcomes (`op:recover:fail`)."""
    reached = {f"probe:{name}" for name, count in results.get("coverage", {}).items() if count}
    by_f = results.get("checkers", {}).get("stats", {}).get("by_f", {})
    for f, outcomes in by_f.items():
        reached.update(f"op:{f}:{kind}" for kind, count in outcomes.items() if count)
    return frozenset(reached)


@dataclass
class Corpus:
    """The tests kept, what each reached, and how many kept tests reached each feature."""

    entries: list[tuple[Candidate, frozenset[str]]] = field(default_factory=list)
    seen: Counter[str] = field(default_factory=Counter)
    combinations: set[frozenset[str]] = field(default_factory=set)

    def offer(self, candidate: Candidate, reached: frozenset[str]) -> frozenset[str] | None:
        """Keep `candidate` if it reached a new feature or a new combination of probes;
        returns the new features (empty for a new combination only), or None if it was not
        kept. Combinations count probes only: op outcomes combine in so many ways that
        nearly every test would be kept, and a corpus that keeps everything steers nothing."""
        new = frozenset(f for f in reached if f not in self.seen)
        probes = frozenset(f for f in reached if f.startswith("probe:"))
        if not new and probes in self.combinations:
            return None
        self.combinations.add(probes)
        self.seen.update(reached)
        self.entries.append((candidate, reached))
        return new

    def pick(self, rng: random.Random) -> tuple[Candidate, frozenset[str]]:
        """A kept test and what it reached, weighted by how rare the features it reached are."""
        weights = [
            sum(1 / self.seen[f] for f in sorted(reached)) + 0.01 for _, reached in self.entries
        ]
        return rng.choices(self.entries, weights)[0]


Progress = Callable[[int, SimSpec, dict[str, Any], frozenset[str] | None, "Corpus"], None]
"""Told after each test: its number, the test, its results, its new features (None: not
kept), the corpus."""


def next_candidate(space: Space, rng: random.Random, corpus: Corpus) -> Candidate:
    """The next test of a steered search: drawn afresh while the corpus is empty and for
    `FRESH_SHARE` of the draws after, else a mutation of a kept test. The search and the
    farm (harness/farm.py) both draw here, so they walk the same space the same way."""
    if not corpus.entries or rng.random() < FRESH_SHARE:
        return space.fresh(rng)
    return space.mutate(rng, *corpus.pick(rng))


def run_one(spec: SimSpec) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="bkchaos-search-") as tmp:
        return run_sim(spec, Path(tmp)).results


def steered_search(
    space: Space,
    budget_s: float,
    *,
    search_seed: int = 0,
    max_examples: int = 10_000,
    on_example: Progress | None = None,
    run: Run = run_one,
    jobs: int = 1,
) -> SearchOutcome:
    """Run corpus-steered tests until one is invalid, `budget_s` real seconds pass, or
    `max_examples` tests ran; then shrink the invalid one (see `shrink`).

    With `jobs` > 1, that many worker processes run the tests (`run` must then be a
    module-level function) and the shrinker's; the results are offered in the order the
    tests were drawn, each test drawn once the one `DRAWN_AHEAD_PER_JOB * jobs` places
    before it was offered: one seed and one number of jobs walk the same tests on any
    machine. At the budget's end running tests are stopped, not waited for (a test that
    was not offered is not counted). With one job the driver runs each test itself, and
    finishes the one it is running when the budget ends."""
    started = time.monotonic()
    rng = random.Random(search_seed)
    corpus = Corpus()
    examples = 0

    def drawn() -> Iterator[tuple[Candidate, SimSpec]]:
        for _ in range(max_examples):
            candidate = next_candidate(space, rng, corpus)
            yield candidate, candidate.to_spec()

    ahead = 1 if jobs == 1 else DRAWN_AHEAD_PER_JOB * jobs
    with runner_for(jobs, run) as runner:
        tests = in_order(runner, drawn(), started + budget_s, _is_invalid, ahead)
        with closing(tests):
            for candidate, spec, results in tests:
                examples += 1
                new = corpus.offer(candidate, features(results))
                if on_example is not None:
                    on_example(examples, spec, results, new, corpus)
                if _is_invalid(results):
                    found_at = time.monotonic() - started
                    break
            else:
                return SearchOutcome(
                    found=None,
                    anomaly=None,
                    examples=examples,
                    seconds_to_find=None,
                    seconds_total=time.monotonic() - started,
                    coverage=sorted(corpus.seen),
                )
        anomaly = target_anomaly(results["anomaly_types"])
        shrink_until = started + max(budget_s, found_at + SHRINK_SHARE * budget_s)
        shrunk, steps, tried = shrink(
            candidate, anomaly, runner, shrink_until, space, max_runs=max_examples - examples
        )
    return SearchOutcome(
        found=shrunk.to_spec(),
        anomaly=anomaly,
        examples=examples + tried,
        seconds_to_find=found_at,
        seconds_total=time.monotonic() - started,
        first=spec,
        shrink_steps=steps,
        coverage=sorted(corpus.seen),
    )


def _is_invalid(results: dict[str, Any]) -> bool:
    return results["valid"] is False


SHRUNK_SETTINGS = (
    "bookies",
    "concurrency",
    "pipeline",
    "write_quorum",
    "takeovers",
    "writer_crashes",
    "latency",
    "checkpoint_interval",
)
"""Drawn settings the shrinker puts back to the search's own (ack_quorum goes with WQ)."""


def shrink(
    failing: Candidate,
    anomaly: str,
    runner: Runner,
    until: float,
    space: Space,
    max_runs: int = 10_000,
) -> tuple[Candidate, int, int]:
    """Greedily simplify `failing` while it still shows `anomaly`, until no step helps,
    `max_runs` tests ran or the clock reaches `until`: drop a fault, narrow a fault to one
    target, turn BUGGIFY off, shorten the run, put drawn settings back to the search's own
    (settings the user gave are never touched). The seed stays: another seed is another
    test. Each step takes the first simplification, in `_simpler`'s order, that still
    shows the anomaly: with several workers trying them side by side, the one a
    sequential shrinker would take, whichever finished first. Returns (the simplest test,
    steps taken, tests run up to each step's choice)."""
    steps = tried = 0
    current = failing

    def shows(results: dict[str, Any]) -> bool:
        return results["valid"] is False and anomaly in results["anomaly_types"]

    while time.monotonic() < until and tried < max_runs:
        options = [(simpler, simpler.to_spec()) for simpler in _simpler(current, space)]
        with closing(in_order(runner, iter(options[: max_runs - tried]), until, shows)) as tests:
            for simpler, _spec, results in tests:
                tried += 1
                if shows(results):
                    current, steps = simpler, steps + 1
                    break
            else:
                break
    return current, steps, tried


def _simpler(c: Candidate, space: Space) -> list[Candidate]:
    """The one-step simplifications of `c`, the biggest first."""
    options: list[Candidate] = []
    for i in range(len(c.faults)):
        if len(c.faults) > 1:
            options.append(replace(c, faults=c.faults[:i] + c.faults[i + 1 :]))
    for i, fault in enumerate(c.faults):
        for target in fault.targets if len(fault.targets) > 1 else ():
            narrowed = replace(fault, targets=(target,))
            options.append(replace(c, faults=(*c.faults[:i], narrowed, *c.faults[i + 1 :])))
    if c.spec.buggify:
        options.append(replace(c, spec=replace(c.spec, buggify=False)))
    tenths = round(c.spec.time_limit * TICKS_PER_S)
    for shorter in sorted({tenths // 2, tenths - 5, tenths - 1}):
        if 5 <= shorter < tenths:
            options.append(replace(c, spec=replace(c.spec, time_limit=shorter / TICKS_PER_S)))
    base = space.base
    for name in SHRUNK_SETTINGS:
        if name in space.draw and getattr(c.spec, name) != getattr(base, name):
            settings = {name: getattr(base, name)}
            if name == "write_quorum":
                settings["ack_quorum"] = base.ack_quorum
            simpler = replace(c.spec, **settings)
            if simpler == fit(simpler, simpler):
                options.append(replace(c, spec=simpler))
    return options
