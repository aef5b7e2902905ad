"""The simulated bookies' checkpoint interval: what a restart early in a short run finds."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.runtime.sim import SimSpec, run_sim

pytestmark = pytest.mark.sim

EARLY_RESTART = (
    {"at": 0.4, "f": "kill", "value": {"nodes": ["b1"]}},
    {"at": 0.6, "f": "restart", "value": {"nodes": ["b1"]}},
)


@pytest.mark.parametrize(("interval", "reloaded"), [(1.0, False), (0.1, True)])
def test_a_restart_early_in_a_run_reloads_the_index_only_with_frequent_checkpoints(
    interval: float, reloaded: bool, tmp_path: Path
) -> None:
    """With the bookie's one-second checkpoints a restart 0.4 s into the workload finds its
    entries in the journal alone; with a tenth of a second most are in the index, and the
    restart rebuilds from it and replays the rest. Either way the history stays valid."""
    spec = SimSpec(seed=1, time_limit=1.5, schedule=EARLY_RESTART, checkpoint_interval=interval)
    results = run_sim(spec, tmp_path).results
    assert results["valid"] is True, results["anomaly_types"]
    assert results["coverage"]["journal-replay-intact"] > 0
    assert (results["coverage"]["bookie-index-reloaded"] > 0) is reloaded
