"""Latency and throughput per f, inside and outside nemesis fault windows.

A fault window opens when a nemesis op that is not a healing op is invoked, and closes
when a healing op (`stop-…` or one of `HEALING_OPS`) completes, or at the end of the
history: the report shades these windows. Overlapping faults share one window, which
closes at the first healing op after it opened.
"""

from __future__ import annotations

import bisect
from itertools import compress, repeat
from operator import le, not_, sub
from typing import Any

from checkers.history import History

QUANTILES = (0.5, 0.95, 0.99, 1.0)
HEALING_OPS = frozenset(
    {
        "heal",
        "restart",
        "resume",
        "restore",
        "rejoin",
        "power-on",
        "corrupt-restart",
        "clock-reset",
        "clock-strobe-stop",
        "free-disk",
    }
)
"""Nemesis ops that end a fault (besides `stop-…`); the nemesis package's stop ops, named
here because checkers import nothing of ours (a test keeps the two in step)."""


def is_healing(f: str) -> bool:
    return f in HEALING_OPS or f.startswith("stop-")


def fault_windows(h: History) -> list[tuple[int, int]]:
    """[(start_ns, end_ns)] during which at least one fault may be in effect."""
    windows: list[tuple[int, int]] = []
    start: int | None = None
    for c in h.nemesis:
        f = c.inv.f
        if is_healing(f):
            if start is not None:
                windows.append((start, (c.done or c.inv).time))
                start = None
        elif start is None:
            start = c.inv.time
    if start is not None:
        windows.append((start, h.end_time))
    return windows


def _summarize(latencies: list[int], seconds: float) -> dict[str, Any]:
    latencies.sort()
    n = len(latencies)
    return {
        "count": n,
        "throughput_per_s": round(n / seconds, 3) if seconds > 0 else None,
        "latency_ms": {str(q): latencies[min(n - 1, int(q * n))] / 1e6 for q in QUANTILES},
    }


def check_perf(h: History) -> dict[str, Any]:
    """Latency quantiles (ms) and throughput of ok calls, per f, in and out of faults."""
    windows = fault_windows(h)
    starts = [start for start, _ in windows]
    # the end of the last window opened at or before a time; none opened: below any time
    ends = [-(2**64), *(end for _, end in windows)]
    lat: dict[tuple[str, bool], list[int]] = {}
    for f, (invoked, completed) in h.ok_times.items():  # half a million calls: C speed
        latencies = list(map(sub, completed, invoked))
        opened = map(bisect.bisect_right, repeat(starts), invoked)
        inside = list(map(le, invoked, map(ends.__getitem__, opened)))
        for fault, values in (
            (False, compress(latencies, map(not_, inside))),
            (True, compress(latencies, inside)),
        ):
            bucket = list(values)
            if bucket:
                lat[(f, fault)] = bucket
    start = h.first_time if h.first_time is not None else 0
    total = (h.end_time - start) / 1e9
    faulty = sum(end - start for start, end in windows) / 1e9
    by_f: dict[str, dict[str, Any]] = {}
    for (f, inside), values in sorted(lat.items()):
        seconds = faulty if inside else total - faulty
        by_f.setdefault(f, {})["fault" if inside else "calm"] = _summarize(values, seconds)
    return {"valid": True, "fault_windows_ns": windows, "by_f": by_f}
