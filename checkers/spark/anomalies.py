"""The per-ledger anomalies of docs/history.md §4 as joins and aggregations.

Each finder takes the `Frames` derived from the calls table (any number of runs at
once: every join is keyed by run) and returns cases as rows of `schema.ANOMALIES`; its
docstring is the definition it checks, phrased as the Python checker
(`checkers.ledger`) applies it, because the two must agree on every run. Ledgers are
joined on (ledger, ledger_kind), so the int 7 and the string "7" never meet.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from checkers.spark.schema import ANOMALIES

L = ["run", "ledger", "ledger_kind"]  # the key of a ledger
AT = [*L, "entry"]  # the key of a position in a ledger


class Frames(NamedTuple):
    """The relations every finder draws on, derived once from the calls: observations
    and acks already joined with their ledger's authoritative content, so each finder
    is a filter or a group-by rather than joins of its own."""

    auth: DataFrame  # L, auth_key, last, lasts, time: first closed read of each ledger
    acked: DataFrame  # L, entry, payload, time, last, q: ok appends vs the content
    seen: DataFrame  # run, key, L, mode, lac, time, pos, entry, p, auth_key, last, q,
    #                  first_type: every entry of every ok read, vs content and appends
    reads: DataFrame  # run, process, key, L, mode, lac, time, last: ok reads, read-lacs


def frames(calls: DataFrame) -> Frames:
    """Derive the relations from calls (client ops only; nemesis ops are not judged).

    `last` and `auth_key` are null on unchecked ledgers, `q` where the authoritative
    content has no such entry, `first_type` for payloads no append carried.
    """
    client = calls.filter(F.col("process") != "nemesis")
    appends = client.filter(F.col("f") == "append")
    reads = client.filter(F.col("f").isin("read", "read-lac") & (F.col("type") == "ok")).select(
        "run",
        "process",
        "key",
        *L[1:],
        "f",
        "mode",
        "lac",
        "entries",
        F.col("inv_time").alias("time"),
    )
    closed = reads.filter((F.col("f") == "read") & (F.col("mode") == "closed"))
    first = F.min(F.struct("key", "lac"))
    auth = closed.groupBy(*L).agg(
        first["key"].alias("auth_key"),
        first["lac"].alias("last"),
        F.countDistinct("lac").alias("lasts"),
        F.min("time").alias("time"),
    )
    seen = (
        reads.filter(F.col("f") == "read")
        .select(
            "run", "key", *L[1:], "mode", "lac", "time", F.posexplode("entries").alias("pos", "x")
        )
        .select("*", F.col("x.e").alias("entry"), F.col("x.p").alias("p"))
        .drop("x")
        .join(auth.select(*L, "auth_key", "last"), L, "left")
    )
    # the first closed read's entries; a repeated entry id keeps its last payload, as
    # the Python checker's dict does
    content = (
        seen.filter(F.col("key") == F.col("auth_key"))
        .groupBy(*AT)
        .agg(F.max_by("p", "pos").alias("q"))
    )
    carried = appends.groupBy("run", F.col("payload").alias("p")).agg(
        F.min_by("type", "key").alias("first_type")  # the first append of p decides
    )
    acked = (
        appends.filter(F.col("type") == "ok")
        .select(*AT, "payload", F.col("inv_time").alias("time"))
        .join(auth.select(*L, "last"), L, "left")
        .join(content, AT, "left")
    )
    seen = seen.join(content, AT, "left").join(carried, ["run", "p"], "left")
    reads = reads.drop("entries").join(auth.select(*L, "last"), L, "left")
    return Frames(auth, acked, seen, reads)


def _cases(df: DataFrame, name: str, entry: str | None = "entry", payload: str | None = None):
    """Rows of ANOMALIES from a finder's result."""
    return df.select(
        "run",
        F.lit(name).alias("anomaly"),
        "ledger",
        "ledger_kind",
        (F.col(entry) if entry else F.lit(None)).cast("long").alias("entry"),
        (F.col(payload) if payload else F.lit(None)).cast("string").alias("payload"),
        F.col("time").cast("long").alias("time"),
    )


def lost_append(fr: Frames) -> DataFrame:
    """An ok append (L, e, p) where L has authoritative content and p is not at entry e."""
    df = fr.acked.filter(F.col("last").isNotNull())
    return _cases(
        df.filter(F.col("q").isNull() | (F.col("q") != F.col("payload"))),
        "lost-append",
        payload="payload",
    )


def truncated_ledger(fr: Frames) -> DataFrame:
    """L's authoritative last entry id is below the largest e of any ok append on L
    (one case per ledger, as the Python checker reports it)."""
    df = fr.acked.filter(F.col("entry") > F.col("last"))
    df = df.groupBy(*L).agg(F.max("entry").alias("entry"), F.min("time").alias("time"))
    return _cases(df, "truncated-ledger")


