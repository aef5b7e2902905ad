"""Waiting on a real bookie's checkpoint instead of sleeping through its interval."""

from __future__ import annotations

import contextlib
import sqlite3
import time
from collections.abc import Iterable
from pathlib import Path

from bookie_image.bookie.storage import INDEX

CHECKPOINT_WAIT_S = 30.0
"""Longer than any checkpoint takes on a loaded machine (its interval is one second)."""


def indexed_entries(ledger_dir: Path, ledger: int) -> int:
    """How many entries of (64-bit, scope 0) `ledger` the bookie's index holds: the ones a
    checkpoint has moved into its entry logs."""
    index = ledger_dir / INDEX
    if not index.exists():
        return 0
    with contextlib.closing(sqlite3.connect(f"file:{index}?mode=ro", uri=True, timeout=5)) as db:
        query = "SELECT count(*) FROM entries WHERE scope = 0 AND ledger = ?"
        return db.execute(query, (ledger,)).fetchone()[0]


def wait_checkpointed(ledger_dirs: Iterable[Path | str], ledger: int, entries: int) -> None:
    """Return once every bookie (by its ledger dir) has checkpointed `entries` entries of
    `ledger`; fail after CHECKPOINT_WAIT_S."""
    dirs = [Path(d) for d in ledger_dirs]
    deadline = time.monotonic() + CHECKPOINT_WAIT_S
    while any(indexed_entries(d, ledger) < entries for d in dirs):
        if time.monotonic() > deadline:
            counts = {str(d): indexed_entries(d, ledger) for d in dirs}
            raise AssertionError(f"ledger {ledger}: {entries} entries never checkpointed: {counts}")
        time.sleep(0.05)
