"""The streaming check: a history checked segment by segment, in memory bounded by a
segment, not by the history's length (docs/history.md §9).

The history is read once, op by op. Once a segment holds `segment_lines` lines, it is cut
at the first line where no client call is outstanding and every ledger its client ops
named (created, appended to, read) has an ok closed read: the per-segment checkers
(ledger, stream, graph) run over it, their cases are tallied, and its ops are dropped.
What the other checkers need is kept for the whole history, small: a few entries per
ledger, nemesis op and audit, and 16 bytes per ok call.

A cut is exact when no later op refers to a ledger, stream or payload of the segments
before it: then no anomaly definition and no dependency cycle spans it (every call
before it completed before any after it was invoked, so realtime and process edges
across it all point forward, and no data edge crosses it). The indexer checks that for
every op (`checkers.history.Retired`); an op that breaks it (`Entangled`) starts the
check again without cuts. So the result is always the one of a single pass over the
whole history, case for case, in the same order; only the memory differs. What cannot
be dropped is the set of payloads already seen (checking that a later op does not reuse
one is element distinctness, which no streaming algorithm does in less memory); it is
kept as 8-byte digests (`checkers.history.Digests`), checked and added a segment at a
time.
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from checkers.graph import graph_anomalies
from checkers.history import Entangled, History, Indexer, Op
from checkers.ledger import judge_unchecked, ledger_anomalies
from checkers.result import UNKNOWN, Case, Tally
from checkers.stream import stream_anomalies

Part = Callable[[History], tuple[dict[str, Iterable[Case]], dict[str, int]]]

PARTS: dict[str, Part] = {
    "ledger": lambda h: (ledger_anomalies(h), {}),
    "stream": lambda h: (stream_anomalies(h), {}),
    "graph": graph_anomalies,
}
"""The checkers whose anomalies lie within one segment, as (cases by name, sizes)."""

SEGMENT_LINES = 200_000
"""Lines a segment holds before the check looks for a place to cut it."""


class Segments:
    """The per-segment checkers' results, folded over the segments in order."""

    def __init__(self) -> None:
        self.tallies = {name: Tally() for name in PARTS}
        self.sizes: dict[str, dict[str, int]] = {name: {} for name in PARTS}
        self.errors: dict[str, str] = {}
        self.count = 0

    def fold(self, h: History) -> None:
        """Check one segment with every per-segment checker; one that raises is reported
        as unknown with its error (Jepsen's rule), as `compose` does."""
        self.count += 1
        for name, part in PARTS.items():
            if name in self.errors:
                continue
            try:
                found, sizes = part(h)
                for anomaly, cases in found.items():
                    self.tallies[name].add(anomaly, iter(cases))
            except Exception as exc:
                self.errors[name] = f"{type(exc).__name__}: {exc}"
                continue
            total = self.sizes[name]
            for key, n in sizes.items():
                total[key] = total.get(key, 0) + n

    def results(self, h: History) -> dict[str, dict[str, Any]]:
        """Each per-segment checker's result, as its whole-history checker gives it."""
        results: dict[str, dict[str, Any]] = {}
        for name in PARTS:
            if name in self.errors:
                results[name] = {"valid": UNKNOWN, "error": self.errors[name]}
                continue
            result = self.tallies[name].result(sort=name == "graph") | self.sizes[name]
            results[name] = judge_unchecked(h, result) if name == "ledger" else result
        return results


def index_segments(
    ops: Iterable[Op], segment_lines: int | None = SEGMENT_LINES
) -> tuple[History, Segments]:
    """Read the ops once, checking and dropping each segment at a clean cut; returns the
    history's whole-history fields (and its last segment, folded too) and the folded
    per-segment results. Raises Entangled if a cut turns out not to be clean."""
    indexer = Indexer()
    segments = Segments()
    indexer.feed(ops, segment_lines, segments.fold)
    h = indexer.finish()
    segments.fold(h)
    h.drop_segment()
    return h, segments


@contextmanager
def _gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector: a segment allocates about a million tuples and
    lists, none in a reference cycle, and each collection would traverse them all (5% of
    a check's CPU). Cycles made meanwhile are collected once it is back on."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def check_segments(
    source: Callable[[], Iterator[Op]], segment_lines: int | None = SEGMENT_LINES
) -> tuple[History, Segments]:
    """`index_segments` over `source()`; if a cut was not clean, again without cuts."""
    with _gc_paused():
        try:
            return index_segments(source(), segment_lines)
        except Entangled:
            return index_segments(source(), None)