def divergence(fr: Frames) -> DataFrame:
    """Two reads, or a read and an ok append, give different payloads for the same (L, e);
    or two closed reads of L report different last entry ids.

    Where the authoritative content has the entry, every other observation is compared
    with it; elsewhere, reads are compared with each other and ok appends with them
    (an ok append that no read saw is compared with nothing), as `checkers.ledger` does.
    """
    others = fr.seen.filter(F.col("auth_key").isNull() | (F.col("key") != F.col("auth_key")))
    vs_content = others.filter(F.col("q") != F.col("p"))
    acked_vs_content = fr.acked.filter(F.col("q") != F.col("payload"))
    outside = others.filter(F.col("q").isNull()).select(*AT, "p", "time", F.lit(1).alias("r"))
    unread = fr.acked.filter(F.col("q").isNull()).select(
        *AT, F.col("payload").alias("p"), "time", F.lit(0).alias("r")
    )
    between = (
        outside.unionByName(unread)
        .groupBy(*AT)
        .agg(F.sum("r").alias("r"), F.countDistinct("p").alias("n"), F.min("time").alias("time"))
        .filter((F.col("r") > 0) & (F.col("n") > 1))
    )
    lasts = fr.auth.filter(F.col("lasts") > 1)
    return (
        _cases(vs_content, "divergence", payload="p")
        .unionByName(_cases(acked_vs_content, "divergence", payload="payload"))
        .unionByName(_cases(between, "divergence"))
        .unionByName(_cases(lasts, "divergence", entry=None))
    )


def dirty_read(fr: Frames) -> DataFrame:
    """A read returned (L, e, p) with e beyond L's authoritative last entry id."""
    return _cases(fr.seen.filter(F.col("entry") > F.col("last")), "dirty-read", payload="p")


def garbage_read(fr: Frames) -> DataFrame:
    """A read returned a payload that no append in the history ever carried."""
    return _cases(fr.seen.filter(F.col("first_type").isNull()), "garbage-read", payload="p")


def duplicate(fr: Frames) -> DataFrame:
    """The same payload at two different (L, e) positions (reads or ok appends)."""
    where = fr.seen.select(*AT, "p", "time").unionByName(
        fr.acked.select(*AT, F.col("payload").alias("p"), "time")
    )
    df = (
        where.groupBy("run", "p")
        .agg(
            F.countDistinct(F.struct(*AT[1:])).alias("n"),
            F.min(F.struct("time", *AT[1:])).alias("at"),
        )
        .filter(F.col("n") > 1)
        .select("run", "p", "at.*")
    )
    return _cases(df, "duplicate", payload="p")


def failed_append_visible(fr: Frames) -> DataFrame:
    """The payload of an append that completed `fail` appears in a read (the first
    append of a payload, in completion order, decides)."""
    df = fr.seen.filter(F.col("first_type") == "fail")
    return _cases(df, "failed-append-visible", payload="p")


def read_beyond_lac(fr: Frames) -> DataFrame:
    """A `tail` or `follow` read returned an entry id greater than its own `lac`."""
    df = fr.seen.filter(F.col("mode").isin("tail", "follow") & (F.col("entry") > F.col("lac")))
    return _cases(df, "read-beyond-lac", payload="p")


def nonmonotonic_lac(fr: Frames) -> DataFrame:
    """One process, one ledger: an ok read/read-lac reports a `lac` lower than an
    earlier ok one from the same process (earlier: in completion order)."""
    before = Window.partitionBy("run", "process", *L[1:]).orderBy("key")
    highest = F.max("lac").over(before.rowsBetween(Window.unboundedPreceding, -1))
    df = fr.reads.select("*", highest.alias("highest")).filter(F.col("lac") < F.col("highest"))
    return _cases(df, "nonmonotonic-lac", entry=None)


def lac_beyond_end(fr: Frames) -> DataFrame:
    """A reported `lac` (tail read or read-lac) exceeds L's authoritative last entry id."""
    df = fr.reads.filter((F.col("mode") != "closed") & (F.col("lac") > F.col("last")))
    return _cases(df, "lac-beyond-end", entry=None)


FINDERS: dict[str, Callable[[Frames], DataFrame]] = {
    "lost-append": lost_append,
    "truncated-ledger": truncated_ledger,
    "divergence": divergence,
    "dirty-read": dirty_read,
    "garbage-read": garbage_read,
    "duplicate": duplicate,
    "failed-append-visible": failed_append_visible,
    "read-beyond-lac": read_beyond_lac,
    "nonmonotonic-lac": nonmonotonic_lac,
    "lac-beyond-end": lac_beyond_end,
}
RELATIONAL = frozenset(FINDERS)  # the anomaly types Spark must agree on


def find_anomalies(calls: DataFrame) -> DataFrame:
    """Every case of every relational anomaly in `calls`, as rows of ANOMALIES."""
    fr = frames(calls)
    found = None
    for find in FINDERS.values():
        cases = find(fr)
        found = cases if found is None else found.unionByName(cases)
    nights = calls.select("run", "night").distinct()
    return found.join(F.broadcast(nights), "run").select(*ANOMALIES.fieldNames())
