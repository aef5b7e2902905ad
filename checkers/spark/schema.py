"""Explicit schemas of everything the pipeline reads and caches.

Nothing is inferred: a history line is parsed against `LINE`, so a mistyped field makes
the line malformed instead of silently changing a column's type across runs. Ledger ids
are kept as text plus a kind (`int` or `str`), because spec §2 compares them as-is and a
BP-35 string id "7" is not the 64-bit id 7.
"""

from __future__ import annotations

import json
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    DoubleType,
    LongType,
    StringType,
    StructField,
    StructType,
)


def _struct(*fields: tuple[str, object]) -> StructType:
    return StructType([StructField(name, kind, True) for name, kind in fields])


# One history line (spec §1-2). Values are read as the union of the client ops' fields;
# entries are [entry, payload] pairs, read as text and cast, as JSON arrays are untyped.
LINE = _struct(
    ("index", LongType()),
    ("time", LongType()),
    ("type", StringType()),
    ("process", StringType()),  # an int's text, or "nemesis"
    ("f", StringType()),
    (
        "value",
        _struct(
            ("ledger", StringType()),
            ("payload", StringType()),
            ("mode", StringType()),
            ("lac", LongType()),
            ("entry", LongType()),
            ("entries", ArrayType(ArrayType(StringType()))),
        ),
    ),
    ("error", StringType()),
)

ENTRY = _struct(("e", LongType()), ("p", StringType()))

# One invocation with its completion (done_* null: never completed, so `info`).
# `key` orders calls as the Python checker does: by completion, unfinished ones last.
CALLS = _struct(
    ("run", StringType()),
    ("process", StringType()),
    ("f", StringType()),
    ("type", StringType()),
    ("inv_index", LongType()),
    ("inv_time", LongType()),
    ("done_index", LongType()),
    ("done_time", LongType()),
    ("key", LongType()),
    ("ledger", StringType()),
    ("ledger_kind", StringType()),
    ("payload", StringType()),
    ("entry", LongType()),
    ("mode", StringType()),
    ("lac", LongType()),
    ("entries", ArrayType(ENTRY)),
    ("error", StringType()),
    ("night", StringType()),
)

# One anomaly case found by Spark; `time` is when the earliest op involved was invoked.
ANOMALIES = _struct(
    ("run", StringType()),
    ("anomaly", StringType()),
    ("ledger", StringType()),
    ("ledger_kind", StringType()),
    ("entry", LongType()),
    ("payload", StringType()),
    ("time", LongType()),
    ("night", StringType()),
)

# What the driver knows of a run before Spark reads it: its night, a truncated last line.
META = _struct(("run", StringType()), ("night", StringType()), ("tail", StringType()))

# One run of the store: its test.json, what its results.json said, and ingest facts.
RUNS = _struct(
    ("run", StringType()),
    ("test", StringType()),
    ("night", StringType()),
    ("path", StringType()),
    ("workload", StringType()),
    ("nemesis", ArrayType(StringType())),
    ("bugs", ArrayType(StringType())),
    ("seed", LongType()),
    ("config", StringType()),
    ("time_limit", DoubleType()),
    ("lines", LongType()),
    ("start_time", LongType()),
    ("end_time", LongType()),
    ("expected_valid", StringType()),
    ("expected_types", ArrayType(StringType())),
    ("malformed", StringType()),
    ("truncated_tail", BooleanType()),
    ("ingested_at", StringType()),
)


def frame(spark: SparkSession, rows: list[dict[str, Any]], schema: StructType) -> DataFrame:
    """A small DataFrame of driver-side rows, built in the JVM from JSON literals:
    `createDataFrame` would start Python workers, slow to spawn on a busy machine."""
    texts = F.array(*(F.lit(json.dumps(row)) for row in rows)).cast("array<string>")
    lines = spark.range(1).select(F.explode(texts).alias("line"))
    return lines.select(F.from_json("line", schema).alias("row")).select("row.*")
