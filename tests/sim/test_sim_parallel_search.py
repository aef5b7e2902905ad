"""`bkchaos search --jobs N`: the steered search's tests in N worker processes. It finds and
shrinks a seeded bug, one seed and one N walk the same tests, shrinking takes the step a
sequential shrinker takes, workers run the code a mutant's copy of the tree holds, and a
bad N is refused (by the search and by `bkchaos bench search`)."""

from __future__ import annotations

import json
import math
import time
from dataclasses import replace
from pathlib import Path

import pytest

from harness.bench.mutants import Defect, run_mutant
from harness.cli import main
from harness.runtime.sim import SimSpec
from harness.sim.corpus import Candidate, Fault, Space, run_one, shrink, steered_search
from harness.sim.search import DRAWN_CHOICES
from harness.sim.workers import Inline, Workers
from harness.testspec import WORKLOADS
from nemesis.kinds import SIM_NEMESES

pytestmark = pytest.mark.sim

ROOT = Path(__file__).resolve().parents[2]
EVERY_SETTING = frozenset({*DRAWN_CHOICES, "bookies"})
SPACE = Space(SimSpec(), WORKLOADS, SIM_NEMESES, EVERY_SETTING, max_time=1.5)


def test_a_two_job_search_finds_shrinks_and_replays_a_seeded_bug(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The bug the sequential search finds (tests/sim/test_sim_corpus.py), bounded by a
    number of tests: seed 0 with two jobs finds it within 80 (seed 3 did before
    the search drew client pauses)."""
    args = ["search", "--bug", "no-journal-fsync", "--budget", "1h", "--max-examples", "80"]
    args += ["--jobs", "2", "--seed", "0", "--max-time", "1.5", "--store", str(tmp_path)]
    with pytest.raises(SystemExit) as exited:
        main([*args, "--json"])
    assert exited.value.code == 1
    summary = json.loads(capsys.readouterr().out)
    assert summary["jobs"] == 2 and summary["examples"] <= 80
    assert summary["anomaly"] and summary["replay_valid"] is False
    assert len(summary["minimal"]["schedule"]) <= len(summary["first"]["schedule"])


def test_one_seed_and_one_number_of_jobs_walk_the_same_tests() -> None:
    """Whichever worker finishes first, the results are offered in the order drawn."""

    def walk() -> list[SimSpec]:
        specs: list[SimSpec] = []
        steered_search(
            SPACE,
            budget_s=3600,
            search_seed=4,
            max_examples=10,
            on_example=lambda _n, spec, *_: specs.append(spec),
            jobs=2,
        )
        return specs

    first = walk()
    assert len(first) == 10 and walk() == first


def test_shrinking_on_workers_takes_the_steps_a_sequential_shrinker_takes() -> None:
    """A failing test with more than it needs; the same minimal test, steps and tests
    counted, whether its simplifications run one at a time or two side by side."""
    space = replace(SPACE, base=replace(SPACE.base, bugs=("no-journal-fsync",)))
    spec = replace(space.base, workload="log", seed=4321, time_limit=1.5, buggify=True)
    failing = Candidate(
        replace(spec, bookies=4, concurrency=8),
        (
            Fault(4, 6, "power-loss", ("b2",)),
            Fault(8, 12, "kill", ("b1", "b3")),
            Fault(2, 9, "pause", ("b1",)),
        ),
    )
    assert run_one(failing.to_spec())["anomaly_types"] == ["under-replicated"]
    alone = shrink(failing, "under-replicated", Inline(run_one), math.inf, space)
    with Workers(2, run_one) as workers:
        side_by_side = shrink(failing, "under-replicated", workers, math.inf, space)
    assert side_by_side == alone
    shrunk, steps, _ = alone
    assert steps >= 3 and len(shrunk.faults) == 1


FORGETS_ADDS = Defect(
    "forgets-every-add: a bookie acknowledges an add it never stores",
    "bookie_image/bookie/bookie.py",
    "            self.store.apply_add(lk, entry_id, req.entry, header.lac, truncate)\n",
    "",
)
"""A defect every test shows (the clean build never does): caught only if the tests run
the mutated copy of the tree."""


def test_a_mutant_s_search_runs_its_tests_on_the_mutated_copy() -> None:
    """`bkchaos bench mutants` runs the search on a copy of the tree; with two jobs its
    tests run only in workers, which must import that copy, not the installed tree."""
    result = run_mutant(ROOT, FORGETS_ADDS, "10m", ("--jobs", "2", "--max-examples", "10"))
    assert result.outcome == "caught", result


@pytest.mark.parametrize("jobs", ["0", "1,-1", "two"])
def test_bench_search_refuses_a_bad_number_of_jobs(
    jobs: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["bench", "search", "--jobs", jobs])
    assert exited.value.code == 254 and "--jobs" in capsys.readouterr().err


def test_a_worker_stopped_mid_test_leaves_no_scratch_directory_behind() -> None:
    """At a budget's end running tests are stopped, so a worker never leaves the
    `TemporaryDirectory` of its test: its files go under the workers' one scratch
    directory, which leaving the pool removes."""
    spec = replace(SimSpec(), time_limit=60.0)
    with Workers(2, run_one) as workers:
        workers.start(0, spec)
        deadline = time.monotonic() + 60
        while not any(workers.scratch.iterdir()) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert any(workers.scratch.iterdir()), "the test's directory is not in the scratch"
        assert workers.running() == {0}  # stopped mid-test on leaving
    assert not workers.scratch.exists()
