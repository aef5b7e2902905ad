"""Trends across runs and nights, from the cached tables.

Every table is small (one row per run or per group), so each is written as one Parquet
file under `tables/` and also collected for the HTML pages. Dimensions: workload,
nemesis set, configuration (E/WQ/AQ digest), seeded-bug set and night. Fault windows
are computed as `checkers.perf.fault_windows` does: a fault window opens when a
non-healing nemesis op is invoked and closes when a healing one completes.
"""

from __future__ import annotations

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from checkers.perf import HEALING_OPS

DIMS = ["workload", "nemesis_set", "config", "bug_set"]
_NS = 1e9


def _set(col: str) -> F.Column:
    """An array column as a stable, readable group key ("none" when empty)."""
    return F.when(F.size(col) > 0, F.array_join(F.array_sort(col), ",")).otherwise("none")


def fault_windows(calls: DataFrame, runs: DataFrame) -> DataFrame:
    """run, start, end (ns): spans during which at least one fault may be in effect."""
    nemesis = calls.filter(F.col("process") == "nemesis")
    heal = F.col("f").isin(*HEALING_OPS) | F.col("f").startswith("stop-")
    before = Window.partitionBy("run").orderBy("key").rowsBetween(Window.unboundedPreceding, -1)
    segments = nemesis.select(
        "run",
        "inv_time",
        F.coalesce("done_time", "inv_time").alias("end"),
        heal.alias("heal"),
        F.coalesce(F.sum(heal.cast("int")).over(before), F.lit(0)).alias("segment"),
    )
    spans = segments.groupBy("run", "segment").agg(
        F.min(F.when(~F.col("heal"), F.col("inv_time"))).alias("start"),
        F.max(F.when(F.col("heal"), F.col("end"))).alias("end"),
    )
    return (
        spans.filter(F.col("start").isNotNull())
        .join(runs.select("run", "end_time"), "run")
        .select("run", "start", F.coalesce("end", "end_time").alias("end"))
    )


def run_summary(runs: DataFrame, anomalies: DataFrame, windows: DataFrame) -> DataFrame:
    """One row per analysed run: dimensions, what Spark and Python found, and the time
    from the start of the fault window before the first anomaly to that anomaly."""
    found = anomalies.groupBy("run").agg(
        F.array_sort(F.collect_set("anomaly")).alias("spark_types"),
        F.count("*").alias("cases"),
        F.min("time").alias("first_anomaly"),
    )
    faults = windows.groupBy("run").agg(
        F.count("*").alias("faults"), F.sum(F.col("end") - F.col("start")).alias("fault_ns")
    )
    s = (
        runs.filter(F.col("malformed").isNull())
        .join(found, "run", "left")
        .join(faults, "run", "left")
        .select(
            "run",
            "night",
            "test",
            "path",
            "workload",
            "config",
            "lines",
            "start_time",
            "end_time",
            "expected_valid",
            "expected_types",
            "first_anomaly",
            _set("nemesis").alias("nemesis_set"),
            _set("bugs").alias("bug_set"),
            F.coalesce("spark_types", F.array().cast("array<string>")).alias("spark_types"),
            F.coalesce("cases", F.lit(0)).alias("cases"),
            F.coalesce("faults", F.lit(0)).alias("faults"),
            F.coalesce("fault_ns", F.lit(0)).alias("fault_ns"),
        )
    )
    started = (
        s.join(windows, "run")
        .filter(F.col("start") <= F.col("first_anomaly"))
        .groupBy("run")
        .agg(F.max("start").alias("fault_start"))
    )
    detected = (F.size("spark_types") > 0) | (F.col("expected_valid") == "false")
    return s.join(started, "run", "left").select(
        "*",
        detected.alias("detected"),
        ((F.col("first_anomaly") - F.col("fault_start")) / _NS).alias("time_to_anomaly_s"),
    )


def anomalies_by(summary: DataFrame, anomalies: DataFrame) -> DataFrame:
    """Runs and cases per night, dimensions and anomaly type (runs: all runs of the group,
    so a rate is `runs_with / runs`)."""
    totals = summary.groupBy("night", *DIMS).agg(F.count("*").alias("runs"))
    per_type = (
        anomalies.join(summary.select("run", "night", *DIMS), ["run", "night"])
        .groupBy("night", *DIMS, "anomaly")
        .agg(F.countDistinct("run").alias("runs_with"), F.count("*").alias("cases"))
    )
    return totals.join(per_type, ["night", *DIMS], "left").orderBy("night", *DIMS, "anomaly")


def latency(calls: DataFrame, windows: DataFrame, summary: DataFrame) -> DataFrame:
    """Latency quantiles (ms) and ok throughput per workload, nemesis set, f, and inside
    ("fault") or outside ("calm") fault windows."""
    ok = calls.filter((F.col("process") != "nemesis") & (F.col("type") == "ok")).select(
        "run", "f", "inv_time", ((F.col("done_time") - F.col("inv_time")) / 1e6).alias("ms")
    )
    inside = F.broadcast(windows.withColumnRenamed("run", "w_run"))
    where = (
        ok.join(
            inside,
            (F.col("run") == F.col("w_run"))
            & F.col("inv_time").between(F.col("start"), F.col("end")),
            "left",
        )
        .select(
            "run",
            "f",
            "ms",
            F.when(F.col("start").isNull(), "calm").otherwise("fault").alias("window"),
        )
        .join(F.broadcast(summary.select("run", "workload", "nemesis_set")), "run")
    )
    q = F.percentile_approx("ms", [0.5, 0.95, 0.99], 1000)
    stats = where.groupBy("workload", "nemesis_set", "f", "window").agg(
        F.count("*").alias("count"),
        q[0].alias("p50_ms"),
        q[1].alias("p95_ms"),
        q[2].alias("p99_ms"),
        F.max("ms").alias("max_ms"),
    )
    seconds = (
        summary.select(
            "workload",
            "nemesis_set",
            F.explode(
                F.array(
                    F.struct(F.lit("fault").alias("window"), (F.col("fault_ns") / _NS).alias("s")),
                    F.struct(
                        F.lit("calm").alias("window"),
                        ((F.col("end_time") - F.col("start_time") - F.col("fault_ns")) / _NS).alias(
                            "s"
                        ),
                    ),
                )
            ).alias("w"),
        )
        .groupBy("workload", "nemesis_set", F.col("w.window").alias("window"))
        .agg(F.sum("w.s").alias("seconds"))
    )
    return (
        stats.join(seconds, ["workload", "nemesis_set", "window"])
        .select("*", F.round(F.col("count") / F.col("seconds"), 3).alias("ok_per_s"))
        .drop("seconds")
        .orderBy("workload", "nemesis_set", "f", "window")
    )


def detection(summary: DataFrame) -> DataFrame:
    """Per seeded-bug set: runs, runs with an anomaly, the detection rate, and the median
    time from fault start to first anomaly ("none" is the false-alarm rate)."""
    return (
        summary.groupBy("bug_set")
        .agg(
            F.count("*").alias("runs"),
            F.sum(F.col("detected").cast("int")).alias("detected"),
            F.percentile_approx("time_to_anomaly_s", 0.5).alias("median_time_to_anomaly_s"),
        )
        .select("*", F.round(F.col("detected") / F.col("runs"), 3).alias("rate"))
        .orderBy("bug_set")
    )
