"""`bkchaos bench analyze`: the Spark pipeline against the Python checker on one store.

A synthetic store (`checkers.synthesize`, spread over several nights, every tenth run
mutated so it holds a lost append) is written to a temp dir; the Python checker checks
each run (its results.json is what Spark must agree with), then `analyze` ingests the
whole store cold, and once more with nothing new. Times are wall seconds: Spark uses
every core, the Python checker one, and the comparison is what a user waits for.
"""

from __future__ import annotations

import json
import os
import platform
import tempfile
import time
from pathlib import Path
from typing import Any

import msgspec

NIGHTS = 5
DRIVER_MEMORY = "4g"  # local mode: the driver runs the tasks; 10M ops sort in it


def write_store(store: Path, runs: int, ops: int, seed: int) -> int:
    """Write `runs` synthetic runs of about `ops` ops each; returns the total line count."""
    from checkers import synthesize

    encode = msgspec.json.Encoder().encode
    lines = 0
    for i in range(runs):
        run_dir = store / "synthetic" / f"2026110{1 + i % NIGHTS}T{i // NIGHTS:06d}"
        run_dir.mkdir(parents=True)
        history = list(
            synthesize(
                seed + i,
                ops=ops,
                ledgers=10,
                streams=5,
                processes=10,
                read_fraction=0.05,
                rollover=0.001,
            )
        )
        if i % 10 == 0:
            _lose_last_entry(history)
        with open(run_dir / "history.jsonl", "wb") as fh:
            fh.writelines(encode(op) + b"\n" for op in history)
        spec = {
            "name": "synthetic",
            "workload": "ledger",
            "nemesis": ["kill", "pause"],
            "seed": seed + i,
            "ensemble": 3,
            "write_quorum": 2,
            "ack_quorum": 2,
            "digest": "crc32c",
            "bugs": [],
        }
        (run_dir / "test.json").write_text(json.dumps(spec))
        lines += len(history)
    return lines


def _lose_last_entry(history: list[dict[str, Any]]) -> None:
    """The final closed read of the last ledger misses its last entry (an anomaly)."""
    for op in reversed(history):
        value = op["value"]
        if op["type"] == "ok" and op["f"] == "read" and value["entries"]:
            value["entries"].pop()
            return


def check_store(store: Path) -> tuple[float, int]:
    """Check every run with the Python checker, writing results.json; returns seconds
    spent checking (reading, pairing and every sub-checker, not writing the result) and
    how many runs it found invalid."""
    from checkers import check

    spent, invalid = 0.0, 0
    for history in sorted(store.glob("*/*/history.jsonl")):
        started = time.perf_counter()
        result = check(history)
        spent += time.perf_counter() - started
        invalid += result["valid"] is False
        (history.parent / "results.json").write_text(json.dumps(result))
    return spent, invalid


def run(
    runs: int = 100, ops: int = 100_000, master: str = "local[*]", seed: int = 1
) -> dict[str, Any]:
    """Generate, check with Python, analyse with Spark twice; the docs' figures."""
    from checkers.spark import analyze, session

    with tempfile.TemporaryDirectory(prefix="bkchaos-bench-analyze-") as tmp:
        store = Path(tmp) / "store"
        started = time.perf_counter()
        lines = write_store(store, runs, ops, seed)
        generated = time.perf_counter() - started
        size = sum(p.stat().st_size for p in store.glob("*/*/history.jsonl"))
        python, invalid = check_store(store)
        spark = session(master, {"spark.driver.memory": DRIVER_MEMORY})
        try:
            cold = analyze(spark, store)
            warm = analyze(spark, store)
        finally:
            spark.stop()
    total = lambda r: r["seconds"]["ingest"] + r["seconds"]["analyse"]  # noqa: E731
    return {
        "runs": runs,
        "ops": lines,
        "history_gib": round(size / 2**30, 2),
        "generate_seconds": round(generated, 1),
        "python_check": {
            "seconds": round(python, 1),
            "ops_per_s": round(lines / python),
            "invalid_runs": invalid,
        },
        "spark_cold": {
            **cold["seconds"],
            "ingest_ops_per_s": round(lines / cold["seconds"]["ingest"]),
            "ops_per_s": round(lines / total(cold)),
        },
        "spark_warm": warm["seconds"],
        "disagreements": cold["disagreements"],
        "master": master,
        "driver_memory": DRIVER_MEMORY,
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
    }
