"""The project's own fault suite, written with the bkchaos pytest plugin.

Short real runs on the local runtime: a clean build must stay valid under bookie kills,
pauses and Hypothesis-drawn schedules of both, and each seeded bug these faults expose
must be caught within a few runs (`test_count`). `pytest tests/faults
--bkchaos-time-limit 120` runs the same suite longer; a failure prints the command that
replays it.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, Phase, given, settings

from harness.bench.detect import detection_run, exposing_run
from harness.pytest_plugin import Chaos
from nemesis.strategies import fault_schedules

pytestmark = pytest.mark.integration


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


@pytest.mark.chaos(
    nemesis=["kill"],
    nemesis_interval=2,
    time_limit=20,  # ~5 kills: 8 s (3 kills) missed the race once on a loaded CI machine
    bugs=["lac-before-ack-quorum"],
    expect="invalid",
    anomalies=["lost-append", "truncated-ledger", "lac-beyond-end"],
    test_count=2,  # a second run only if the first missed it
)
def test_an_add_acknowledged_by_a_single_bookie_is_caught() -> None:
    """Acknowledging on one copy loses entries once that bookie dies: the checkers see it."""


@pytest.mark.chaos(
    nemesis=["kill"],
    bugs=["recovery-unknown-as-negative"],
    expect="invalid",
    anomalies=["lost-append", "truncated-ledger"],
    test_count=2,  # with writer crashes one run catches it every time (docs/performance.md)
    **detection_run(),
)
def test_recovery_that_counts_unknown_answers_as_negatives_is_caught() -> None:
    """A killed bookie's refused read is no "no such entry": a recovery that counts it as
    one closes the ledger before entries a surviving bookie holds, and they are lost."""


@pytest.mark.chaos(
    bugs=["no-recovery-writeback"],
    expect="invalid",
    anomalies=["under-replicated"],
    **exposing_run("no-recovery-writeback"),
)
def test_a_recovery_that_does_not_write_back_what_it_recovered_is_caught() -> None:
    """An entry a fenced writer got to one bookie only is recovered from that copy; not
    written back, the closed ledger's last entry rests on one bookie, and the audit of the
    closed ledgers' copies finds it short of its ack quorum."""


@pytest.mark.chaos(**exposing_run("no-recovery-writeback"))
def test_every_entry_of_every_closed_ledger_keeps_its_ack_quorum_of_copies() -> None:
    """The clean twin: bookie kills and wipes, writer crashes and takeovers, and still
    every entry of every closed ledger is on AQ bookies of its write set."""


@pytest.mark.chaos(**exposing_run("metadata-blind-write"))
def test_racing_recoveries_under_bookie_kills_agree_on_where_each_ledger_ends() -> None:
    """Sixteen workers racing to recover writers' ledgers while a bookie dies every second:
    the closing compare-and-set makes every recovery settle on the first one's end."""


@pytest.mark.chaos(
    bugs=["metadata-blind-write"],
    expect="invalid",
    anomalies=["divergence", "lost-append", "truncated-ledger"],
    test_count=2,  # one 20-s run caught it in each of the runs measured (docs/performance.md)
    **exposing_run("metadata-blind-write"),
)
def test_recoveries_closing_a_ledger_without_compare_and_set_are_caught() -> None:
    """Racing recoveries of one ledger see different bookies when one dies between their
    reads; without the compare-and-set each closes the ledger at its own end."""


@pytest.mark.chaos(
    nemesis=["kill"],
    nemesis_interval=2,
    time_limit=8,
    id_bits=128,
    bugs=["scope-id-ignored"],
    expect="invalid",
    anomalies=["divergence", "lost-append"],
)
def test_ledgers_of_different_scopes_sharing_an_id_are_caught() -> None:
    """128-bit ledgers of several scopes reuse low ids; a client that drops the scope makes
    them share storage on the bookies, which the checkers see at once."""


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
