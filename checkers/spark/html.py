"""Static trend pages: `index.html` beside the Parquet tables, readable offline.

Plain HTML tables and inline SVG bars (no JavaScript), so `bkchaos serve` can link the
page as a file and a browser opens it without a server too. The page is
`templates/trends.html.j2`, rendered with autoescaping (checkers/pages.py).
"""

from __future__ import annotations

import os
from collections import defaultdict
from pathlib import Path
from typing import Any

from checkers import pages

Row = dict[str, Any]
_MAX_RUNS = 500  # newest runs listed on the page; the Parquet table has them all
_BAR_WIDTH, _CHART_HEIGHT = 40, 120  # per night, in pixels


def write_pages(out: Path, report: Row, tables: dict[str, list[Row]]) -> Path:
    """Write `out/index.html`; returns its path."""
    runs = sorted(tables["runs"], key=lambda r: (r["night"], r["run"]), reverse=True)
    env = pages.environment("checkers.spark")
    env.filters["cell"] = _cell
    page = out / "index.html"
    html = env.get_template("trends.html.j2").render(
        report=report,
        tables=tables,
        chart=_night_chart(runs),
        runs=[(r, _report_link(out, r)) for r in runs[:_MAX_RUNS]],
        total_runs=len(runs),
        farm_reach=_farm_reach(tables),
    )
    page.write_text(html + "\n")
    return page


def _farm_reach(tables: dict[str, list[Row]]) -> dict[str, dict[str, int]]:
    """Probe -> night -> farm tests reaching it, for the farm section's table."""
    reach: dict[str, dict[str, int]] = {}
    for r in tables.get("farm_probes") or []:
        reach.setdefault(r["probe"], {})[r["night"]] = r["tests_reaching"]
    return reach


def _cell(value: Any) -> str:
    """A table cell's text: lists joined, floats to 3 significant digits, — for nothing."""
    if isinstance(value, list):
        value = ", ".join(map(str, value)) or "—"
    elif isinstance(value, float):
        value = f"{value:.3g}"
    return "—" if value is None else str(value)


def _night_chart(runs: list[Row]) -> Row:
    """Bars per night: all runs (grey) and runs with an anomaly (red), scaled to the
    busiest night."""
    nights: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for r in runs:
        nights[r["night"]][0] += 1
        nights[r["night"]][1] += bool(r["detected"])
    top = max((n for n, _ in nights.values()), default=1)
    drawn = [
        {
            "night": night,
            "x": i * _BAR_WIDTH + 5,
            "runs": n,
            "anomalous": bad,
            "bars": [
                {"count": count, "colour": colour, "height": _CHART_HEIGHT * count / top}
                for count, colour in ((n, "#bbb"), (bad, "#c33"))
            ],
        }
        for i, (night, (n, bad)) in enumerate(sorted(nights.items()))
    ]
    return {
        "nights": drawn,
        "width": _BAR_WIDTH * len(nights) + 10,
        "height": _CHART_HEIGHT,
        "bar_width": _BAR_WIDTH - 10,
    }


def _report_link(out: Path, run: Row) -> str | None:
    """The run's report relative to the page, when the run has one."""
    report = Path(run["path"]) / "report.html"
    return os.path.relpath(report, out) if report.is_file() else None
