"""Protocol coverage over the nights: how many probes the runs reached, and which ones no
run reached lately.

Each run's `results.json` carries ``"coverage": {probe: count}`` listing every probe the
harness declares, 0 for those never reached (shared/spec/history.md §7), so the probes a
week never reached are those whose counts there add up to 0 — no list of probes is needed
here. Runs from before coverage was counted have none and are left out.
"""

from __future__ import annotations

import json
from datetime import date, timedelta
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, MapType, StringType, StructField, StructType

from checkers.spark.ingest import RunDir
from checkers.spark.schema import frame

RECENT_NIGHTS = 7
"""The window of `unreached`: this many nights, ending with the newest night analysed."""

COVERAGE = StructType(
    [
        StructField("run", StringType(), True),
        StructField("night", StringType(), True),
        StructField("coverage", MapType(StringType(), LongType()), True),
    ]
)


def cache_coverage(spark: SparkSession, runs: list[RunDir], cache: Path) -> int:
    """Append the coverage of the newly ingested `runs` that have one to the cache;
    returns how many had one."""
    rows = []
    for r in runs:
        try:
            coverage = json.loads((r.path / "results.json").read_text()).get("coverage")
        except (OSError, ValueError):
            continue  # the runs table reports the run as malformed
        if isinstance(coverage, dict):
            counts = {str(k): int(v) for k, v in coverage.items() if isinstance(v, int)}
            rows.append({"run": r.run, "night": r.night, "coverage": counts})
    if rows:
        frame(spark, rows, COVERAGE).write.mode("append").parquet(str(cache / "coverage"))
    return len(rows)


def probe_counts(spark: SparkSession, cache: Path) -> DataFrame:
    """One row per (run, night, probe, count) of every cached run with coverage."""
    path = cache / "coverage"
    table = spark.read.schema(COVERAGE).parquet(str(path)) if path.is_dir() else None
    if table is None:
        table = frame(spark, [], COVERAGE)
    return table.select("run", "night", F.explode("coverage").alias("probe", "count"))


def by_night(counts: DataFrame) -> DataFrame:
    """Per night: runs with coverage, probes declared, probes reached by some run."""
    return (
        counts.groupBy("night")
        .agg(
            F.countDistinct("run").alias("runs"),
            F.countDistinct("probe").alias("probes"),
            F.countDistinct(F.when(F.col("count") > 0, F.col("probe"))).alias("reached"),
        )
        .withColumn("reached_share", F.round(F.col("reached") / F.col("probes"), 3))
        .orderBy("night")
    )


def unreached(counts: DataFrame, nights: int = RECENT_NIGHTS) -> DataFrame:
    """The probes no run reached in the last `nights` nights (up to the newest night)."""
    newest = counts.agg(F.max("night")).first()
    if newest is None or newest[0] is None:
        return counts.select("probe").limit(0).withColumn("runs", F.lit(0).cast("long"))
    first = (date.fromisoformat(newest[0]) - timedelta(days=nights - 1)).isoformat()
    recent = counts.filter(F.col("night") >= first)
    return (
        recent.groupBy("probe")
        .agg(F.sum("count").alias("total"), F.countDistinct("run").alias("runs"))
        .filter(F.col("total") == 0)
        .select("probe", "runs", F.lit(first).alias("since"), F.lit(newest[0]).alias("until"))
        .orderBy("probe")
    )


def tables(spark: SparkSession, cache: Path) -> dict[str, DataFrame]:
    """The coverage trend tables, by the name they are written under."""
    counts = probe_counts(spark, cache).cache()
    return {"coverage_by_night": by_night(counts), "unreached": unreached(counts)}
