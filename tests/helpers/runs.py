"""What the tests of whole runs read back from a run's history."""

from __future__ import annotations

import json
from pathlib import Path


def proven_faults(history: Path) -> set[str]:
    """The fault ops (start, stop) whose completion carries a proof that they took effect."""
    ops = [json.loads(line) for line in history.read_text().splitlines() if '"nemesis"' in line]
    return {op["f"] for op in ops if op["type"] == "info" and "proof" in (op["value"] or {})}
