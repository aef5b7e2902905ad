"""Faults triggered by probes on the local runtime: the controller follows the probe
lines of real bookie and agent processes and fires the armed steps on them."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from harness.runtime.probe_tail import LATE_S
from tests.helpers.cli import BKCHAOS
from tests.helpers.runs import KILL_AND_PAUSE_ON_RECOVERIES, assert_fired_on_the_named_bookies


def test_a_kill_and_a_pause_fire_on_recovery_started_on_the_bookie_it_names(
    tmp_path: Path,
) -> None:
    """Writers crash and ledgers are taken over often, so recoveries start every few
    tenths of a second; each step fires on one (tests/helpers/runs.py says what that
    means)."""
    store, schedule = tmp_path / "store", tmp_path / "schedule.json"
    schedule.write_text(json.dumps(KILL_AND_PAUSE_ON_RECOVERIES))
    args = ["--schedule", str(schedule), "--time-limit", "6", "--seed", "3"]
    crashes = ["--writer-crashes", "0.1", "--takeovers", "0.1", "--bookies", "3"]
    done = subprocess.run(
        [*BKCHAOS, "test", "--runtime", "local", "--store", str(store), *args, *crashes],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert_fired_on_the_named_bookies((store / "latest").resolve(), LATE_S)
