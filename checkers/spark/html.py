"""Static trend pages: `index.html` beside the Parquet tables, readable offline.

Plain HTML tables and inline SVG bars (no JavaScript), so `bkchaos serve` can link the
page as a file and a browser opens it without a server too.
"""

from __future__ import annotations

import os
from collections import defaultdict
from html import escape
from pathlib import Path
from typing import Any

from checkers.spark import coverage, farm

Row = dict[str, Any]
_MAX_RUNS = 500  # newest runs listed on the page; the Parquet table has them all

_CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:2em;color:#222}
table{border-collapse:collapse;margin:.5em 0 1.5em}
th,td{border:1px solid #ccc;padding:2px 8px;text-align:left}
th{background:#f3f3f3}.bad{color:#b00;font-weight:bold}.ok{color:#070}
svg text{font-size:10px}
"""


def write_pages(out: Path, report: Row, tables: dict[str, list[Row]]) -> Path:
    """Write `out/index.html`; returns its path."""
    runs = sorted(tables["runs"], key=lambda r: (r["night"], r["run"]), reverse=True)
    parts = [
        "<!doctype html><meta charset=utf-8><title>bkchaos trends</title>",
        f"<style>{_CSS}</style><h1>bkchaos trends</h1>",
        f"<p>{report['runs']} runs analysed, {report['ops']:,} ops; "
        f"{_verdict(report)}; {len(report['malformed'])} malformed run(s) skipped. "
        "Tables as Parquet in <code>tables/</code>.</p>",
        _disagreements(report),
        "<h2>Runs and anomalous runs per night</h2>",
        _night_chart(runs),
        "<h2>Detection per seeded bug</h2>",
        _table(
            tables["detection"], ["bug_set", "runs", "detected", "rate", "median_time_to_anomaly_s"]
        ),
        "<h2>Anomalies by night, workload, nemesis, configuration and bug</h2>",
        _table(
            [r for r in tables["anomalies_by"] if r["anomaly"]],
            [
                "night",
                "workload",
                "nemesis_set",
                "config",
                "bug_set",
                "anomaly",
                "runs_with",
                "runs",
                "cases",
            ],
        ),
        "<h2>Latency and throughput inside and outside fault windows</h2>",
        _table(
            tables["latency"],
            [
                "workload",
                "nemesis_set",
                "f",
                "window",
                "count",
                "ok_per_s",
                "p50_ms",
                "p95_ms",
                "p99_ms",
                "max_ms",
            ],
        ),
        coverage.html_section(tables),
        farm.html_section(tables),
        f"<h2>Runs (newest {min(len(runs), _MAX_RUNS)} of {len(runs)})</h2>",
        _runs(out, runs[:_MAX_RUNS]),
    ]
    if report["malformed"]:
        parts += [
            "<h2>Malformed runs (skipped)</h2>",
            _table(report["malformed"], ["run", "reason"]),
        ]
    page = out / "index.html"
    page.write_text("\n".join(parts) + "\n")
    return page


def _verdict(report: Row) -> str:
    bad = len(report["disagreements"])
    if bad:
        return f"<span class=bad>Spark disagrees with the Python checker on {bad} run(s)</span>"
    return "<span class=ok>Spark agrees with the Python checker on every run</span>"


def _disagreements(report: Row) -> str:
    if not report["disagreements"]:
        return ""
    return "<h2 class=bad>Disagreements</h2>" + _table(
        report["disagreements"], ["run", "spark", "python"]
    )


def _cell(value: Any) -> str:
    if isinstance(value, list):
        value = ", ".join(map(str, value)) or "—"
    elif isinstance(value, float):
        value = f"{value:.3g}"
    return escape("—" if value is None else str(value))


def _table(rows: list[Row], columns: list[str]) -> str:
    head = "".join(f"<th>{escape(c)}</th>" for c in columns)
    body = "".join(
        "<tr>" + "".join(f"<td>{_cell(r.get(c))}</td>" for c in columns) + "</tr>" for r in rows
    )
    return f"<table><tr>{head}</tr>{body}</table>" if rows else "<p>none</p>"


def _night_chart(runs: list[Row]) -> str:
    """Bars per night: all runs (grey) and runs with an anomaly (red)."""
    nights: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for r in runs:
        nights[r["night"]][0] += 1
        nights[r["night"]][1] += bool(r["detected"])
    if not nights:
        return "<p>none</p>"
    top = max(n for n, _ in nights.values())
    width, height = 40, 120
    bars = []
    for i, (night, (n, bad)) in enumerate(sorted(nights.items())):
        x = i * width + 5
        for count, colour in ((n, "#bbb"), (bad, "#c33")):
            h = height * count / top
            bars.append(
                f'<rect x="{x}" y="{height - h:.1f}" width="{width - 10}" '
                f'height="{h:.1f}" fill="{colour}"><title>{night}: {count}</title></rect>'
            )
        bars.append(f'<text x="{x}" y="{height + 12}">{night[5:]}</text>')
        bars.append(f'<text x="{x}" y="{height + 24}">{bad}/{n}</text>')
    return (
        f'<svg width="{width * len(nights) + 10}" height="{height + 30}" role="img">'
        + "".join(bars)
        + "</svg>"
    )


def _runs(out: Path, runs: list[Row]) -> str:
    head = (
        "<tr><th>run</th><th>night</th><th>nemesis</th><th>bugs</th><th>ops</th>"
        "<th>Python</th><th>Spark</th><th>fault→anomaly s</th></tr>"
    )
    rows = []
    for r in runs:
        report = Path(r["path"]) / "report.html"
        name = escape(r["run"])
        if report.is_file():
            name = f'<a href="{escape(os.path.relpath(report, out))}">{name}</a>'
        rows.append(
            f"<tr><td>{name}</td><td>{r['night']}</td><td>{_cell(r['nemesis_set'])}</td>"
            f"<td>{_cell(r['bug_set'])}</td><td>{r['lines']}</td>"
            f"<td>{_cell(r['expected_valid'])}: {_cell(r['expected_types'])}</td>"
            f"<td>{_cell(r['spark_types'])}</td><td>{_cell(r['time_to_anomaly_s'])}</td></tr>"
        )
    return f"<table>{head}{''.join(rows)}</table>" if rows else "<p>none</p>"
