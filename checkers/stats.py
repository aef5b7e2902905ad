"""Counts (Jepsen's stats checker): by f and type, per ledger, and the result's `stats`."""

from __future__ import annotations

from collections import Counter
from operator import attrgetter
from typing import Any

from checkers.history import History
from checkers.ledger import unchecked_ledgers

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
        "invoke": len(h.calls) + len(h.nemesis),
        **{kind: types[kind] for kind in ("ok", "fail", "info")},
        "ledgers": len(h.ledgers),
        "unchecked_ledgers": unchecked_ledgers(h),
        "appends_ok": sum(map(len, h.acked.values())),
    }


def check_stats(h: History) -> dict[str, Any]:
    """Client-op counts by f and completion type; unknown fs are counted, not judged."""
    by_f: dict[str, dict[str, int]] = {}
    for (f, kind), n in sorted(h.counts.items()):
        by_f.setdefault(f, dict.fromkeys(("ok", "fail", "info"), 0))[kind] = n
    return {
        "valid": True,
        "by_f": by_f,
        "unknown_f": [f for f in by_f if f not in KNOWN_F],
        "nemesis": len(h.nemesis),
        "acked_by_ledger": [[ledger, len(acked)] for ledger, acked in h.acked.items()],
    }
