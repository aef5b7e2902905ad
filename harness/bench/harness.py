"""`bkchaos bench harness`: how many ops/s the controller records end to end, no faults.

One `run_test` per worker count, unthrottled (a rate no generator delay can reach), on the
docker runtime by default (`--runtime local` for loopback processes). The rate is every
client op completion the history records
between the first invocation and the heal that ends the run phase, over that span (the
final phase and the checks are outside it). CPU seconds spent meanwhile by the controller and
by each kind of cluster process (bookies, client agents, ZooKeeper) — sampled from /proc
while the run is in its running phase; a container's processes are this machine's too —
say what dominates.
"""

from __future__ import annotations

import json
import os
import platform
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

from harness.controller import RunCounters
from harness.runner import run_test
from harness.testspec import TestSpec

TARGET_OPS_PER_S = 2000
UNTHROTTLED_RATE = 1e9
NOTES = {
    "docker": "ZooKeeper, 3 bookies and 2 client agents each in a container",
    "local": "ZooKeeper, 3 bookies and 2 client agents as loopback processes",
}
_TICKS = os.sysconf("SC_CLK_TCK")


def _cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of one process (0 if it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / _TICKS


def _kind(pid: int) -> str:
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return "other"
    for marker, kind in (
        ("bookie_image.agent", "agents"),
        ("bookie_image.bookie", "bookies"),
        ("zookeeper", "zookeeper"),
    ):
        if marker in cmdline.lower():
            return kind
    return "other"


def _cluster_pids() -> list[int]:
    """Every process on this machine that is a bookie, an agent or ZooKeeper — ours as
    children on the local runtime, the containers' under their shims on docker. (So run
    the benchmark on an otherwise idle machine.)"""
    return [int(p.name) for p in Path("/proc").glob("[0-9]*") if _kind(int(p.name)) != "other"]


class CpuSampler:
    """CPU seconds per process kind, from the first to the last sample of the running phase."""

    def __init__(self) -> None:
        self.first: dict[int, float] = {}
        self.last: dict[int, float] = {}
        self.kinds: dict[int, str] = {os.getpid(): "controller"}

    def __call__(self, counters: RunCounters, elapsed: float) -> None:
        if counters.phase != "running":
            return
        for pid in [os.getpid(), *_cluster_pids()]:
            if pid not in self.kinds:
                self.kinds[pid] = _kind(pid)
            used = _cpu_seconds(pid)
            self.first.setdefault(pid, used)
            self.last[pid] = used

    def by_kind(self) -> dict[str, float]:
        totals: Counter[str] = Counter()
        for pid, used in self.last.items():
            totals[self.kinds[pid]] += used - self.first[pid]
        return {kind: round(seconds, 2) for kind, seconds in totals.most_common()}


def measure(history: Path) -> dict[str, Any]:
    """Client completions recorded from the first invocation until the heal that starts
    the final phase (outstanding ops drain before it), per second of that span."""
    start = end = None
    kinds: Counter[str] = Counter()
    with history.open() as fh:
        for line in fh:
            op = json.loads(line)
            if op["process"] == "nemesis":
                if op["f"] == "heal":
                    end = op["time"]
                    break
                continue
            start = op["time"] if start is None else start
            if op["type"] != "invoke":
                kinds[op["type"]] += 1
    span = (end - start) / 1e9 if start is not None and end is not None else 0.0
    completions = sum(kinds.values())
    return {
        "completions": completions,
        "measured_s": round(span, 2),
        "ops_per_s": round(completions / span, 1) if span else 0.0,
        **{k: kinds[k] for k in ("ok", "fail", "info")},
    }


def run(
    workers: list[int], seconds: float, workload: str = "ledger", runtime: str = "docker"
) -> dict[str, Any]:
    """One unthrottled, fault-free run per worker count; the figures docs record."""
    load = os.getloadavg()
    runs = []
    with tempfile.TemporaryDirectory(prefix="bkchaos-bench-harness-") as store:
        for count in workers:
            spec = TestSpec(
                name=f"bench-harness-{count}",
                workload=workload,
                concurrency=count,
                time_limit=seconds,
                rate=UNTHROTTLED_RATE,
                seed=1,
                store=store,
                runtime=runtime,
            )
            sampler = CpuSampler()
            run_dir, results = run_test(spec, sampler)
            figures = measure(run_dir / "history.jsonl")
            runs.append(
                {
                    "workers": count,
                    **figures,
                    "valid": results["valid"],
                    "cpu_seconds": sampler.by_kind(),
                }
            )
    return {
        "workload": workload,
        "seconds": seconds,
        "runtime": runtime,
        "note": NOTES[runtime],
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "load_before": [round(x, 1) for x in load],
        "target_ops_per_s": TARGET_OPS_PER_S,
        "runs": runs,
    }
