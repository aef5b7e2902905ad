"""`bkchaos nightly`: a short real night end to end producing its summary page (the matrix
file, planning and comparison alone: tests/unit/test_nightly_matrix.py)."""

from __future__ import annotations

import datetime as dt
import json
import subprocess
from pathlib import Path

from tests.helpers.cli import BKCHAOS
from tests.helpers.nightly import NIGHT, write_matrix

MATRIX = """
budget = "60s"
run_length = 4
workloads = ["ledger"]
nemeses = [["kill"]]
bugs = [[], ["lac-before-ack-quorum"]]

[defaults]
bookies = 3
nemesis_interval = 1.5

[configs.e3-wq2-aq2]
ensemble = 3
write_quorum = 2
ack_quorum = 2

[configs.e3-wq3-aq2]
ensemble = 3
write_quorum = 3
ack_quorum = 2
"""


def test_a_short_night_runs_end_to_end_and_writes_its_summary(tmp_path: Path) -> None:
    store = tmp_path / "store"
    last_night = store / "nightly" / (NIGHT - dt.timedelta(days=1)).isoformat()
    last_night.mkdir(parents=True)
    old = "ledger/kill/e3-wq2-aq2/clean: lost-append"
    (last_night / "summary.json").write_text(json.dumps({"date": "x", "signatures": [old]}))
    done = subprocess.run(
        [
            *BKCHAOS,
            "nightly",
            str(write_matrix(tmp_path, MATRIX)),
            "--store",
            str(store),
            "--date",
            NIGHT.isoformat(),
            "--no-analyze",  # Spark's start-up would dwarf this short night
        ],
        capture_output=True,
        text=True,
        timeout=240,
    )
    night_dir = store / "nightly" / NIGHT.isoformat()
    assert done.returncode == 0, done.stdout + done.stderr
    summary = json.loads((night_dir / "summary.json").read_text())
    runs = summary["runs"]
    assert len(runs) >= 2 and summary["elapsed_s"] <= 60 + 15  # within budget, give or take
    assert {r["verdict"] for r in runs if r["clean"]} == {"valid"}
    assert summary["failures"] == [] and summary["exit_code"] == 0
    for run in runs:
        assert (store / run["run_dir"] / "results.json").exists()
        assert run["replay"].startswith("bkchaos test --name nightly-ledger")
    assert summary["analysis"] == {"status": "skipped"}
    if any(not r["clean"] for r in runs):
        assert set(summary["detection"]) == {"lac-before-ack-quorum"}
    if any(r["cell"] == "ledger/kill/e3-wq2-aq2/clean" for r in runs):
        assert summary["resolved"] == [old]
    page = (night_dir / "index.html").read_text()
    for heading in ("Failed tonight", "New since", "Seeded bug detection", "All runs"):
        assert heading in page
    assert (store / "nightly" / "latest").resolve() == night_dir.resolve()
    assert f"summary: {night_dir / 'index.html'}" in done.stderr
