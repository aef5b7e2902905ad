"""Writing `report.html`, `timeline.html` (+ `timeline/`) and `plotly.min.js` into a run.

The report is static and offline: plotly.js is copied beside it from the `plotly` PyPI
package (hard-linked when the store shares the file system, so runs cost no extra disk),
and everything else is inlined. Opening the run directory anywhere, even from file://,
shows the same pages.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
from pathlib import Path
from typing import Any

import jinja2

from checkers import pages
from harness.coverage import coverage_view
from harness.errors import UserError
from harness.report import figures
from harness.report.cases import ensemble_of, faults_during, ledger_ensembles, ledger_rollup
from harness.report.figures import Fault
from harness.report.run import Call, Run, load_run, reproduce_command
from harness.report.timeline import CALLS_PER_PAGE, label, write_pages

SHOWN_CASES = 20  # cases drawn per anomaly; results.json keeps the rest
VERDICTS = {True: "valid", False: "invalid", "unknown": "unknown"}
EDGE_COLOURS = {
    "ww": "#1971c2",
    "wr": "#2f9e44",
    "rw": "#e03131",
    "realtime": "#868e96",
    "process": "#9c36b5",
}
log = logging.getLogger(__name__)


def environment() -> jinja2.Environment:
    """The templates of reports, of `bkchaos serve` and of the nightly summary."""
    env = pages.environment("harness.report")
    env.filters["verdict"] = lambda v: VERDICTS.get(v, "unknown")
    env.filters["pretty"] = lambda v: json.dumps(v, indent=1, default=str)
    return env


def plotly_js() -> Path:
    """The plotly.js bundled in the plotly wheel: never a CDN, so reports work offline."""
    try:
        import plotly
    except ImportError as exc:
        raise UserError("the plotly package is missing: pip install plotly") from exc
    source = Path(plotly.__file__).parent / "package_data" / "plotly.min.js"
    if not source.is_file():
        raise UserError(
            f"{source} is missing: reinstall plotly (pip install --force-reinstall plotly)"
        )
    return source


def _place_plotly(run_dir: Path) -> None:
    source, dest = plotly_js(), run_dir / "plotly.min.js"
    if dest.exists() and dest.stat().st_size == source.stat().st_size:
        return
    dest.unlink(missing_ok=True)
    try:
        os.link(source, dest)
    except OSError:  # another file system, or links not allowed
        shutil.copyfile(source, dest)


def _by_index(calls: list[Call], wanted: set[int]) -> dict[int, Call]:
    """History index (of an invoke or a completion) -> its call, for the cited ops only."""
    found: dict[int, Call] = {}
    for c in calls:
        for i in c.ops:
            if i in wanted:
                found[i] = c
    return found


def _cycle_drawing(cycle: list[dict[str, Any]], calls: dict[int, Call]) -> dict[str, Any]:
    """Geometry of a cycle drawn as a column of ops, each arrow labelled with its edge kind,
    and the closing edge curving back up on the right: readable at any length."""
    step, box_w, box_h, x = 58, 460, 30, 10
    nodes = []
    for n, edge in enumerate(cycle):
        call = calls.get(edge["from"])
        text = f"op {edge['from']}: " + (label(call) if call else "?")
        nodes.append({"index": edge["from"], "x": x, "y": 10 + n * step, "text": text[:70]})
    arrows = []
    for n, edge in enumerate(cycle):
        kind = str(edge.get("kind", "?"))
        colour = EDGE_COLOURS.get(kind, "#495057")
        if n + 1 < len(cycle):
            y1, y2 = nodes[n]["y"] + box_h, nodes[n + 1]["y"]
            path = f"M {x + 60} {y1} L {x + 60} {y2 - 2}"
            arrows.append(
                {"path": path, "kind": kind, "colour": colour, "lx": x + 68, "ly": y1 + 18}
            )
        else:
            top, bottom = nodes[0]["y"] + box_h / 2, nodes[n]["y"] + box_h / 2
            right, far = x + box_w, x + box_w + 50
            path = f"M {right} {bottom} C {far} {bottom}, {far} {top}, {right + 4} {top}"
            mid = (top + bottom) / 2
            arrows.append({"path": path, "kind": kind, "colour": colour, "lx": far - 8, "ly": mid})
    height = 20 + len(cycle) * step
    return {"nodes": nodes, "arrows": arrows, "height": height, "box_w": box_w, "box_h": box_h}


def anomaly_counts(results: dict[str, Any]) -> dict[str, int]:
    """Anomaly type -> how many cases the checkers found (results.json keeps at most
    MAX_CASES examples per checker, and says the full count in `anomaly_counts`)."""
    counts = {name: len(results["anomalies"].get(name, [])) for name in results["anomaly_types"]}
    found: dict[str, int] = {}
    for sub in results.get("checkers", {}).values():
        if isinstance(sub, dict) and isinstance(sub.get("anomaly_counts"), dict):
            for name, n in sub["anomaly_counts"].items():
                found[name] = found.get(name, 0) + n
    return {name: max(n, found.get(name, 0)) for name, n in counts.items()}


def _anomalies(run: Run, faults: list[Fault]) -> list[dict[str, Any]]:
    """Each anomaly type, root anomalies first: its full count, its first cases, and per
    case the ops, the ensemble behind it, the faults in force while its ops ran, and the
    steps of its cycle (marked when the cycle only restates a root anomaly)."""
    from checkers import root_first

    results = run.results
    counts = anomaly_counts(results)
    shown = {
        name: results["anomalies"].get(name, [])[:SHOWN_CASES]
        for name in root_first(results["anomaly_types"])
    }
    wanted = {i for cases in shown.values() for c in cases for i in _ints(c.get("ops"))}
    wanted |= {e["from"] for cases in shown.values() for c in cases for e in _edges(c)}
    calls = _by_index(run.calls, wanted)
    ensembles = ledger_ensembles(run.client)
    out = []
    for name, cases in shown.items():
        views = []
        for c in cases:
            involved = {calls[i].inv.index: calls[i] for i in _ints(c.get("ops")) if i in calls}
            hidden = ("ops", "explanation", "cycle", "derived_from")
            where = {k: v for k, v in c.items() if k not in hidden}
            during = faults_during(list(involved.values()), faults)
            edges = _edges(c)
            views.append(
                {
                    "where": where,
                    "explanation": c.get("explanation", ""),
                    "steps": _steps(c, edges),
                    "derived": _derived(c.get("derived_from")),
                    "ops": _ints(c.get("ops")),
                    "timeline": _ints(c.get("ops")) + [f.index for f in during],
                    "calls": [_call_view(call) for call in involved.values()],
                    "ensemble": ensemble_of(c, ensembles),
                    "faults": during,
                    "cycle": _cycle_drawing(edges, calls) if edges else None,
                }
            )
        out.append({"name": name, "count": counts[name], "cases": views})
    return out


def _ints(values: Any) -> list[int]:
    return [v for v in values if type(v) is int] if isinstance(values, list) else []


def _edges(case: dict[str, Any]) -> list[dict[str, Any]]:
    """A cycle case's edges, if well formed (a results.json may come from anywhere)."""
    edges = case.get("cycle")
    if not isinstance(edges, list) or not all(
        isinstance(e, dict) and type(e.get("from")) is int for e in edges
    ):
        return []
    return edges


