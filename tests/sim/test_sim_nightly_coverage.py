"""The sample nightly matrix reaches every must-reach protocol probe (docs/coverage.md).

Its targeted cells (`[cells.NAME]` in nightly.toml), each run once in the simulation with
seed 0 for 8 s instead of the night's 60, reach together every probe of
`harness.nightly.MUST_REACH`: a corner the matrix stops reaching (a cell edited, a fault
or a workload changed) fails here, deterministically. The whole matrix — every cell for its
run length, and the farm — is measured by `bkchaos nightly nightly.toml --runtime sim
--rounds 1` (docs/performance.md)."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import tomllib
from collections import Counter
from pathlib import Path

import pytest

from harness.nightly import MUST_REACH, load_matrix
from harness.runtime.sim import SimSpec, run_sim
from tests.helpers.cli import BKCHAOS
from tests.helpers.nightly import NIGHT, write_matrix

pytestmark = pytest.mark.sim

SAMPLE = Path(__file__).parents[2] / "nightly.toml"
SHORT_S = 8.0


def test_the_targeted_cells_reach_every_must_reach_probe(tmp_path: Path) -> None:
    targeted = set(tomllib.loads(SAMPLE.read_text())["cells"])
    matrix = load_matrix(SAMPLE, "sim")
    reached: Counter[str] = Counter()
    for cell in (c for c in matrix.cells if c.config in targeted):
        spec = dataclasses.replace(matrix.spec(cell, 0, str(tmp_path)), time_limit=SHORT_S)
        result = run_sim(SimSpec.of(spec), tmp_path / cell.config)
        assert result.results["valid"] is True, (cell.id, result.results["anomaly_types"])
        reached.update(p for p, n in result.results["coverage"].items() if n)
    assert [p for p in MUST_REACH if not reached[p]] == []


def test_a_simulated_night_reports_its_coverage(tmp_path: Path) -> None:
    """`bkchaos nightly --runtime sim --rounds 1`: every cell once, in the simulation, and
    the night's summary says which probes it reached and which must-reach ones it did not."""
    matrix = write_matrix(
        tmp_path,
        'budget = "10m"\nrun_length = 2\nnemeses = [["kill"]]\n[defaults]\nbookies = 3\n'
        '[cells.stalls]\nschedule = [{at = 0.3, on = "recovery-started", f = "pause", '
        'value = {nodes = ["@0"]}, hold = 0.5}]\ntakeovers = 0.5\n',
    )
    store = tmp_path / "store"
    done = subprocess.run(
        [
            *(*BKCHAOS, "nightly", str(matrix), "--runtime", "sim", "--rounds", "1"),
            *("--store", str(store), "--date", NIGHT.isoformat(), "--no-analyze"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    summary = json.loads((store / "nightly" / NIGHT.isoformat() / "summary.json").read_text())
    assert sorted(r["cell"] for r in summary["runs"]) == [  # one round: each cell once
        "ledger/kill/default/clean",
        "ledger/pause/stalls/clean",
    ]
    cov = summary["coverage"]
    summed = Counter[str]()
    for run in summary["runs"]:
        summed.update(run["coverage"])
    assert cov["runs"] == dict(sorted(summed.items())) and cov["runs"]["recovery-started"] > 0
    assert cov["reached"] == len(summed) and set(cov["unreached"]).isdisjoint(summed)
    assert f"protocol coverage: {cov['reached']} of {cov['probes']} probes" in done.stderr
