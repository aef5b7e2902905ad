"""Latency and throughput per f, inside and outside nemesis fault windows.

A fault window opens when a nemesis op that is not a healing op is invoked, and closes
when a healing op (`stop-…` or one of `HEALING_OPS`) completes, or at the end of the
history: the report shades these windows. Overlapping faults share one window, which
closes at the first healing op after it opened.
"""

from __future__ import annotations

from array import array
from typing import Any

import numpy as np

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


def _summarize(latencies: np.ndarray, seconds: float) -> dict[str, Any]:
    n = len(latencies)
    ranks = [min(n - 1, int(q * n)) for q in QUANTILES]
    ranked = np.partition(latencies, ranks)  # each rank's value in its sorted place
    return {
        "count": n,
        "throughput_per_s": round(n / seconds, 3) if seconds > 0 else None,
        "latency_ms": {str(q): int(ranked[k]) / 1e6 for q, k in zip(QUANTILES, ranks, strict=True)},
    }


def _times(times: array[int]) -> np.ndarray:
    """Ok calls' times as int64, or as Python ints (exact, slower) if any is so far
    from zero that a latency could overflow int64 (2^62 ns is 146 years from 1970)."""
    as_int64 = np.frombuffer(times, np.int64)
    if len(as_int64) and max(-int(as_int64.min()), int(as_int64.max())) >= 2**62:
        return as_int64.astype(object)
    return as_int64


def check_perf(h: History) -> dict[str, Any]:
    """Latency quantiles (ms) and throughput of ok calls, per f, in and out of faults."""
    windows = fault_windows(h)
    starts = [start for start, _ in windows]
    # the end of the last window opened at or before a time (a call invoked before any
    # window opened gets index 0 and is outside them all)
    ends = [0, *(end for _, end in windows)]
    lat: dict[tuple[str, bool], np.ndarray] = {}
    for f, (invoked, completed) in h.ok_times.items():  # half a million calls: numpy's speed
        inv, done = _times(invoked), _times(completed)
        if inv.dtype != done.dtype:
            inv, done = inv.astype(object), done.astype(object)
        latencies = done - inv
        opened = np.searchsorted(np.array(starts, inv.dtype), inv, side="right")
        inside = (opened > 0) & (inv <= np.array(ends, inv.dtype)[opened])
        for fault, values in ((False, latencies[~inside]), (True, latencies[inside])):
            if len(values):
                lat[(f, fault)] = values
    start = h.first_time if h.first_time is not None else 0
    total = (h.end_time - start) / 1e9
    faulty = sum(end - start for start, end in windows) / 1e9
    by_f: dict[str, dict[str, Any]] = {}
    for (f, inside), values in sorted(lat.items()):
        seconds = faulty if inside else total - faulty
        by_f.setdefault(f, {})["fault" if inside else "calm"] = _summarize(values, seconds)
    return {"valid": True, "fault_windows_ns": windows, "by_f": by_f}
