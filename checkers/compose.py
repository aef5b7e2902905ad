"""Composition of checkers, like Jepsen's `compose`, into the result of spec §5."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from functools import cache
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

from checkers.availability import check_availability
from checkers.ensemble import check_ensembles
from checkers.graph import check_graph
from checkers.history import History, Op, index_history, ops_from_dicts, read_ops
from checkers.ledger import FINDERS, check_ledgers
from checkers.liveness import check_liveness
from checkers.nemesis import check_nemesis
from checkers.perf import check_perf
from checkers.replication import check_replication
from checkers.result import FORMAT, UNKNOWN, merge_valid
from checkers.segments import SEGMENT_LINES, check_segments
from checkers.stats import check_stats, summary
from checkers.stream import check_streams

Checker = Callable[[History], dict[str, Any]]

CHECKERS: dict[str, Checker] = {
    "stats": check_stats,
    "perf": check_perf,
    "ledger": check_ledgers,
    "stream": check_streams,
    "graph": check_graph,
    "replication": check_replication,
    "nemesis": check_nemesis,
    "ensemble": check_ensembles,
    "availability": check_availability,
    "liveness": check_liveness,
}


@cache
def plugin_checkers() -> dict[str, Checker]:
    """Checkers other packages add through the `bkchaos.checkers` entry point, loaded at
    the first check (not while this package imports). One that cannot be loaded, or takes
    a built-in's name, is reported unknown with the reason, as a checker that raises is."""
    found: dict[str, Checker] = {}
    for entry in entry_points(group="bkchaos.checkers"):
        name = entry.name if entry.name not in CHECKERS else f"plugin:{entry.name}"
        try:
            if name != entry.name:
                raise ValueError(f"{entry.name!r} is a built-in checker's name: rename it")
            found[name] = entry.load()
        except Exception as exc:
            found[name] = _unusable(f"bkchaos.checkers plugin {entry.value}: {exc}")
    return found


def _unusable(reason: str) -> Checker:
    def check(h: History) -> dict[str, Any]:
        raise RuntimeError(reason)

    return check


ROOTS = (
    *FINDERS,
    "under-replicated",
    "bad-ensemble",
    "unreadable-after-heal",
    "stuck-after-heal",
    "writer-stuck-after-heal",
    "realtime-order",
)
"""Anomalies that say what went wrong with a ledger or stream, in the order to read them."""


def root_first(names: Iterable[str]) -> list[str]:
    """Anomaly names in reading order: root (per-ledger) anomalies first, then the rest,
    dependency cycles (G…) last, since a cycle often restates a root one. `anomaly_types`
    itself stays sorted (docs/history.md §5)."""
    rank = {name: n for n, name in enumerate(ROOTS)}
    return sorted(names, key=lambda n: (n.startswith("G"), rank.get(n, len(rank)), n))


def compose(checkers: dict[str, Checker]) -> Checker:
    """One checker running named sub-checkers; a sub-checker that raises is reported
    as `unknown` with its error, never a crash, and the others still run."""

    def run(h: History) -> dict[str, Any]:
        return _combine({name: _run(checker, h) for name, checker in checkers.items()}, h)

    return run


def _run(checker: Checker, h: History) -> dict[str, Any]:
    try:
        return checker(h)
    except Exception as exc:  # Jepsen's rule: a broken checker is unknown
        return {"valid": UNKNOWN, "error": f"{type(exc).__name__}: {exc}"}


def _combine(results: dict[str, dict[str, Any]], h: History) -> dict[str, Any]:
    """The result of spec §5 from the sub-checkers' results."""
    anomalies: dict[str, list[dict[str, Any]]] = {}
    for result in results.values():
        for name, cases in result.get("anomalies", {}).items():
            anomalies.setdefault(name, []).extend(cases)
    return {
        "format": FORMAT,
        "valid": merge_valid(r["valid"] for r in results.values()),
        "anomaly_types": sorted(anomalies),
        "anomalies": anomalies,
        "stats": summary(h),
        "checkers": results,
    }


def check(
    history: str | Path | History | Iterable[dict[str, Any] | Op],
    segment_lines: int | None = SEGMENT_LINES,
) -> dict[str, Any]:
    """Check a history file, an indexed history, or ops (dicts or Op), with CHECKERS and
    the installed plugins' checkers.

    A file or ops are checked streaming (`checkers.segments`), in segments of about
    `segment_lines` lines where the history allows clean cuts (None: one segment); the
    result is the same whatever the segments. Plugins get the whole indexed history.
    """
    if isinstance(history, History):
        return compose({**CHECKERS, **plugin_checkers()})(history)
    if isinstance(history, str | Path):
        path = history

        def source() -> Iterator[Op]:
            return read_ops(path)
    else:
        ops = history if isinstance(history, list | tuple) else list(history)

        def source() -> Iterator[Op]:
            return ops_from_dicts(ops)

    plugins = plugin_checkers()
    if plugins:
        return compose({**CHECKERS, **plugins})(index_history(source()))
    h, segments = check_segments(source, segment_lines)
    folded = segments.results(h)
    results = {
        name: folded[name] if name in folded else _run(checker, h)
        for name, checker in CHECKERS.items()
    }
    return _combine(results, h)
