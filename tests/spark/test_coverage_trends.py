"""Coverage in the Spark trends: probes reached per night, and the probes no run of the
last 7 nights reached (counted from each run's results.json coverage)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.spark.conftest import edge_cases, write_run

pytest.importorskip("pyspark")


def _run(store: Path, run: str, coverage: dict[str, int] | None) -> None:
    run_dir = write_run(store, run, edge_cases()["info-fail-pending"])
    if coverage is not None:
        results = json.loads((run_dir / "results.json").read_text())
        (run_dir / "results.json").write_text(json.dumps({**results, "coverage": coverage}))


def test_coverage_per_night_and_probes_never_reached_this_week(spark: Any, tmp_path: Path) -> None:
    from checkers.spark import analyze

    store = tmp_path / "store"
    probes = ("bookie-fenced", "recovery-started", "unbounded-takeover")
    # Reached only on a night more than 7 nights before the newest: unreached this week.
    _run(
        store,
        "a/20261101T000000",
        {"bookie-fenced": 0, "recovery-started": 0, "unbounded-takeover": 4},
    )
    _run(
        store,
        "a/20261110T000000",
        {"bookie-fenced": 2, "recovery-started": 0, "unbounded-takeover": 0},
    )
    _run(
        store,
        "b/20261112T000000",
        {"bookie-fenced": 0, "recovery-started": 1, "unbounded-takeover": 0},
    )
    _run(store, "old/20261112T000100", None)  # from before coverage: left out
    report = analyze(spark, store)
    nights = {r["night"]: r for r in report["coverage_by_night"]}
    assert sorted(nights) == ["2026-11-01", "2026-11-10", "2026-11-12"]
    assert nights["2026-11-12"]["runs"] == 1 and nights["2026-11-12"]["reached"] == 1
    assert nights["2026-11-12"]["probes"] == len(probes)
    assert report["unreached_probes"] == ["unbounded-takeover"]
    page = (store / "trends" / "index.html").read_text()
    assert "Protocol coverage per night" in page
    assert "Probes never reached, 2026-11-06 to 2026-11-12" in page
    assert "<code>unbounded-takeover</code>" in page

    _run(
        store,
        "b/20261113T000000",
        {"bookie-fenced": 0, "recovery-started": 0, "unbounded-takeover": 1},
    )
    again = analyze(spark, store)  # only the new run is read; the week moves on
    assert again["new_runs"] == 1 and again["unreached_probes"] == []
