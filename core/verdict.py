"""Why a run's verdict is what it is, as lines a person reads: the first case of each
anomaly, each unproven fault, each unchecked ledger and its last closed-read error, an
interrupted final phase. `bkchaos test` prints them (coloured) and the pytest plugin puts
them in a failure message, from one list so that neither leaves a reason out."""

from __future__ import annotations

from typing import Any


def reasons(results: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(colour, head, rest) per reason; a line reads `head + rest`. Red for anomalies,
    yellow for what makes a run unknown."""
    found = [
        ("red", name, f" ×{len(cases)}: {cases[0].get('explanation', '')}")
        for name, cases in results["anomalies"].items()
    ]
    found += [
        ("yellow", "fault not proven", f": {error}")
        for error in results["checkers"].get("nemesis", {}).get("errors", [])
    ]
    found += [
        (
            "yellow",
            "unchecked",
            f" ledger {unchecked['ledger']}: no closed read succeeded "
            f"(last error: {unchecked['closed_read_error']})",
        )
        for unchecked in results["checkers"].get("ledger", {}).get("unchecked_why", [])
    ]
    found += [
        ("yellow", "nothing to judge", f": {sub['unknown_why']}")
        for sub in results["checkers"].values()
        if isinstance(sub, dict) and sub.get("unknown_why")
    ]
    found += [
        ("yellow", f"checker {name} crashed", f": {sub['error']}")
        for name, sub in results["checkers"].items()
        if isinstance(sub, dict) and sub.get("error")
    ]
    if results.get("interrupted"):
        found.append(("yellow", "interrupted", ": the final phase did not complete"))
    return found
