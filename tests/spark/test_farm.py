"""The simulation farm on Spark: rows from executors replay locally byte for byte, land as
Parquet that the analysis reads, and the package reaches separate executor JVMs as a
wheel."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from checkers.spark.farm import read_rows, tables, write_rows
from harness.cli.search import no_hint_space
from harness.farm import SparkRunner, farm_row, run_farm, spec_from_json
from harness.runtime.sim import run_sim

TEST_FIELDS = ("farm", "night", "test", "round", "spec")


def test_a_farm_row_replays_locally_to_the_same_history_bytes(spark: Any, tmp_path: Path) -> None:
    space = no_hint_space("ledger", "kill,wipe,partition", (), max_time=1.0)
    made: list[dict[str, Any]] = []
    run_farm(
        space,
        SparkRunner(spark.sparkContext, batch_size=2),
        round_size=4,
        budget_s=600.0,
        max_tests=4,
        seed=1,
        farm="20261127T010000",
        night="2026-11-27",
        on_round=lambda _number, rows, _outcome: made.extend(rows),
    )
    store = tmp_path / "store"
    write_rows(spark, made, store)
    rows = sorted(
        (r.asDict(recursive=True) for r in read_rows(spark, store).collect()),
        key=lambda r: r["test"],
    )
    assert [r["test"] for r in rows] == [0, 1, 2, 3]
    assert rows == made  # Parquet keeps every column
    wipes = [r for r in rows if '"f": "wipe"' in r["spec"]]
    assert wipes, "a wipe's proof names disks: the draw should hold one"
    for row in rows:  # each replays to its executor's bytes, in this process
        spec = spec_from_json(row["spec"])
        replayed = run_sim(spec, tmp_path / f"replay-{row['test']}")
        history = (tmp_path / f"replay-{row['test']}" / "history.jsonl").read_bytes()
        assert hashlib.sha256(history).hexdigest() == row["history_sha256"], spec
        assert replayed.results["anomaly_types"] == row["anomaly_types"]
    again = farm_row({k: row[k] for k in TEST_FIELDS})  # in this process, not an executor
    assert {**again, "cpu_s": None} == {**row, "cpu_s": None}
    nights = [r.asDict() for r in tables(spark, store)["farm_by_night"].collect()]
    assert [(n["night"], n["farms"], n["tests"]) for n in nights] == [("2026-11-27", 1, 4)]


@pytest.mark.timeout(900)  # a wheel build and three JVMs: minutes on a loaded machine
def test_farm_ships_its_wheel_to_executors_in_their_own_jvms(tmp_path: Path) -> None:
    """`local-cluster[2,1,1024]`: two executor JVMs with their own Python workers; the
    executors import bkchaos from the wheel the driver built and shipped."""
    store = tmp_path / "store"
    proc = subprocess.run(
        [
            str(Path(sys.executable).parent / "bkchaos"),
            "farm",
            *("--master", "local-cluster[2,1,1024]", "--ship", "wheel"),
            *("--tests", "4", "--batch-size", "2", "--max-time", "1", "--workload", "ledger"),
            *("--store", str(store), "--json"),
            *("--conf", "spark.ui.enabled=false", "--conf", "spark.driver.memory=768m"),
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"},
        timeout=840,
    )
    assert proc.returncode in (0, 1), proc.stderr[-3000:]
    summary = json.loads(proc.stdout)
    assert summary["tests"] == 4
    assert summary["shipped"].startswith("bkchaos-") and summary["shipped"].endswith(".whl")
    assert summary["executor_code"], "no executor answered"
    for path in summary["executor_code"]:
        assert f"{summary['shipped']}.zip/harness/__init__.py" in path, path
    assert list((store / "farm").glob("night=*/*.parquet"))
