"""The simulation farm: the steered search's tests, run in batches on Spark executors.

The driver draws tests from the same space, the same way, as `bkchaos search`'s corpus
strategy (`harness.sim.corpus.next_candidate`), a round at a time; Spark runs each batch
of a round as one task (a task costs tens of milliseconds to schedule and ship, a short
test a few hundred: batching keeps the overhead a small share); each executor runs its
tests in the deterministic simulation and returns one compact row per test (`farm_row`,
the columns of `checkers.spark.farm.ROWS`). The driver offers every row's features to
the corpus in the tests' order, so the next round is steered by all that the farm has
reached, and the same farm seed walks the same tests on any cluster, up to where the
budget stops it. The first failing test of each anomaly type is shrunk on the driver and
stored as a run directory with its replay command.

Executors import this module by name: only `run_batch` and what it calls run there.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import random
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.errors import UserError
from harness.runtime.sim import SimSpec, run_sim
from harness.sim.corpus import (
    SHRINK_SHARE,
    Candidate,
    Corpus,
    Space,
    features,
    next_candidate,
    run_one,
    shrink,
)
from harness.sim.search import target_anomaly
from harness.sim.workers import Inline

VERDICTS = {True: "valid", False: "invalid", "unknown": "unknown"}

Runner = Callable[[list[dict[str, Any]]], list[dict[str, Any]]]
"""Runs a round of tests (dicts of `farm`, `night`, `test`, `round`, `spec`) and returns
their rows, in any order."""


def spec_json(spec: SimSpec) -> str:
    """A test's settings as the JSON a row carries (`spec_from_json` reads it back)."""
    fields = dataclasses.asdict(spec)
    fields.pop("runtime")
    return json.dumps(fields, sort_keys=True)


def spec_from_json(text: str) -> SimSpec:
    """The SimSpec of a row's `spec`: JSON lists back to the tuples SimSpec holds."""
    fields = json.loads(text)
    return SimSpec(**{k: tuple(v) if isinstance(v, list) else v for k, v in fields.items()})


def farm_row(test: dict[str, Any]) -> dict[str, Any]:
    """Run one test of a round in the simulation (in a scratch directory) and return its
    row: the test's fields plus verdict, anomaly types, probe counts, the features that
    steer the corpus, simulated and CPU seconds, and the history's SHA-256 (which a local
    replay of `spec` reproduces: the simulation is deterministic)."""
    spec = spec_from_json(test["spec"])
    cpu = time.process_time()
    with tempfile.TemporaryDirectory(prefix="bkchaos-farm-") as tmp:
        result = run_sim(spec, Path(tmp))
        digest = hashlib.sha256((Path(tmp) / "history.jsonl").read_bytes()).hexdigest()
    results = result.results
    return {
        **test,
        "workload": spec.workload,
        "bugs": list(spec.bugs),
        "seed": spec.seed,
        "verdict": VERDICTS[results["valid"]],
        "anomaly_types": sorted(results["anomaly_types"]),
        "coverage": dict(results.get("coverage", {})),
        "features": sorted(features(results)),
        "sim_s": round(result.simulated_s, 3),
        "cpu_s": round(time.process_time() - cpu, 4),
        "history_sha256": digest,
    }


