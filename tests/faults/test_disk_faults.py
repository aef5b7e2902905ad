"""The fault suite's disk faults: power loss, wiped disks and lost writes, with the bkchaos
pytest plugin.

A clean build must stay valid when a bookie loses what it had not fsynced or comes back
with an empty disk (its cookie then keeps it out); the seeded bugs these faults expose must
be caught within a few runs (`test_count`), with the settings `bkchaos bench detect` uses,
so the rates in docs/performance.md ("Seeded-bug detection") say how many runs to allow.
"""

from __future__ import annotations

import pytest

from harness.bench.detect import detection_run

pytestmark = pytest.mark.integration


@pytest.mark.chaos(nemesis=["power-loss"], nemesis_interval=2, time_limit=8)
def test_acknowledged_entries_survive_power_loss() -> None:
    """A bookie acknowledges only what its journal fsynced, so a power cut loses none of it."""


@pytest.mark.chaos(nemesis=["wipe"], nemesis_interval=2, time_limit=8)
def test_a_wiped_bookie_is_kept_out_by_its_cookie() -> None:
    """A bookie whose disk came back empty refuses to start instead of answering "no such
    entry" for what it once held."""


@pytest.mark.chaos(
    nemesis=["power-loss"],
    bugs=["no-journal-fsync"],
    expect="invalid",
    anomalies=["lost-append", "truncated-ledger"],
    test_count=2,
    **detection_run(),
)
def test_acks_before_the_journal_fsync_are_caught() -> None:
    """A journal that acknowledges before its fsync loses acknowledged entries at a power cut."""


@pytest.mark.chaos(
    nemesis=["wipe"],
    bugs=["no-cookie"],
    expect="invalid",
    anomalies=["lost-append", "truncated-ledger"],
    test_count=2,
    **detection_run(),
)
def test_a_wiped_bookie_rejoining_without_a_cookie_check_is_caught() -> None:
    """Without the cookie check an empty bookie rejoins and answers explicit negatives, and
    recovery closes ledgers before entries it no longer holds."""


@pytest.mark.chaos(nemesis=["corrupt"], corruption="tail", nemesis_interval=2, time_limit=8)
def test_acknowledged_entries_survive_a_crash_that_loses_the_last_write() -> None:
    """A bookie whose entry log lost its last write answers EIO for what it lost, and the
    other replicas serve it: nothing acknowledged goes missing."""


@pytest.mark.chaos(
    nemesis=["corrupt"],
    corruption="tail",
    bugs=["corrupt-returns-noentry"],
    expect="invalid",
    anomalies=["lost-append", "truncated-ledger"],
    test_count=2,
    **detection_run(),
)
def test_a_bookie_that_says_no_entry_for_a_lost_write_is_caught() -> None:
    """A bookie that answers "no such entry" for an entry its entry log lost gives recovery
    an explicit negative, and recovery closes ledgers before acknowledged entries."""


@pytest.mark.chaos(
    nemesis=["power-loss"],
    bugs=["read-beyond-lac"],
    expect="invalid",
    anomalies=["dirty-read", "lac-beyond-end"],
    test_count=2,
    **detection_run(),
)
def test_tail_reads_past_the_lac_are_caught() -> None:
    """A reader that takes the newest stored entry for confirmed returns entries the closed
    ledger does not end up holding."""
