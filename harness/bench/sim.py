"""`bkchaos bench sim`: simulated seconds per real second of the sim runtime.

A small cluster (3 bookies, 2 client agents, ledgers E3/WQ2/AQ2, the ledger workload, no
faults) runs for `seconds` of simulated time at each offered op rate. The speed of a
simulation depends on how much work the simulated time holds: an idle simulated second
costs only the timers that fire in it (the workers wake when an op is due, each bookie
checks its disks once a second and checkpoints when there is something to flush), while
each op runs the real client and bookie code over a few simulated round trips. So the
figures are given per rate, with the CPU cost of one op beside them; CPU seconds next to
wall seconds because the machine is shared (wall time says what a user waits, CPU time
what the simulation costs).
"""

from __future__ import annotations

import os
import platform
import tempfile
import time
from pathlib import Path
from typing import Any

from harness.runtime.sim import SimSpec, run_sim

DEFAULT_RATES = (1.0, 10.0, 100.0)


def run(seconds: float = 60.0, rates: tuple[float, ...] = DEFAULT_RATES, seed: int = 1) -> dict:
    """One simulation per offered rate; returns the figures docs/performance.md records."""
    runs: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="bkchaos-bench-sim-") as tmp:
        for rate in rates:
            spec = SimSpec(seed=seed, time_limit=seconds, rate=rate)
            wall, cpu = time.perf_counter(), time.process_time()
            result = run_sim(spec, Path(tmp) / f"rate-{rate:g}")
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
            ops = result.results["stats"]["invoke"]
            runs.append(
                {
                    "rate": rate,
                    "simulated_s": round(result.simulated_s, 1),
                    "real_s": round(wall, 2),
                    "cpu_s": round(cpu, 2),
                    "sim_s_per_real_s": round(result.simulated_s / wall, 1),
                    "sim_s_per_cpu_s": round(result.simulated_s / cpu, 1),
                    "ops": ops,
                    "cpu_ms_per_op": round(1000 * cpu / ops, 2) if ops else None,
                    "valid": result.results["valid"],
                }
            )
    return {
        "cluster": "3 bookies, 2 client agents, E3/WQ2/AQ2, ledger workload, no faults",
        "seconds": seconds,
        "seed": seed,
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "load_before": round(os.getloadavg()[0], 2),
        "runs": runs,
    }
