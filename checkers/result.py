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


def collect(cases_by_name: dict[str, Iterator[Case]]) -> dict[str, Any]:
    """Run lazy anomaly finders, keep up to MAX_CASES examples each, count them all."""
    anomalies: dict[str, list[Case]] = {}
    counts: dict[str, int] = {}
    for name, cases in cases_by_name.items():
        kept: list[Case] = []
        n = 0
        for c in cases:
            n += 1
            if n <= MAX_CASES:
                kept.append(c)
        if n:
            anomalies[name] = kept
            counts[name] = n
    return {
        "valid": not anomalies,
        "anomaly_types": sorted(anomalies),
        "anomalies": anomalies,
        "anomaly_counts": counts,
    }
