"""Protocol coverage of a run: how often each probe (bookie_image/probes.py) was reached.

The simulation counts probes in-process; real bookies and client agents write a `probe`
event per probe reached (a per-add probe once per process) into their structured logs,
which the runner collects into `logs/<node>/` — this module counts those. Either way
`results.json` gets ``"coverage": {probe: count}`` with every declared probe, 0 when never
reached.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

from bookie_image.probes import PROBES, coverage

__all__ = ["count_logs", "coverage_view", "probe_event", "reached", "unreached"]


def probe_event(line: bytes | str) -> dict[str, Any] | None:
    """The `probe` event a node's log line holds, or None for any other line (another
    event, a traceback, a line cut short)."""
    try:
        event = json.loads(line)
    except ValueError:
        return None
    return event if isinstance(event, dict) and event.get("event") == "probe" else None


def count_logs(logs_dir: Path) -> dict[str, int]:
    """The coverage the node logs under `logs_dir` (`<node>/*.log`) record. Lines that are
    not JSON events (a traceback, a supervisor's note) are skipped, as are probes this
    harness does not declare (an image built from other sources)."""
    counts: Counter[str] = Counter()
    for log in sorted(logs_dir.glob("*/*.log")):
        with log.open(encoding="utf-8", errors="replace") as lines:
            for line in lines:
                if '"probe"' in line and (event := probe_event(line)) is not None:
                    name = event.get("probe")
                    if name in PROBES:
                        counts[name] += 1
    return coverage(counts)


def coverage_view(cov: dict[str, int] | None) -> dict[str, Any] | None:
    """What a report shows of a run's coverage: the probes reached (with counts) and those
    never reached, each with its corner and reference; None for a run without coverage."""
    if cov is None:
        return None

    def row(name: str) -> dict[str, Any]:
        probe = PROBES[name]
        return {
            "name": name,
            "count": cov.get(name, 0),
            "corner": probe.corner,
            "reference": f"reference {probe.reference}: “{probe.passage}”",
        }

    return {
        "total": len(PROBES),
        "reached": [row(name) for name in reached(cov) if name in PROBES],
        "unreached": [row(name) for name in unreached(cov)],
    }


def reached(cov: dict[str, int]) -> list[str]:
    return sorted(name for name, count in cov.items() if count)


def unreached(cov: dict[str, int]) -> list[str]:
    """Declared probes the run never reached (a coverage without some declared probe —
    an older run's — counts them as unreached too)."""
    return sorted(name for name in PROBES if not cov.get(name))
