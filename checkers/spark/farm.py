"""The simulation farm's rows (`bkchaos farm`, harness/farm.py): one per simulated test,
kept as Parquet under `STORE/farm/night=YYYY-MM-DD/`, read here for the trend pages.

What the farm adds to a night: how many tests ran and failed, and which protocol probes
they reached (a farm runs thousands of short tests, so it reaches what a night of real
runs seldom does, and says which probes even thousands of tests never reached).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ArrayType,
    DoubleType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
)

from checkers.spark import coverage
from checkers.spark.schema import frame

FARM_DIR = "farm"
"""The rows' directory inside the store (the store reserves the name)."""

ROWS = StructType(
    [
        StructField("farm", StringType(), False),  # the farm's start, YYYYmmddTHHMMSS
        StructField("test", LongType(), False),  # the test's number in its farm
        StructField("round", IntegerType(), False),
        StructField("spec", StringType(), False),  # the SimSpec as JSON: replays the test
        StructField("workload", StringType(), False),
        StructField("bugs", ArrayType(StringType()), False),
        StructField("seed", LongType(), False),
        StructField("verdict", StringType(), False),  # valid, invalid or unknown
        StructField("anomaly_types", ArrayType(StringType()), False),
        StructField("coverage", MapType(StringType(), LongType()), False),
        StructField("features", ArrayType(StringType()), False),  # what steers the corpus
        StructField("sim_s", DoubleType(), False),
        StructField("cpu_s", DoubleType(), False),
        StructField("history_sha256", StringType(), False),
        StructField("night", StringType(), False),  # the partition
    ]
)


def write_rows(spark: SparkSession, rows: list[dict[str, Any]], store: Path) -> Path:
    """Append `rows` to the store's farm table, partitioned by night; returns its path.
    (Thousands of rows: they travel as a parallelized collection, not as literals.)"""
    path = store / FARM_DIR
    if rows:
        table = spark.createDataFrame(rows, ROWS).coalesce(1)
        table.write.mode("append").partitionBy("night").parquet(str(path))
    return path


def read_rows(spark: SparkSession, store: Path) -> DataFrame:
    """Every farm row of `store` (an empty table before the first farm)."""
    path = store / FARM_DIR
    if any(path.glob("night=*/*.parquet")):
        return spark.read.schema(ROWS).parquet(str(path))
    return frame(spark, [], ROWS)


def by_night(rows: DataFrame) -> DataFrame:
    """Per night: farms, tests, invalid and unknown ones, the anomaly types found, the
    simulated and CPU time spent."""
    return (
        rows.groupBy("night")
        .agg(
            F.countDistinct("farm").alias("farms"),
            F.count("*").alias("tests"),
            F.sum(F.when(F.col("verdict") == "invalid", 1).otherwise(0)).alias("invalid"),
            F.sum(F.when(F.col("verdict") == "unknown", 1).otherwise(0)).alias("unknown"),
            F.array_sort(F.array_distinct(F.flatten(F.collect_list("anomaly_types")))).alias(
                "anomaly_types"
            ),
            F.round(F.sum("sim_s"), 1).alias("sim_s"),
            F.round(F.sum("cpu_s"), 1).alias("cpu_s"),
        )
        .orderBy("night")
    )


def probe_counts(rows: DataFrame) -> DataFrame:
    """One row per (run, night, probe, count), a farm test standing for a run: the shape
    `coverage.unreached` reads."""
    return rows.select(
        F.concat_ws("#", "farm", F.col("test").cast("string")).alias("run"),
        "night",
        F.explode("coverage").alias("probe", "count"),
    )


def probes_by_night(counts: DataFrame) -> DataFrame:
    """Per night and probe: the tests that reached it and how often it was reached."""
    return (
        counts.groupBy("night", "probe")
        .agg(
            F.sum(F.when(F.col("count") > 0, 1).otherwise(0)).alias("tests_reaching"),
            F.sum("count").alias("hits"),
        )
        .orderBy("night", "probe")
    )


def tables(spark: SparkSession, store: Path) -> dict[str, DataFrame]:
    """The farm's trend tables, by the name they are written under."""
    rows = read_rows(spark, store).cache()
    counts = probe_counts(rows)
    return {
        "farm_by_night": by_night(rows),
        "farm_probes": probes_by_night(counts),
        "farm_unreached": coverage.unreached(counts),
    }


def summary(collected: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """The farm's part of `analysis.json`."""
    nights = collected.get("farm_by_night") or []
    return {
        "tests": sum(r["tests"] for r in nights),
        "invalid": sum(r["invalid"] for r in nights),
        "nights": [r["night"] for r in nights],
        "unreached_probes": [r["probe"] for r in collected.get("farm_unreached") or []],
    }
