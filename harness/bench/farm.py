"""`bkchaos bench farm`: the farm's tests per second on `local[1]`, `local[2]` and a
`local-cluster` of two executor JVMs, side by side on the same draw of tests, and what the
farm costs per test over running the same tests one after another in one process.

Each master gets one warm-up job first (a Python worker per slot starts and imports
bkchaos once: a farm pays that once a night, not per test), then runs every test in one
job of `batch_size` tests per task; the one process warms up on two tests likewise. The
tests are the farm's first round: fresh draws from the no-hint search's space, so every
master runs exactly the same simulations.
"""

from __future__ import annotations

import os
import random
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness.farm import SparkRunner, in_process, spec_json
from harness.sim.corpus import Space

MASTERS = ("local[1]", "local[2]", "local-cluster[2,1,1024]")
_TICKS = os.sysconf("SC_CLK_TCK")
QUIET = {"spark.ui.enabled": "false", "spark.driver.memory": "768m"}


def tree_cpu_s() -> float:
    """CPU seconds of this process and every descendant (Spark's JVMs, their Python
    daemons and workers), with the children they have reaped, from /proc: what the farm
    costs the machine, whatever else runs on it."""
    parents: dict[int, int] = {}
    cpu: dict[int, float] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # exited meanwhile
        pid = int(stat.parent.name)
        parents[pid] = int(fields[1])
        cpu[pid] = sum(int(f) for f in fields[11:15]) / _TICKS  # utime stime cutime cstime
    tree, frontier = {os.getpid()}, [os.getpid()]
    while frontier:
        parent = frontier.pop()
        children = [pid for pid, ppid in parents.items() if ppid == parent]
        tree.update(children)
        frontier += children
    return sum(cpu.get(pid, 0.0) for pid in tree)


def draw(space: Space, tests: int, seed: int) -> list[dict[str, Any]]:
    """`tests` fresh draws of the farm's space (its first round, for `seed`)."""
    rng = random.Random(seed)
    return [
        {"farm": "bench", "night": "bench", "test": i, "round": 0, "spec": spec_json(c.to_spec())}
        for i, c in enumerate(space.fresh(rng) for _ in range(tests))
    ]


def run(
    space: Space,
    start_spark: Callable[[str, Path], Any],
    tests: int = 160,
    batch_size: int = 20,
    seed: int = 0,
) -> dict[str, Any]:
    """The figures (see the module doc). `start_spark(master, workdir)` gives the farm's
    SparkSession for a master (the CLI's, so the bench farms as `bkchaos farm` does).
    `overhead` is the CPU the farm on one slot (`local[1]`: driver, JVM, Python workers)
    spends beyond the same tests run in one process, as a fraction of the tests' own CPU
    time; `overhead_wall` the same from wall time, which a loaded machine blurs."""
    batch = draw(space, tests, seed)
    load_before = round(os.getloadavg()[0], 2)
    in_process(batch[:2])  # warm-up: the first simulation in a process imports the rest
    cpu, t0 = time.process_time(), time.perf_counter()
    rows = in_process(batch)
    alone = {
        "seconds": round(time.perf_counter() - t0, 2),
        "cpu_s": round(time.process_time() - cpu, 2),
    }
    digests = [r["history_sha256"] for r in rows]
    per_master: dict[str, dict[str, Any]] = {}
    for master in MASTERS:
        with tempfile.TemporaryDirectory(prefix="bkchaos-bench-farm-") as workdir:
            session = start_spark(master, Path(workdir))
            try:
                runner = SparkRunner(session.sparkContext, batch_size)
                t0 = time.perf_counter()
                runner(batch[: runner.slots])  # warm-up: start each slot's Python worker
                warm_up = time.perf_counter() - t0
                cpu, t0 = tree_cpu_s(), time.perf_counter()
                got = sorted(runner(batch), key=lambda r: r["test"])
                seconds = time.perf_counter() - t0
                farm_cpu = tree_cpu_s() - cpu
                slots = runner.slots
            finally:
                session.stop()
        tests_cpu = sum(r["cpu_s"] for r in got)
        per_master[master] = {
            "slots": slots,
            "seconds": round(seconds, 2),
            "warm_up_s": round(warm_up, 2),
            "tests_per_s": round(tests / seconds, 3),
            "tests_cpu_s": round(tests_cpu, 2),
            "cpu_efficiency": round(tests_cpu / (seconds * slots), 3),
            "farm_cpu_s": round(farm_cpu, 2),
            "same_histories": [r["history_sha256"] for r in got] == digests,
        }
    one, two = per_master["local[1]"], per_master["local[2]"]
    overhead_s = one["seconds"] - alone["seconds"]
    overhead_cpu_s = one["farm_cpu_s"] - alone["cpu_s"]
    return {
        "tests": tests,
        "batch_size": batch_size,
        "seed": seed,
        "cpus": os.cpu_count(),
        "load_before": load_before,
        "load_after": round(os.getloadavg()[0], 2),
        "one_process": {**alone, "tests_per_s": round(tests / alone["seconds"], 3)},
        "masters": per_master,
        "tests_per_s": {
            "local[1]": one["tests_per_s"],
            "local[2]": two["tests_per_s"],
            "local-cluster": per_master["local-cluster[2,1,1024]"]["tests_per_s"],
        },
        "speedup_local2": round(two["tests_per_s"] / one["tests_per_s"], 3),
        "overhead": round(overhead_cpu_s / alone["cpu_s"], 3),
        "overhead_cpu_ms_per_test": round(1000 * overhead_cpu_s / tests, 1),
        "overhead_wall": round(overhead_s / alone["cpu_s"], 3),
        "overhead_wall_ms_per_test": round(1000 * overhead_s / tests, 1),
    }
