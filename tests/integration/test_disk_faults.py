"""The fault suite's disk faults: power loss, wiped disks and lost writes, with the bkchaos
pytest plugin.

A clean build must stay valid when a bookie loses what it had not fsynced or comes back
with an empty disk (its cookie then keeps it out), and each fault is proven to take effect
on real processes. The seeded bugs these faults expose are caught in the simulation, from
seeds that always give the same history (tests/sim/test_sim_faults.py); how often a real
run catches each is measured by `bkchaos bench detect` (docs/performance.md).
"""

from __future__ import annotations

import pytest


@pytest.mark.chaos(nemesis=["power-loss"], nemesis_interval=2, time_limit=8)
def test_acknowledged_entries_survive_power_loss() -> None:
    """A bookie acknowledges only what its journal fsynced, so a power cut loses none of it."""


@pytest.mark.chaos(nemesis=["wipe"], nemesis_interval=2, time_limit=8)
def test_a_wiped_bookie_is_kept_out_by_its_cookie() -> None:
    """A bookie whose disk came back empty refuses to start instead of answering "no such
    entry" for what it once held."""


@pytest.mark.chaos(nemesis=["corrupt"], corruption="tail", nemesis_interval=2, time_limit=8)
def test_acknowledged_entries_survive_a_crash_that_loses_the_last_write() -> None:
    """A bookie whose entry log lost its last write answers EIO for what it lost, and the
    other replicas serve it: nothing acknowledged goes missing."""
