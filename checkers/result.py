"""Result shape shared by every checker (docs/history.md §5)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

Valid = bool | str  # True, False or "unknown"
Case = dict[str, Any]

UNKNOWN = "unknown"
FORMAT = 1  # of results.json and test.json (docs/history.md §5); absent means 1
MAX_CASES = 1000  # examples kept per anomaly; the full count is in `anomaly_counts`


def case(explanation: str, ops: list[int], **where: Any) -> Case:
    """One anomaly case: where it is (ledger, entry, payload…), the ops, one sentence."""
    return {**where, "ops": list(dict.fromkeys(ops)), "explanation": explanation}


def merge_valid(values: Iterable[Valid]) -> Valid:
    """Jepsen's rule: false dominates, then unknown, then true."""
    merged: Valid = True
    for v in values:
        if v is False:
            return False
        if v != True:  # noqa: E712 - "unknown" (or anything unexpected) is not true
            merged = UNKNOWN
    return merged


NEXT_PHASE: Case = {}
"""Yielded by a finder between the loops of a definition (reads, then appends, say): a
streaming check keeps each loop's cases apart, so that merging segments gives the cases
in the order one pass over the whole history would (`Tally`)."""


class Tally:
    """Cases of lazy finders, added segment by segment: per anomaly and phase, the first
    MAX_CASES (enough to know the first MAX_CASES overall) and the full count."""

    def __init__(self) -> None:
        self.phases: dict[str, list[list[Case]]] = {}
        self.counts: dict[str, int] = {}

    def add(self, name: str, cases: Iterator[Case]) -> None:
        phases = self.phases.setdefault(name, [[]])
        phase, n = 0, 0
        for c in cases:
            if c is NEXT_PHASE:
                phase += 1
                if phase == len(phases):
                    phases.append([])
                continue
            n += 1
            kept = phases[phase]
            if len(kept) < MAX_CASES:
                kept.append(c)
        if n:
            self.counts[name] = self.counts.get(name, 0) + n

    def result(self, sort: bool = False) -> dict[str, Any]:
        """The result of spec §5: anomalies in the order their names were first added (or
        sorted), each with its first MAX_CASES cases, phase by phase."""
        names = sorted(self.counts) if sort else [n for n in self.phases if n in self.counts]
        anomalies = {
            name: [c for kept in self.phases[name] for c in kept][:MAX_CASES] for name in names
        }
        return {
            "valid": not anomalies,
            "anomaly_types": sorted(anomalies),
            "anomalies": anomalies,
            "anomaly_counts": {name: self.counts[name] for name in names},
        }


def collect(cases_by_name: dict[str, Iterator[Case]]) -> dict[str, Any]:
    """Run lazy anomaly finders, keep up to MAX_CASES examples each, count them all."""
    tally = Tally()
    for name, cases in cases_by_name.items():
        tally.add(name, cases)
    return tally.result()
