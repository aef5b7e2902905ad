"""`bkchaos bench search`: the no-hint search's tests per second with one job and with N,
side by side in one run.

Each search is the no-hint one (`bkchaos search` with no hint, the correct build) with the
same seed and budget; only `--jobs` differs, so the walks differ too (a seed and a number
of jobs make a walk) but draw from the same space. Besides tests per wall second it
reports tests per CPU second of the search's whole process tree (driver and workers): on
a machine others share, wall time says what this machine gave, CPU time what the search
cost.
"""

from __future__ import annotations

import os
import time
from typing import Any

from harness.bench.farm import tree_cpu_s
from harness.sim.corpus import Space, steered_search


def run(space: Space, budget_s: float, jobs: tuple[int, ...], seed: int = 0) -> dict[str, Any]:
    """One search per number of jobs, one after the other: its tests, wall and CPU time."""
    searches = []
    for n in jobs:
        load_before = round(os.getloadavg()[0], 2)
        started, cpu_before = time.monotonic(), tree_cpu_s()
        outcome = steered_search(space, budget_s, search_seed=seed, jobs=n)
        wall, cpu = time.monotonic() - started, tree_cpu_s() - cpu_before
        searches.append(
            {
                "jobs": n,
                "tests": outcome.examples,
                "wall_s": round(wall, 1),
                "cpu_s": round(cpu, 1),
                "tests_per_s": round(outcome.examples / wall, 2),
                "tests_per_cpu_s": round(outcome.examples / cpu, 2) if cpu else None,
                "anomaly": outcome.anomaly,
                "load_before": load_before,
            }
        )
    first = searches[0]["tests_per_s"]
    for search in searches:
        search["speedup"] = round(search["tests_per_s"] / first, 2) if first else None
    return {"budget_s": budget_s, "seed": seed, "cpus": os.cpu_count(), "searches": searches}
