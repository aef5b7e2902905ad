"""Ingest: a store's run directories into the Parquet cache (runs, calls, anomalies).

Only runs missing from the cache are read, so a nightly analysis costs what the night
added. A run counts as finished once it has `results.json` (the harness writes it after
the history); unfinished runs are listed as pending and picked up by a later analysis.
Each history is parsed once against the explicit `LINE` schema, paired (spec §1) with
window functions, validated, and the calls of its good runs are written partitioned by
night and run; rewriting a run's partition is idempotent, so an interrupted ingest is
simply redone. A malformed run is recorded with the reason and never analysed.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from checkers.spark.anomalies import find_anomalies
from checkers.spark.schema import CALLS, LINE, META, RUNS, frame

NEMESIS = "nemesis"
_STAMP = re.compile(r"(\d{4})(\d{2})(\d{2})T\d{6}")
_NEVER = 1 << 62  # key offset of calls never completed: after every completion (spec §1)
_JSON = {"allowSingleQuotes": "false", "allowNonNumericNumbers": "false"}
_STRING_LEDGER = r'"ledger"\s*:\s*"'  # the line gives the ledger as a JSON string


@dataclass(frozen=True, slots=True)
class RunDir:
    """A finished run directory as the driver sees it, before Spark reads its history."""

    run: str  # "<test>/<timestamp>", unique in the store
    path: Path
    night: str  # YYYY-MM-DD the run started
    spec: dict[str, Any]  # test.json ({} if absent)
    expected_valid: str | None  # results.json's valid: "true", "false" or "unknown"
    expected_types: list[str]
    problem: str | None  # why the run cannot be ingested at all
    tail: str | None  # a crash-truncated last line, dropped as the Python reader does

    @property
    def history(self) -> Path:
        return self.path / "history.jsonl"


def discover(store: Path) -> tuple[list[RunDir], list[str]]:
    """Finished runs of `store/<test>/<timestamp>/`, and the ids of unfinished ones.

    `latest` links are skipped: they point at runs listed under their own name.
    """
    runs: list[RunDir] = []
    pending: list[str] = []
    for test_dir in sorted(p for p in store.iterdir() if p.is_dir() and not p.is_symlink()):
        for run_dir in sorted(p for p in test_dir.iterdir() if not p.is_symlink()):
            if not (run_dir / "history.jsonl").is_file():
                continue
            run = f"{test_dir.name}/{run_dir.name}"
            if (run_dir / "results.json").is_file():
                runs.append(_run_dir(run, run_dir))
            else:
                pending.append(run)
    return runs, pending


def _run_dir(run: str, path: Path) -> RunDir:
    stamp = _STAMP.match(path.name)
    if stamp:
        night = "-".join(stamp.groups())
    else:
        mtime = (path / "history.jsonl").stat().st_mtime
        night = datetime.fromtimestamp(mtime, UTC).strftime("%Y-%m-%d")
    spec: dict[str, Any] = {}
    valid, types, problem = None, [], None
    try:
        if (path / "test.json").is_file():
            spec = json.loads((path / "test.json").read_text())
        result = json.loads((path / "results.json").read_text())
        valid = str(result["valid"]).lower()
        types = list(result["anomaly_types"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        problem = f"unreadable test.json or results.json: {exc!r}"
    return RunDir(run, path, night, spec, valid, types, problem, _truncated_tail(path))


def _truncated_tail(path: Path) -> str | None:
    """The last line if it lacks its newline and is not JSON (a crash mid-write)."""
    with open(path / "history.jsonl", "rb") as fh:
        end = fh.seek(0, 2)
        tail = b""
        while end > 0:
            start = max(0, end - 65536)
            fh.seek(start)
            tail = fh.read(end - start) + tail
            end = start
            if b"\n" in tail:
                break
    if not tail or tail.endswith(b"\n"):
        return None
    last = tail.rsplit(b"\n", 1)[-1]
    try:
        json.loads(last)
        return None
    except ValueError:
        return last.decode("utf-8", "replace")


def cached_runs(spark: SparkSession, cache: Path) -> DataFrame:
    """The runs table of the cache (empty if there is none yet)."""
    if (cache / "runs").is_dir():
        return spark.read.schema(RUNS).parquet(str(cache / "runs"))
    return frame(spark, [], RUNS)


def ingest(spark: SparkSession, runs: list[RunDir], cache: Path) -> list[dict[str, Any]]:
    """Read, validate and cache `runs`; returns their rows of the runs table."""
    readable = [r for r in runs if r.problem is None]
    stats: dict[str, dict[str, Any]] = {}
    if readable:
        rows = _paired(spark, readable).persist(StorageLevel.MEMORY_AND_DISK)
        try:
            stats = {s["run"]: s.asDict() for s in _run_stats(rows).collect()}
            bad = [r.run for r in readable if _problem(r, stats.get(r.run))]
            calls = rows.filter(F.col("type").isNotNull() & ~F.col("run").isin(bad))
            _write(calls.select(*CALLS.fieldNames()), cache / "calls")
            fresh = [r.run for r in readable if r.run not in bad]
            written = spark.read.schema(CALLS).parquet(str(cache / "calls"))
            _write(find_anomalies(written.filter(F.col("run").isin(fresh))), cache / "anomalies")
        finally:
            rows.unpersist()
    now = datetime.now(UTC).isoformat(timespec="seconds")
    table = [_runs_row(r, stats.get(r.run), _problem(r, stats.get(r.run)), now) for r in runs]
    if table:
        frame(spark, table, RUNS).write.mode("append").parquet(str(cache / "runs"))
    return table


def _write(df: DataFrame, path: Path) -> None:
    """Replace the partitions of the runs in `df` only (dynamic overwrite: idempotent)."""
    df.write.mode("overwrite").option("partitionOverwriteMode", "dynamic").partitionBy(
        "night", "run"
    ).parquet(str(path))


def _problem(r: RunDir, stats: dict[str, Any] | None) -> str | None:
    """Why a run is malformed, or None."""
    if r.problem:
        return r.problem
    if stats is None:
        if r.history.stat().st_size - len((r.tail or "").encode()) > 0:
            return "its history.jsonl could not be read"
        return None
    if stats["problems"]:
        return f"{stats['problems']} malformed op(s) in history.jsonl; first: {stats['first']}"
    return None


def _runs_row(
    r: RunDir, stats: dict[str, Any] | None, problem: str | None, now: str
) -> dict[str, Any]:
    spec = r.spec
    config = (
        f"E{spec.get('ensemble', '?')}/WQ{spec.get('write_quorum', '?')}/"
        f"AQ{spec.get('ack_quorum', '?')} {spec.get('digest', '?')}"
    )
    stats = stats or {}
    return {
        "run": r.run,
        "test": r.run.split("/")[0],
        "night": r.night,
        "path": str(r.path),
        "workload": str(spec.get("workload", "unknown")),
        "nemesis": sorted(map(str, spec.get("nemesis") or [])),
        "bugs": sorted(map(str, spec.get("bugs") or [])),
        "seed": spec.get("seed") if isinstance(spec.get("seed"), int) else None,
        "config": config,
        "time_limit": float(spec["time_limit"]) if "time_limit" in spec else None,
        "lines": stats.get("lines", 0),
        "start_time": stats.get("start_time"),
        "end_time": stats.get("end_time"),
        "expected_valid": r.expected_valid,
        "expected_types": r.expected_types,
        "malformed": problem,
        "truncated_tail": r.tail is not None,
        "ingested_at": now,
    }


def _paired(spark: SparkSession, runs: list[RunDir]) -> DataFrame:
    """One row per call (an invoke with its completion) plus one per malformed line or
    unpaired completion; `problem` says what is wrong, `type` is null on problem rows."""
    meta = frame(spark, [{"run": r.run, "night": r.night, "tail": r.tail} for r in runs], META)
    path = F.regexp_extract(F.input_file_name(), r"([^/]+/[^/]+)/history[.]jsonl$", 1)
    lines = (
        spark.read.text([str(r.history) for r in runs])
        .select(F.url_decode(path).alias("run"), "value")
        .join(F.broadcast(meta), "run")
        .filter(F.col("tail").isNull() | (F.col("value") != F.col("tail")))
        .repartition("run")  # whole runs per task: both windows below need no shuffle
    )
    op = F.from_json("value", LINE, _JSON)
    v = op["value"]
    ops = lines.select(
        "run",
        "night",
        op["index"].alias("index"),
        op["time"].alias("time"),
        op["type"].alias("type"),
        op["process"].alias("process"),
        op["f"].alias("f"),
        v["ledger"].alias("ledger"),
        F.when(F.col("value").rlike(_STRING_LEDGER), "str").otherwise("int").alias("ledger_kind"),
        v["payload"].alias("payload"),
        v["mode"].alias("mode"),
        v["lac"].alias("lac"),
        v["entry"].alias("entry"),
        v["entries"].alias("entries"),
        op["error"].alias("error"),
        F.substring("value", 1, 120).alias("text"),
    )
    wellformed = F.coalesce(
        F.col("index").isNotNull()
        & F.col("time").isNotNull()
        & F.col("f").isNotNull()
        & F.col("type").isin("invoke", "ok", "fail", "info")
        & ((F.col("process") == NEMESIS) | F.col("process").rlike(r"^-?\d+$")),
        F.lit(False),
    )
    # Every line goes through one window and one projection: a filter before the window
    # would be pushed below the shuffle and make Spark scan and parse the text twice.
    # A malformed line among a process's ops garbles its pairing, but its run is skipped.
    w = Window.partitionBy("run", "process").orderBy("index")
    nxt = F.struct(
        "type", "index", "time", "f", "ledger", "ledger_kind", "lac", "entry", "entries", "error"
    )
    paired = ops.select(
        "*",
        wellformed.alias("wellformed"),
        F.lead(nxt).over(w).alias("d"),
        F.lag(F.struct("type", "f")).over(w).alias("prev"),
    )
    rows = paired.select(*_call_columns())
    return rows.filter(F.col("type").isNotNull() | F.col("problem").isNotNull())


def _call_columns() -> list[Column]:
    """Columns of a call row built from an invoke row and its next op `d`; on other
    lines `type` is null and `problem` says if the line is malformed or unpaired."""
    done = F.col("d.type").isin("ok", "fail", "info")
    d = lambda name: F.when(done, F.col(f"d.{name}"))  # noqa: E731 - a column shorthand
    kind = F.coalesce(d("type"), F.lit("info"))
    ok, f = kind == "ok", F.col("f")
    from_done = f.isin("append", "create") & ok  # the ok value names the ledger
    entries = F.transform(
        d("entries"), lambda x: F.struct(x[0].cast("long").alias("e"), x[1].alias("p"))
    )
    bad_entry = F.exists(
        d("entries"),
        lambda x: (F.size(x) != 2) | x[0].cast("long").isNull() | x[1].isNull(),
    )
    client = F.col("process") != NEMESIS
    invoke = F.col("wellformed") & (F.col("type") == "invoke")
    orphan = F.when(
        F.col("prev").isNull() | (F.col("prev.type") != "invoke"),
        F.format_string("op %d: %s of process %s without an invoke", "index", "type", "process"),
    ).when(
        F.col("prev.f") != F.col("f"),
        F.format_string("op %d completes %s but its invoke is %s", "index", "f", "prev.f"),
    )
    problem = (
        F.when(~F.col("wellformed"), F.concat(F.lit("not an op: "), F.col("text")))
        .when(~invoke, orphan)
        .when(
            F.col("d.type") == "invoke",
            F.format_string(
                "process %s invokes (op %d) while op %d is outstanding",
                "process",
                "d.index",
                "index",
            ),
        )
        .when(client & (f == "append") & F.col("payload").isNull(), "an append has no payload")
        .when(
            client & (f == "append") & ok & (d("ledger").isNull() | d("entry").isNull()),
            "an ok append has no ledger or entry",
        )
        .when(
            client & f.isin("read", "read-lac") & F.col("ledger").isNull(), "a read has no ledger"
        )
        .when(client & f.isin("read", "read-lac") & ok & d("lac").isNull(), "a read has no lac")
        .when(
            client
            & (f == "read")
            & ok
            & (d("entries").isNull() | F.col("mode").isNull() | bad_entry),
            "a read has no mode or malformed entries",
        )
        .when(client & (f == "create") & ok & d("ledger").isNull(), "a create has no ledger")
    )
    return [
        "run",
        "night",
        "process",
        "f",
        F.when(invoke, kind).alias("type"),
        F.col("index").alias("inv_index"),
        F.col("time").alias("inv_time"),
        d("index").alias("done_index"),
        d("time").alias("done_time"),
        F.coalesce(d("index"), F.col("index") + _NEVER).alias("key"),
        F.when(from_done, d("ledger")).otherwise(F.col("ledger")).alias("ledger"),
        F.when(from_done, d("ledger_kind")).otherwise(F.col("ledger_kind")).alias("ledger_kind"),
        F.when(f == "append", F.col("payload")).alias("payload"),
        F.when((f == "append") & ok, d("entry")).alias("entry"),
        F.when(f == "read-lac", "lac").when(f == "read", F.col("mode")).alias("mode"),
        F.when(f.isin("read", "read-lac") & ok, d("lac")).alias("lac"),
        F.when((f == "read") & ok, entries).alias("entries"),
        d("error").alias("error"),
        problem.alias("problem"),
    ]


def _run_stats(rows: DataFrame) -> DataFrame:
    """Per run: lines, first and last time, and its problems (count, first by index)."""
    last_index = F.coalesce("done_index", "inv_index")
    return rows.groupBy("run").agg(
        (F.count("type") + F.count("done_index")).alias("lines"),
        F.min("inv_time").alias("start_time"),
        F.max_by(F.coalesce("done_time", "inv_time"), last_index).alias("end_time"),
        F.count("problem").alias("problems"),
        # the first problem by index; a line that did not parse has none, so it comes first
        F.min(
            F.when(
                F.col("problem").isNotNull(),
                F.struct(F.coalesce("inv_index", F.lit(-1)).alias("i"), "problem"),
            )
        )["problem"].alias("first"),
    )
