"""The Spark pipeline against the Python checker: agreement on the checker's corpus, on
hand-built edge cases and on real runs; malformed runs skipped; incremental ingest;
trend tables and pages; the CLI on a Spark master with separate executor JVMs."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from checkers import check
from tests.helpers.corpus import edge_cases, write_run

# Spark start-up and its first jobs are slow on a busy 2-core machine: one budget for
# the shared fixtures and the tests that use them
pytestmark = pytest.mark.timeout(900)


def spark_types(spark: Any, store: Path) -> dict[str, list[str]]:
    """Run -> the anomaly types Spark found, from the cache."""
    rows = spark.read.parquet(str(store / "trends" / "tables" / "runs")).collect()
    return {r["run"]: r["spark_types"] for r in rows}


def test_spark_agrees_with_the_python_checker_on_every_run(analysed, corpus) -> None:
    assert analysed["disagreements"] == []
    expected = len(corpus["mutated"]) + len(edge_cases()) + len(corpus["real"]) + 1  # soak
    assert analysed["runs"] >= expected
    assert analysed["agreeing_runs"] == analysed["runs"]


def test_spark_agrees_ledger_by_ledger_with_the_streaming_checker_on_a_soak(
    spark, analysed, corpus
) -> None:
    """The soak run, checked by the streaming checker in segments: Spark, which
    partitions every relational finder by run and ledger, finds the same anomaly types
    on the same ledgers."""
    from checkers.spark import RELATIONAL

    run_dir = corpus["store"] / corpus["soak"]
    result = json.loads((run_dir / "results.json").read_text())
    python = {
        (name, str(c["ledger"]))
        for name, cases in result["anomalies"].items()
        if name in RELATIONAL
        for c in cases
    }
    assert len({name for name, _ in python}) >= 3, "vacuity guard: the soak has anomalies"
    rows = spark.read.parquet(str(corpus["store"] / "trends" / "cache" / "anomalies"))
    found = {
        (r["anomaly"], r["ledger"])
        for r in rows.filter(rows.run == corpus["soak"]).select("anomaly", "ledger").collect()
    }
    assert found == python


def test_each_relational_mutation_is_found_in_its_run(spark, analysed, corpus) -> None:
    from checkers.spark import RELATIONAL

    found = spark_types(spark, corpus["store"])
    checked = {name for run, name in corpus["mutated"].items() if name in RELATIONAL}
    assert checked == RELATIONAL, "vacuity guard: every relational mutation is in the corpus"
    for run, name in corpus["mutated"].items():
        if name in RELATIONAL:
            assert name in found[run], (run, found[run])


def test_ledger_ids_info_fail_and_unchecked_ledgers(spark, analysed, corpus) -> None:
    found = spark_types(spark, corpus["store"])
    assert found["edge-same-text-ledgers/20261102T000000"] == ["duplicate"]
    for name in ("int-and-string-ledgers", "info-fail-pending", "unchecked-ledger"):
        assert found[f"edge-{name}/20261102T000000"] == [], name


def test_real_runs_agree(spark, analysed, corpus) -> None:
    found = spark_types(spark, corpus["store"])
    assert set(corpus["real"]) <= set(found)
    assert any("lost-append" in found[run] for run in corpus["real"]), "the seeded-bug run"
    assert not {d["run"] for d in analysed["disagreements"]} & set(corpus["real"])


def test_a_malformed_run_is_reported_and_skipped(spark, analysed, corpus) -> None:
    (bad,) = analysed["malformed"]
    assert bad["run"] == corpus["broken"]
    assert "not an op: this line is not JSON" in bad["reason"]
    assert corpus["broken"] not in spark_types(spark, corpus["store"])


def test_trend_tables_and_pages(spark, analysed, corpus) -> None:
    out = corpus["store"] / "trends"
    page = (out / "index.html").read_text()
    assert "agrees with the Python checker on every run" in page
    assert corpus["broken"] in page
    detection = {
        r["bug_set"]: r for r in spark.read.parquet(str(out / "tables/detection")).collect()
    }
    assert detection["lost-append"]["rate"] == 1.0
    latency = spark.read.parquet(str(out / "tables/latency"))
    assert {r["window"] for r in latency.select("window").collect()} == {"calm", "fault"}
    assert spark.read.parquet(str(out / "tables/anomalies_by")).count() > 0


def test_a_second_analysis_reads_only_new_runs(spark, analysed, corpus) -> None:
    """Last in this module: it adds a run to the shared store."""
    from checkers.spark import analyze

    store = corpus["store"]
    old = next((store / "trends/cache/calls").glob("night=*/run=corpus*"))
    before = sorted(p.stat().st_mtime_ns for p in old.iterdir())
    ops = edge_cases()["same-text-ledgers"]
    write_run(store, "late/20261104T000000", ops)
    again = analyze(spark, store)
    assert (again["new_runs"], again["ops_ingested"]) == (1, len(ops))
    assert again["runs"] == analysed["runs"] + 1
    assert again["disagreements"] == []
    assert sorted(p.stat().st_mtime_ns for p in old.iterdir()) == before
    assert again["malformed"] == analysed["malformed"]  # reported again, not re-read


def test_cli_on_separate_executor_jvms_names_a_disagreeing_run(tmp_path: Path) -> None:
    """`local-cluster[2,1,1024]`: two executor JVMs beside the driver, as on a cluster.
    A results.json that claims an anomaly the history does not hold is a disagreement."""
    store = tmp_path / "store"
    cases = edge_cases()
    write_run(store, "edge/20261105T000000", cases["same-text-ledgers"])
    liar = write_run(store, "liar/20261105T000000", cases["int-and-string-ledgers"])
    result = check(liar / "history.jsonl")
    result["anomaly_types"] = ["lost-append"]
    (liar / "results.json").write_text(json.dumps(result))
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"}
    proc = subprocess.run(
        [
            str(Path(sys.executable).parent / "bkchaos"),
            "analyze",
            str(store),
            "--json",
            "--master",
            "local-cluster[2,1,1024]",
            "--conf",
            "spark.ui.enabled=false",
            "--conf",
            "spark.driver.memory=768m",
            "--conf",
            "spark.sql.shuffle.partitions=2",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=400,
    )
    assert proc.returncode == 1, proc.stderr[-3000:]
    report = json.loads(proc.stdout)
    assert report["disagreements"] == [
        {"run": "liar/20261105T000000", "spark": [], "python": ["lost-append"]}
    ]
    assert report["runs"] == 2


def test_cli_bad_store_is_exit_254(tmp_path: Path) -> None:
    bkchaos = shutil.which("bkchaos", path=str(Path(sys.executable).parent))
    proc = subprocess.run(
        [bkchaos, "analyze", str(tmp_path / "nope")], capture_output=True, text=True
    )
    assert proc.returncode == 254
    assert "is not a directory" in proc.stderr
