"""A run's verdict: the checkers' result joined with its faults' proofs (`check_run`), and
why the verdict is what it is, as lines a person reads: the first case of each
anomaly, each unproven fault, each unchecked ledger and its last closed-read error, an
interrupted final phase. `bkchaos test` prints them (coloured) and the pytest plugin puts
them in a failure message, from one list so that neither leaves a reason out."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol


class FaultRecord(Protocol):
    """What a run recorded of its faults (harness.controller.RunCounters has it)."""

    faults: list[str]
    fault_errors: list[str]


def check_run(history_path: Path, record: FaultRecord) -> dict[str, Any]:
    """The checkers' result for the history, with the nemesis's: a fault that could not be
    proven makes the run's verdict unknown, never a silent pass."""
    import checkers  # here: `reasons` serves the pytest plugin, which must stay light

    results = checkers.check(history_path)
    nemesis = {
        "valid": "unknown" if record.fault_errors else True,
        "faults": len(record.faults),
        "errors": record.fault_errors,
    }
    results["checkers"]["nemesis"] = nemesis
    results["valid"] = checkers.merge_valid([results["valid"], nemesis["valid"]])
    return results


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
    if results.get("interrupted"):
        found.append(("yellow", "interrupted", ": the final phase did not complete"))
    return found
