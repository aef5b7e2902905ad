"""`bkchaos test` outside a terminal (CI, systemd, `| tee`): plain timestamped progress
lines on stderr, the controller's own log in the run's `bkchaos.log`, `-q` for the verdict
alone, and `store/current` pointing at the run while it goes. On the sim runtime, which
reports progress too: no servers, so this runs in the sim tier."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from harness.controller import RunCounters
from harness.runner import run_test
from harness.testspec import TestSpec
from tests.helpers.cli import BKCHAOS

SIM = ["test", "--runtime", "sim", "--time-limit", "5", "--nemesis", "kill", "--seed", "3"]
SIM += ["--nemesis-interval", "1"]  # a kill within the 5 s
LINE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ \S.* ops \d+  ok \d+  fail \d+  info \d+  ")


def test_plain_progress_lines_and_a_run_log(tmp_path: Path) -> None:
    done = subprocess.run(
        [*BKCHAOS, *SIM, "--store", str(tmp_path)], capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr
    lines = [line for line in done.stderr.splitlines() if LINE.match(line)]
    phases = [line.split()[1:3] for line in lines]  # a phase change is always shown
    assert ["final", "reads"] in phases and phases[-1] == ["progress", "check"], done.stderr
    run_log = (tmp_path / "latest" / "bkchaos.log").read_text()
    assert "bkchaos.controller: fault kill" in run_log and "verdict True" in run_log
    assert not (tmp_path / "current").exists()  # gone once the run is over
    quiet = subprocess.run(
        [*BKCHAOS, "-q", *SIM, "--store", str(tmp_path)], capture_output=True, text=True
    )
    assert quiet.returncode == 0 and not any(LINE.match(x) for x in quiet.stderr.splitlines())
    assert "VALID" in quiet.stderr


def test_current_points_at_the_run_while_it_goes(tmp_path: Path) -> None:
    seen: set[Path] = set()

    def look(counters: RunCounters, elapsed: float) -> None:
        seen.add((tmp_path / "current").resolve())

    spec = TestSpec(name="t", runtime="sim", time_limit=5, store=str(tmp_path), seed=1)
    run_dir, _ = run_test(spec, look)
    assert seen == {run_dir.resolve()}
    assert not (tmp_path / "current").exists()


def test_quiet_silences_the_search_progress(tmp_path: Path) -> None:
    """`bkchaos search` prints a line per simulated test on stderr; with -q, none: only
    its outcome, on stdout."""
    search = ["search", "--budget", "60s", "--max-examples", "3", "--store", str(tmp_path)]
    loud = subprocess.run([*BKCHAOS, *search], capture_output=True, text=True, timeout=600)
    assert loud.returncode == 0 and "test    1:" in loud.stderr, loud.stderr
    quiet = subprocess.run([*BKCHAOS, "-q", *search], capture_output=True, text=True, timeout=600)
    assert quiet.returncode == 0 and quiet.stderr == "", quiet.stderr
    assert quiet.stdout.strip(), "the outcome is still printed"
