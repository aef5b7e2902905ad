"""`analyze`: ingest a store incrementally, recompute the relational anomalies in Spark,
check them against each run's results.json, and write the trend tables and pages.

Layout of the output directory (default `STORE/trends`): `index.html` (what
`bkchaos serve` links), `tables/<name>/` (Parquet, rewritten by every analysis),
`cache/{runs,calls,anomalies}/` (Parquet, appended per new run), `analysis.json`.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from checkers.spark import coverage, farm, html, trends
from checkers.spark.anomalies import RELATIONAL
from checkers.spark.ingest import cached_runs, discover, ingest
from checkers.spark.schema import ANOMALIES, CALLS, frame


class AnalysisError(ValueError):
    """The store or the environment cannot be analysed; the message says what to do."""


def session(master: str = "local[*]", conf: dict[str, str] | None = None) -> SparkSession:
    """A SparkSession for `master`; `conf` overrides the defaults (UTC, quiet console;
    in local modes, where the driver also runs the tasks, a 2g driver and 8 shuffle
    partitions)."""
    if not (shutil.which("java") or os.environ.get("JAVA_HOME")):
        raise AnalysisError("Spark needs Java 17: apt-get install openjdk-17-jre-headless")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    local = master.startswith("local")
    settings = {
        "spark.sql.session.timeZone": "UTC",
        "spark.ui.showConsoleProgress": "false",
        # coalesce shuffles to the advisory size, not to one partition per core: a run's
        # ops are small, and hundreds of tiny tasks cost more than they parallelise
        "spark.sql.adaptive.coalescePartitions.parallelismFirst": "false",
        **({"spark.driver.memory": "2g", "spark.sql.shuffle.partitions": "8"} if local else {}),
        **(conf or {}),
    }
    builder = SparkSession.builder.master(master).appName("bkchaos analyze")
    for key, value in settings.items():
        builder = builder.config(key, value)
    try:
        spark = builder.getOrCreate()
    except Exception as exc:  # py4j/JVM start-up errors have no common base class
        raise AnalysisError(f"cannot start Spark with master {master!r}: {exc}") from exc
    spark.sparkContext.setLogLevel("WARN")
    return spark


def require_store(store: Path) -> None:
    """Refuse a store that is not a directory, saying what to pass."""
    if not store.is_dir():
        raise AnalysisError(f"{store} is not a directory: pass the store `bkchaos test` wrote")


def analyze(spark: SparkSession, store: Path, out: Path | None = None) -> dict[str, Any]:
    """Analyse every finished run of `store`; returns the report (see `analysis.json`).

    `disagreements` lists the runs where Spark's relational anomaly types differ from
    those in results.json (restricted to RELATIONAL): the caller exits 1 if any.
    """
    require_store(store)
    out = out or store / "trends"
    cache = out / "cache"
    started = time.perf_counter()
    runs, pending = discover(store)
    known = {r.run for r in cached_runs(spark, cache).select("run").collect()}
    new = [r for r in runs if r.run not in known]
    rows = ingest(spark, new, cache)
    coverage.cache_coverage(spark, new, cache)
    ingested = time.perf_counter()
    report = _report(spark, store, cache, out)
    report.update(
        store=str(store),
        out=str(out),
        new_runs=len(new),
        ops_ingested=sum(r["lines"] for r in rows),
        pending=pending,
        truncated_tails=[r.run for r in new if r.tail is not None],
        seconds={
            "ingest": round(ingested - started, 2),
            "analyse": round(time.perf_counter() - ingested, 2),
        },
    )
    (out / "analysis.json").write_text(json.dumps(report, indent=2) + "\n")
    return report


def _report(spark: SparkSession, store: Path, cache: Path, out: Path) -> dict[str, Any]:
    """Agreement over every cached run, then the trend tables (the farm's rows too) and
    pages."""
    runs = cached_runs(spark, cache)
    calls = _table(spark, cache / "calls", CALLS)
    anomalies = _table(spark, cache / "anomalies", ANOMALIES)
    windows = trends.fault_windows(calls, runs).cache()
    summary = trends.run_summary(runs, anomalies, windows).cache()
    tables = {
        "runs": summary,
        "anomalies_by": trends.anomalies_by(summary, anomalies),
        "latency": trends.latency(calls, windows, summary),
        "detection": trends.detection(summary),
        **coverage.tables(spark, cache),
        **farm.tables(spark, store),
    }
    collected = {}
    for name, df in tables.items():
        df.coalesce(1).write.mode("overwrite").parquet(str(out / "tables" / name))
        collected[name] = [
            r.asDict(recursive=True)
            for r in spark.read.parquet(str(out / "tables" / name)).collect()
        ]
    disagreements = []
    for r in collected["runs"]:
        python = sorted(RELATIONAL.intersection(r["expected_types"] or []))
        if python != r["spark_types"]:
            disagreements.append({"run": r["run"], "spark": r["spark_types"], "python": python})
    malformed = [
        {"run": r["run"], "reason": r["malformed"]}
        for r in runs.filter(F.col("malformed").isNotNull()).orderBy("run").collect()
    ]
    report = {
        "runs": len(collected["runs"]),
        "ops": sum(r["lines"] for r in collected["runs"]),
        "agreeing_runs": len(collected["runs"]) - len(disagreements),
        "disagreements": sorted(disagreements, key=lambda d: d["run"]),
        "malformed": malformed,
        "relational_types": sorted(RELATIONAL),
        "trends": str(out / "index.html"),
        "coverage_by_night": collected["coverage_by_night"],
        "unreached_probes": [r["probe"] for r in collected["unreached"]],
        "farm": farm.summary(collected),
    }
    html.write_pages(out, report, collected)
    summary.unpersist()
    windows.unpersist()
    return report


def _table(spark: SparkSession, path: Path, schema: Any) -> Any:
    """A cached table, or an empty one before the first ingest of good runs."""
    if path.is_dir():
        return spark.read.schema(schema).parquet(str(path))
    return frame(spark, [], schema)
