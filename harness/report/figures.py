"""Plotly figures as plain dicts (the page's plotly.js draws them; no Python plotly).

Latency over time is a scatter with one subplot per f, ok / fail / info in distinct
colours and markers; quantiles and throughput are per time bucket. Every figure shades
the fault windows, one labelled rectangle per fault, from its start to its heal. A huge
history's scatter is thinned to `MAX_POINTS` (small series, usually fail and info, are
kept whole) and the page says so; quantiles and throughput always use every op.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

from harness.report.run import Call
from nemesis.schedule import START_STOP

MAX_POINTS = 12_000
MAX_BUCKETS = 300
MAX_LABELS = 40
TYPE_STYLE = {  # type -> (colour, plotly marker symbol)
    "ok": ("#1971c2", "circle"),
    "fail": ("#e03131", "x"),
    "info": ("#f08c00", "triangle-up"),
}
F_COLOURS = ("#1971c2", "#2f9e44", "#9c36b5", "#0c8599", "#5c940d", "#495057", "#3b5bdb")
QUANTILES = (
    ("p50", 0.5, "solid"),
    ("p95", 0.95, "dash"),
    ("p99", 0.99, "dot"),
    ("max", 1.0, "longdashdot"),
)
_STOPS = dict(START_STOP.values())  # a fault's start op -> the op that heals it
_CLOSERS = frozenset(_STOPS.values())


@dataclass(frozen=True)
class Fault:
    """One fault as shaded on the plots: what, on which nodes, from when to when (s)."""

    label: str
    start: float
    end: float
    index: int  # history index of the invoke that started it
    error: str | None


def _stop_of(f: str) -> str | None:
    if f.startswith("start-"):
        return "stop-" + f.removeprefix("start-")
    return _STOPS.get(f)


def _targets(call: Call) -> Any:
    value = call.inv.decoded()
    return value.get("nodes") if isinstance(value, dict) else None


def faults(nemesis: list[Call], end_ns: int) -> list[Fault]:
    """Pair each fault with the op that heals it (nemesis.schedule's start/stop pairs, or
    `start-X`/`stop-X`, same targets first; `heal` ends all); a fault never healed lasts
    to the end, one with no heal op lasts from its invoke to its completion."""
    found: list[Fault] = []
    active: list[Call] = []

    def close(start: Call, at: int) -> None:
        done = start.done
        error = done.error if done is not None else "never completed"
        found.append(Fault(_label(start), start.inv.time / 1e9, at / 1e9, start.inv.index, error))

    for call in sorted(nemesis, key=lambda c: c.inv.index):
        f = call.inv.f
        at = (call.done or call.inv).time
        if f == "heal":
            for start in active:
                close(start, at)
            active.clear()
        elif f in _CLOSERS or f.startswith("stop-"):
            matching = [s for s in active if _stop_of(s.inv.f) == f]
            exact = [s for s in matching if _targets(s) == _targets(call)]
            if exact or matching:
                start = (exact or matching)[0]
                active.remove(start)
                close(start, at)
        elif _stop_of(f) is not None:
            active.append(call)
        else:
            close(call, at)
    for start in active:
        close(start, end_ns)
    return sorted(found, key=lambda fault: fault.start)


def _label(call: Call) -> str:
    targets = _targets(call)
    return f"{call.inv.f} {' '.join(map(str, targets))}" if targets else call.inv.f


def _rect(x0: float, x1: float, colour: str) -> dict[str, Any]:
    return {
        "type": "rect",
        "xref": "x",
        "yref": "paper",
        "x0": x0,
        "x1": max(x1, x0 + 0.05),
        "y0": 0,
        "y1": 1,
        "fillcolor": colour,
        "line": {"width": 0},
        "layer": "below",
    }


def _merged(windows: list[Fault], limit: int) -> list[list[float]]:
    """At most `limit` spans covering every window: overlapping ones are joined, then
    the closest neighbours, so a history with thousands of faults stays quick to draw."""
    spans: list[list[float]] = []
    for start, end in sorted((w.start, max(w.end, w.start + 0.05)) for w in windows):
        if spans and start <= spans[-1][1]:
            spans[-1][1] = max(spans[-1][1], end)
        else:
            spans.append([start, end])
    if len(spans) <= limit:
        return spans
    gaps = sorted(b[0] - a[1] for a, b in pairwise(spans))
    widest_joined = gaps[len(spans) - limit - 1]
    joined = [spans[0]]
    for span in spans[1:]:
        if span[0] - joined[-1][1] <= widest_joined:
            joined[-1][1] = span[1]
        else:
            joined.append(span)
    return joined


def _shading(windows: list[Fault]) -> dict[str, Any]:
    """Layout shapes and labels for the fault windows, staggered so labels rarely overlap;
    past MAX_LABELS windows, labels would be a smear (the nemesis log names them) and
    close windows are shaded as one."""
    if len(windows) > MAX_LABELS:
        fault = "rgba(224,49,49,0.10)"
        return {"shapes": [_rect(a, b, fault) for a, b in _merged(windows, MAX_LABELS * 4)]}
    shapes, notes = [], []
    for n, w in enumerate(windows):
        colour = "rgba(224,49,49,0.10)" if w.error is None else "rgba(134,142,150,0.15)"
        shapes.append(_rect(w.start, w.end, colour))
        text = w.label if w.error is None else f"{w.label} ({w.error})"
        notes.append(
            {
                "x": w.start,
                "y": 1,
                "yshift": 15 * (n % 2),
                "xref": "x",
                "yref": "paper",
                "text": text,
                "showarrow": False,
                "xanchor": "left",
                "yanchor": "bottom",
                "font": {"size": 10, "color": "#c92a2a"},
                "bgcolor": "rgba(255,255,255,0.7)",
            }
        )
    return {"shapes": shapes, "annotations": notes}


def _layout(title: str, windows: list[Fault], **extra: Any) -> dict[str, Any]:
    if len(windows) > MAX_LABELS:
        title += f" · {len(windows)} fault windows, close ones shaded as one (see the nemesis log)"
    return {
        "title": {"text": title, "font": {"size": 15}},
        "xaxis": {"title": {"text": "time since test start (s)"}},
        "margin": {"l": 70, "r": 20, "t": 80, "b": 50},
        "hovermode": "closest",
        **_shading(windows),
        **extra,
    }


def _thin(series: dict[tuple[str, str], list[tuple[float, float, int]]]) -> int:
    """Keep at most about MAX_POINTS points: series of up to MAX_POINTS/20 points (usually
    fail and info) stay whole, the others are evenly strided at one common rate, so the
    plot keeps their relative density. Returns how many points were dropped."""
    total = sum(map(len, series.values()))
    if total <= MAX_POINTS:
        return 0
    small = MAX_POINTS // 20
    big = sum(len(p) for p in series.values() if len(p) > small)
    rate = max(MAX_POINTS - (total - big), MAX_POINTS // 2) / big
    for key, points in series.items():
        if len(points) > small:
            keep = max(1, int(len(points) * rate))
            step = len(points) / keep
            series[key] = [points[int(k * step)] for k in range(keep)]
    return total - sum(map(len, series.values()))


def latency_scatter(calls: list[Call], windows: list[Fault]) -> tuple[dict[str, Any], int]:
    """Latency of each completed client call at its invoke time; (figure, points dropped)."""
    series: dict[tuple[str, str], list[tuple[float, float, int]]] = {}
    for c in calls:
        if c.done is not None:
            point = (c.inv.time / 1e9, max((c.done.time - c.inv.time) / 1e6, 1e-3), c.inv.index)
            series.setdefault((c.inv.f, c.type), []).append(point)
    dropped = _thin(series)
    by_count: dict[str, int] = {}
    for (f, _), points in series.items():
        by_count[f] = by_count.get(f, 0) + len(points)
    fs = sorted(by_count, key=lambda f: -by_count[f])
    rows = max(len(fs), 1)
    gap = 0.04
    axes: dict[str, Any] = {}
    data = []
    for row, f in enumerate(fs):
        name = "yaxis" if row == 0 else f"yaxis{row + 1}"
        top = 1 - row / rows
        axes[name] = {
            "domain": [max(top - 1 / rows + gap, 0), top - (gap if row else 0)],
            "type": "log",
            "dtick": 1,  # powers of ten only: minor labels crowd small subplots
            "title": {"text": f"{f} (ms)", "font": {"size": 11}},
            "anchor": "x",
        }
        for kind, (colour, symbol) in TYPE_STYLE.items():
            points = series.get((f, kind))
            if not points:
                continue
            data.append(
                {
                    "type": "scatter",
                    "mode": "markers",
                    "name": f"{f} {kind}",
                    "legendgroup": kind,
                    "x": [round(p[0], 4) for p in points],
                    "y": [round(p[1], 3) for p in points],
                    "customdata": [p[2] for p in points],
                    "yaxis": "y" if row == 0 else f"y{row + 1}",
                    "marker": {"color": colour, "symbol": symbol, "size": 5 if kind == "ok" else 7},
                    "hovertemplate": f"op %{{customdata}} {f} {kind}<br>"
                    "t=%{x:.3f}s latency=%{y:.1f}ms<extra></extra>",
                }
            )
    layout = _layout("Latency over time (click a point for the timeline)", windows, **axes)
    layout["xaxis"]["anchor"] = "y" if rows == 1 else f"y{rows}"
    layout["height"] = 140 + 170 * rows
    return {"data": data, "layout": layout}, dropped


def _buckets(end_s: float) -> tuple[float, list[float]]:
    width = max(1.0, end_s / MAX_BUCKETS)
    return width, [round((i + 0.5) * width, 3) for i in range(int(end_s / width) + 1)]


def _quantile(values: list[float], q: float) -> float:
    return values[min(len(values) - 1, int(q * len(values)))]


def rates_and_quantiles(
    calls: list[Call], windows: list[Fault], end_s: float
) -> tuple[dict[str, Any], dict[str, Any]]:
    """(latency quantiles per bucket of invoke time, completions per second per bucket)."""
    width, xs = _buckets(end_s)
    last = len(xs) - 1
    per_bucket = width * 1e9
    latency: dict[str, list[list[float]]] = defaultdict(lambda: [[] for _ in xs])
    done_per: dict[str, list[int]] = defaultdict(lambda: [0] * len(xs))
    for c in calls:
        done = c.done
        if done is None:
            continue
        if c.type == "ok":
            f = c.inv.f
            done_per[f][min(int(done.time / per_bucket), last)] += 1
            latency[f][min(int(c.inv.time / per_bucket), last)].append(
                (done.time - c.inv.time) / 1e6
            )
        else:
            done_per[c.type][min(int(done.time / per_bucket), last)] += 1
    colour = {f: F_COLOURS[n % len(F_COLOURS)] for n, f in enumerate(sorted(latency))}
    quantile_data = []
    for f, buckets in sorted(latency.items()):
        for bucket in buckets:
            bucket.sort()
        for name, q, dash in QUANTILES:
            quantile_data.append(
                {
                    "type": "scatter",
                    "mode": "lines+markers" if len(xs) <= 60 else "lines",
                    "name": f"{f} {name}",
                    "legendgroup": f,
                    "x": xs,
                    "y": [round(_quantile(b, q), 3) if b else None for b in buckets],
                    "line": {"color": colour[f], "dash": dash, "width": 1.5},
                    "marker": {"size": 3},
                    "connectgaps": False,
                }
            )
    rate_data = []
    for key, counts in sorted(done_per.items(), key=lambda kv: kv[0] in TYPE_STYLE):
        style = TYPE_STYLE.get(key)
        rate_data.append(
            {
                "type": "scatter",
                "mode": "lines",
                "name": f"{key} (all f)" if style else f"{key} ok",
                "x": xs,
                "y": [round(n / width, 3) for n in counts],
                "line": {"color": style[0] if style else colour.get(key, "#495057"), "width": 1.5},
            }
        )
    log_y = {"yaxis": {"type": "log", "dtick": 1, "title": {"text": "latency (ms)"}}}
    rate_y = {"yaxis": {"title": {"text": "completions / s"}, "rangemode": "tozero"}}
    title = f"Latency quantiles of ok ops per {width:g} s (by invoke time)"
    return (
        {"data": quantile_data, "layout": _layout(title, windows, height=420, **log_y)},
        {
            "data": rate_data,
            "layout": _layout(f"Throughput per {width:g} s bucket", windows, height=380, **rate_y),
        },
    )
