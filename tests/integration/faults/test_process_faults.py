"""The project's own fault suite, written with the bkchaos pytest plugin.

Short real runs on the local runtime: a clean build must stay valid under bookie kills,
pauses and Hypothesis-drawn schedules of both, each fault proven to take effect. The
seeded bugs these faults expose are caught in the simulation, from seeds that always give
the same history (tests/sim/test_sim_faults.py); how often a real run catches each is
measured by `bkchaos bench detect` (docs/performance.md). `pytest tests/integration/faults
--bkchaos-time-limit 120` runs the same suite longer; a failure prints the command that
replays it.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, Phase, given, settings

from harness.bench.detect import exposing_run
from harness.pytest_plugin import Chaos
from nemesis.strategies import fault_schedules


@pytest.mark.chaos(nemesis=["kill"], nemesis_interval=2, time_limit=8)
def test_acknowledged_entries_survive_bookie_kills() -> None:
    """SIGKILLed bookies come back with every entry they acknowledged (journal fsync)."""


@pytest.mark.chaos(nemesis=["pause"], nemesis_interval=2, time_limit=8)
def test_acknowledged_entries_survive_bookie_pauses() -> None:
    """A stopped bookie stalls adds and reads but never loses or invents an entry."""


@pytest.mark.chaos(
    nemesis=["kill"], nemesis_interval=2, time_limit=8, bookies=4, guaranteed_write_quorum=True
)
def test_guaranteed_write_quorum_survives_bookie_kills() -> None:
    """Writers that replace every bookie missing a confirmed entry stay correct under kills."""


@pytest.mark.chaos(**exposing_run("no-recovery-writeback"))
def test_every_entry_of_every_closed_ledger_keeps_its_ack_quorum_of_copies() -> None:
    """The clean twin: bookie kills and wipes, writer crashes and takeovers, and still
    every entry of every closed ledger is on AQ bookies of its write set."""


@pytest.mark.chaos(**exposing_run("metadata-blind-write"))
def test_racing_recoveries_under_bookie_kills_agree_on_where_each_ledger_ends() -> None:
    """Sixteen workers racing to recover writers' ledgers while a bookie dies every second:
    the closing compare-and-set makes every recovery settle on the first one's end."""


@settings(
    max_examples=2,
    deadline=None,
    phases=[Phase.explicit, Phase.reuse, Phase.generate],  # no shrinking of real runs
    suppress_health_check=[HealthCheck.function_scoped_fixture],  # runs share nothing
)
@given(schedule=fault_schedules(kinds=("kill", "pause"), time_limit=6, max_faults=3))
def test_drawn_fault_schedules_keep_a_clean_build_valid(
    chaos: Chaos, schedule: tuple[dict, ...]
) -> None:
    run = chaos(schedule=schedule, time_limit=6)
    assert run.valid is True, run.summary()
