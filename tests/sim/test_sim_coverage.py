"""Coverage in the simulation: a run with faults reaches the protocol corners it should,
counted in-process, and results.json lists every declared probe (0 when never reached)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bookie_image.probes import PROBES
from harness.cli import main
from harness.report.render import write_report
from harness.runtime.sim import SimSpec, run_sim
from tests.sim.test_sim import FAULTS

pytestmark = pytest.mark.sim


def _coverage(tmp_path: Path, workload: str) -> dict[str, int]:
    spec = SimSpec(seed=7, time_limit=3.0, schedule=FAULTS, workload=workload, bookies=4)
    result = run_sim(spec, tmp_path)
    assert result.results["valid"] is True, result.results.get("anomaly_types")
    stored = json.loads((tmp_path / "results.json").read_text())["coverage"]
    assert stored == result.results["coverage"]
    assert list(stored) == sorted(PROBES)  # every probe, reached or not
    return stored


def test_a_faulty_ledger_run_reaches_fencing_recovery_and_ensemble_changes(
    tmp_path: Path,
) -> None:
    cov = _coverage(tmp_path, "ledger")
    for probe in (
        "recovery-started",
        "bookie-fenced",
        "recovery-fence-exact",
        "recovery-read-negative",
        "recovery-negative-threshold",
        "recovery-writeback",
        "bookie-recovery-add-on-fenced",
        "recovery-closed",
        "ensemble-change",
        "ensemble-change-adds-pending",
        "journal-replay-intact",
        "bookie-read-after-restart",
        "bookie-corrupt-entry-read",
        # the simulation's small files (harness/sim/cluster.py): b1's corrupt-restart and
        # b3's restart at the heal replay from checkpoints inside earlier journal files
        "journal-rolled",
        "journal-replay-crossed-files",
        "entrylog-rolled",
    ):
        assert cov[probe] > 0, probe
    # Bounded ledgers never carry a term: the unbounded corners stay at zero.
    assert cov["unbounded-takeover"] == cov["unbounded-term-raised"] == 0


def test_a_faulty_unbounded_run_reaches_takeovers_terms_and_truncation(tmp_path: Path) -> None:
    cov = _coverage(tmp_path, "unbounded")
    for probe in (
        "unbounded-takeover-started",
        "unbounded-takeover",
        "unbounded-term-raised",
        "unbounded-stale-term-add",
        "unbounded-truncate-applied",
        "unbounded-truncating-noop",
    ):
        assert cov[probe] > 0, probe
    assert cov["bookie-fenced"] == 0  # terms fence unbounded ledgers, never the fence bit


def test_the_report_shows_the_probes_reached_and_those_never_reached(tmp_path: Path) -> None:
    cov = _coverage(tmp_path, "ledger")
    html = write_report(tmp_path).read_text()
    section = html[html.index('id="coverage"') : html.index('id="logs"')]
    reached = [name for name, count in cov.items() if count]
    assert f"{len(reached)} of {len(PROBES)} protocol probes reached" in section
    never = section[section.index("Never reached") :]
    assert "unbounded-takeover-started" in never and "recovery-started" not in never
    assert f"{cov['recovery-started']}×" in section[: section.index("Never reached")]


def test_concurrent_takeovers_of_one_stream_race_for_the_term(tmp_path: Path) -> None:
    """The takeover-race workload: takeovers of the same unbounded ledger overlap, one
    loses to a newer term, and the build stays valid."""
    spec = SimSpec(seed=0, time_limit=3.0, workload="takeover-race", bookies=5)
    result = run_sim(spec, tmp_path)
    assert result.results["valid"] is True, result.results["anomaly_types"]
    cov = result.results["coverage"]
    assert cov["unbounded-takeover-lost"] > 0 and cov["metadata-cas-conflict"] > 0
    assert cov["unbounded-takeover"] > 1 and cov["unbounded-stale-term-add"] > 0


def test_checking_a_run_again_keeps_its_coverage(tmp_path: Path) -> None:
    """`bkchaos check RUN_DIR` rewrites results.json from the history, which does not hold
    the coverage: it is kept, not lost."""
    cov = _coverage(tmp_path, "ledger")
    with pytest.raises(SystemExit) as exited:
        main(["check", str(tmp_path)])
    assert exited.value.code == 0
    assert json.loads((tmp_path / "results.json").read_text())["coverage"] == cov