def _steps(case: dict[str, Any], edges: list[dict[str, Any]]) -> list[str]:
    """A cycle's sentences, one per edge (results written before edges carried their
    `step` have them joined by "; " in the explanation)."""
    if not edges:
        return []
    if all(isinstance(e.get("step"), str) for e in edges):
        return [e["step"] for e in edges]
    return str(case.get("explanation", "")).split("; ")


def _derived(derived_from: Any) -> str:
    """`lost-append of ledger 7 entry 1, …` for a cycle that only restates those."""
    if not isinstance(derived_from, list):
        return ""
    return ", ".join(
        f"{d.get('anomaly')} of ledger {d.get('ledger')} entry {d.get('entry')}"
        for d in derived_from
        if isinstance(d, dict)
    )


def _call_view(c: Call) -> dict[str, Any]:
    done = c.done
    return {
        "index": c.inv.index,
        "done": done.index if done is not None else None,
        "type": c.type,
        "process": c.inv.process,
        "time": c.inv.time / 1e9,
        "latency": (done.time - c.inv.time) / 1e6 if done is not None else None,
        "label": label(c),
        "error": done.error if done is not None else None,
        "node": (done or c.inv).node,
    }


def _nemesis_log(nemesis: list[Call]) -> list[dict[str, Any]]:
    entries = []
    for c in nemesis:
        value = c.done.decoded() if c.done is not None else None
        proof = value.get("proof") if isinstance(value, dict) else None
        entries.append({**_call_view(c), "proof": proof})
    return entries


def _logs(run_dir: Path) -> list[dict[str, Any]]:
    files = sorted(run_dir.glob("logs/*/*")) + sorted(run_dir.glob("*.log"))
    return [
        {"path": p.relative_to(run_dir).as_posix(), "size": p.stat().st_size}
        for p in files
        if p.is_file()
    ]


def write_report(run_dir: Path) -> Path:
    """Render the run's report from its files; return the path of report.html."""
    started = time.perf_counter()
    run = load_run(run_dir)
    client, nemesis = run.client, run.nemesis
    end_s = max(run.end_time / 1e9, 1e-9)
    windows = figures.faults(nemesis, run.end_time)
    scatter, dropped = figures.latency_scatter(client, windows)
    quantiles, rates = figures.rates_and_quantiles(client, windows, end_s)
    firsts = write_pages(run.calls, run_dir / "timeline")
    _place_plotly(run_dir)
    env = environment()
    results = run.results
    context = {
        "run_dir": run_dir.resolve(),
        "test": run.test,
        "results": results,
        "verdict": VERDICTS[results["valid"]],
        "command": reproduce_command(run.test, run.dir),
        "duration_s": end_s,
        "anomalies": _anomalies(run, windows),
        "rollup": ledger_rollup(results["anomalies"]),
        "figures": {"latency": scatter, "quantiles": quantiles, "rates": rates},
        "points_dropped": dropped,
        "points_shown": sum(len(trace["x"]) for trace in scatter["data"]),
        "never_completed": sum(1 for c in client if c.done is None),
        "perf": results.get("checkers", {}).get("perf", {}),
        "faults": windows,
        "nemesis": _nemesis_log(nemesis),
        "logs": _logs(run_dir),
        "coverage": coverage_view(results.get("coverage")),
        "pages": len(firsts),
        "edge_colours": EDGE_COLOURS,
        "calls_per_page": CALLS_PER_PAGE,
        "generated": time.strftime("%Y-%m-%d %H:%M:%S"),
    }
    title = f"{run.test.get('name', run_dir.parent.name)} {run_dir.name}"
    (run_dir / "timeline.html").write_text(
        env.get_template("timeline.html.j2").render(title=title, firsts=firsts)
    )
    report = run_dir / "report.html"
    tmp = report.with_suffix(".html.tmp")
    tmp.write_text(env.get_template("report.html.j2").render(title=title, **context))
    tmp.replace(report)
    log.info("report %s written in %.1f s", report, time.perf_counter() - started)
    return report