def run_batch(tests: Iterable[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    """A batch of tests, one after another: what one Spark task runs."""
    for test in tests:
        yield farm_row(test)


def in_process(tests: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A round run in this process, one test after another: the farm without Spark, and
    the bench's measure of the tests' own cost."""
    return list(run_batch(tests))


@dataclass
class SparkRunner:
    """Runs a round on Spark: `batch_size` tests per task, one task per batch."""

    context: Any  # pyspark.SparkContext
    batch_size: int

    @property
    def slots(self) -> int:
        """Tasks the cluster runs at once."""
        return max(1, int(self.context.defaultParallelism))

    def __call__(self, tests: list[dict[str, Any]]) -> list[dict[str, Any]]:
        tasks = max(1, math.ceil(len(tests) / self.batch_size))
        return self.context.parallelize(tests, tasks).mapPartitions(run_batch).collect()


@dataclass
class Failure:
    """The first failing test of an anomaly type, and what shrinking made of it."""

    anomaly: str
    row: dict[str, Any]
    candidate: Candidate
    shrunk: Candidate | None = None
    shrink_steps: int = 0
    shrink_runs: int = 0


@dataclass
class FarmOutcome:
    """What a farm ran and found; its rows went to `on_round` (a long farm on a large
    cluster makes millions: the driver keeps counts, the corpus and failures only)."""

    tests: int = 0
    rounds: int = 0
    seconds: float = 0.0
    cpu_s: float = 0.0
    verdicts: Counter[str] = field(default_factory=Counter)
    corpus: Corpus = field(default_factory=Corpus)
    failures: dict[str, Failure] = field(default_factory=dict)
    interrupted: bool = False


RoundDone = Callable[[int, list[dict[str, Any]], FarmOutcome], None]
"""Told after each round: its number, its rows (in test order), the farm so far."""


def run_farm(
    space: Space,
    runner: Runner,
    *,
    round_size: int,
    budget_s: float,
    max_tests: int,
    seed: int,
    farm: str,
    night: str,
    on_round: RoundDone,
) -> FarmOutcome:
    """Run rounds of `round_size` tests until `max_tests` ran, `budget_s` real seconds
    passed (checked between rounds) or an interrupt (Ctrl-C ends the farm after the
    rounds done, not the process); each round is drawn from the corpus the earlier
    rounds built. Failures are recorded, not shrunk (`shrink_failures`)."""
    started = time.monotonic()
    rng = random.Random(seed)
    outcome = FarmOutcome()
    try:
        while outcome.tests < max_tests and time.monotonic() - started < budget_s:
            size = min(round_size, max_tests - outcome.tests)
            candidates = [next_candidate(space, rng, outcome.corpus) for _ in range(size)]
            tests = [
                {
                    "farm": farm,
                    "night": night,
                    "test": outcome.tests + i,
                    "round": outcome.rounds,
                    "spec": spec_json(c.to_spec()),
                }
                for i, c in enumerate(candidates)
            ]
            rows = sorted(runner(tests), key=lambda r: r["test"])
            if [r["test"] for r in rows] != [t["test"] for t in tests]:
                raise RuntimeError(f"round {outcome.rounds}: {len(rows)} rows for {size} tests")
            for candidate, row in zip(candidates, rows, strict=True):
                outcome.corpus.offer(candidate, frozenset(row["features"]))
                outcome.verdicts[row["verdict"]] += 1
                outcome.cpu_s += row["cpu_s"]
                if row["verdict"] == "invalid":
                    anomaly = target_anomaly(row["anomaly_types"])
                    outcome.failures.setdefault(anomaly, Failure(anomaly, row, candidate))
            outcome.tests += size
            outcome.rounds += 1
            outcome.seconds = time.monotonic() - started
            on_round(outcome.rounds, rows, outcome)
    except KeyboardInterrupt:
        outcome.interrupted = True
    outcome.seconds = time.monotonic() - started
    return outcome


def shrink_failures(
    outcome: FarmOutcome,
    space: Space,
    budget_s: float,
    run: Callable[[SimSpec], dict[str, Any]] = run_one,
) -> None:
    """Shrink each failure on the driver (corpus.shrink: the same anomaly, fewer faults,
    a shorter run…), each within an equal share of what is left of the budget, and at
    least `SHRINK_SHARE` of it in all, as the search grants its shrinker."""
    left = max(budget_s - outcome.seconds, SHRINK_SHARE * budget_s)
    failures = list(outcome.failures.values())
    for i, failure in enumerate(failures):
        share = left / (len(failures) - i)
        started = time.monotonic()
        failure.shrunk, failure.shrink_steps, failure.shrink_runs = shrink(
            failure.candidate, failure.anomaly, Inline(run), started + share, space
        )
        left -= time.monotonic() - started


# ---- shipping the package to executors ---------------------------------------------------


def build_wheel(out: Path) -> Path:
    """Build bkchaos's wheel from this source checkout into `out` (from a copy of exactly
    the files the image's wheel is built from, so no stale `build/` leaks in)."""
    from bookie_image.image.build import ImageBuildError, project_root, source_files

    try:
        root = project_root()
    except ImageBuildError:
        raise UserError(
            "--ship wheel builds the wheel from a source checkout, and this bkchaos is "
            "installed from a wheel: pass that wheel instead (--ship PATH.whl)"
        ) from None
    src = out / "src"
    for rel in source_files(root):
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(root / rel, src / rel)
    done = subprocess.run(
        [
            *(sys.executable, "-m", "pip", "wheel", "--no-deps", "--disable-pip-version-check"),
            *("--quiet", "-w", str(out), str(src)),
        ],
        capture_output=True,
        text=True,
    )
    wheels = sorted(out.glob("bkchaos-*.whl"))
    if done.returncode != 0 or not wheels:
        raise UserError(f"the bkchaos wheel did not build (pip wheel):\n{done.stderr[-2000:]}")
    return wheels[-1]


def ship(context: Any, wheel: Path, workdir: Path) -> Path:
    """Send `wheel` to every executor and put it on their Python path, as `--py-files`
    does. Spark adds only .zip/.egg/.jar files to the path; a pure-Python wheel is a zip
    that Python imports from directly, so it travels under a `.zip` name."""
    if not zipfile.is_zipfile(wheel):
        raise UserError(f"--ship {wheel}: not a wheel (a zip archive) built by pip wheel")
    shipped = workdir / f"{wheel.name}.zip"
    shutil.copyfile(wheel, shipped)
    context.addPyFile(str(shipped))
    return shipped


def executor_origin(context: Any, tasks: int) -> list[str]:
    """Where the executors import `harness` from (one answer per task): the shipped wheel
    when `ship` did its work."""
    return context.parallelize(range(tasks), tasks).map(lambda _: _harness_file()).collect()


def _harness_file() -> str:
    import harness

    return str(Path(harness.__file__).resolve())
