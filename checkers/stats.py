"""Counts (Jepsen's stats checker): by f and type, per ledger, and the result's `stats`."""

from __future__ import annotations

from collections import Counter
from operator import attrgetter
from typing import Any

from checkers.history import History
from checkers.ledger import unchecked_ledgers
from checkers.result import UNKNOWN

_TYPE = attrgetter("type")
KNOWN_F = frozenset({"create", "append", "read", "read-lac", "close", "recover", "audit"})


def summary(h: History) -> dict[str, Any]:
    """The top-level `stats` of the result (spec §5), over client and nemesis ops.

    Never-completed invokes count as info, so invoke == ok + fail + info.
    """
    types = Counter(map(_TYPE, h.nemesis))
    for (_, kind), n in h.counts.items():
        types[kind] += n
    return {
        "ops": h.lines,
        "invoke": h.client_calls + len(h.nemesis),
        **{kind: types[kind] for kind in ("ok", "fail", "info")},
        "ledgers": len(h.ledgers),
        "unchecked_ledgers": unchecked_ledgers(h),
        "appends_ok": sum(h.acked_counts.values()),
    }


def nothing_recognised(h: History, by_f: dict[str, Any]) -> str | None:
    """Why nothing in the history can be judged, or None: a history without one client op
    of a known f would otherwise check as a false green (docs/history.md §7)."""
    if any(f in KNOWN_F for f in by_f):
        return None
    expected = ", ".join(sorted(KNOWN_F))
    if not h.lines:
        return f"the history has no ops; expected client ops with f in: {expected}"
    seen = ", ".join(by_f) or "none (nemesis ops only)"
    return f"no client op has a known f (expected one of: {expected}; found: {seen})"


def check_stats(h: History) -> dict[str, Any]:
    """Client-op counts by f and completion type; unknown fs are counted, not judged, and
    a history with no known client op at all is `unknown`."""
    by_f: dict[str, dict[str, int]] = {}
    for (f, kind), n in sorted(h.counts.items()):
        by_f.setdefault(f, dict.fromkeys(("ok", "fail", "info"), 0))[kind] = n
    why = nothing_recognised(h, by_f)
    return {
        "valid": True if why is None else UNKNOWN,
        **({} if why is None else {"unknown_why": why}),
        "by_f": by_f,
        "unknown_f": [f for f in by_f if f not in KNOWN_F],
        "nemesis": len(h.nemesis),
        "acked_by_ledger": [[ledger, n] for ledger, n in h.acked_counts.items()],
    }
