"""What a reader needs next to an anomaly case to start debugging: the ledger's
ensemble (and the write set of the entry), the faults in force while the case's ops
ran, and a per-ledger roll-up before the individual cases.

The ensembles come from the `ok` values of create, close and recover (docs/history.md
§2); histories recorded before they carried them show none.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from harness.report.figures import Fault
from harness.report.run import Call


@dataclass(frozen=True)
class Ensembles:
    """A ledger's fragments as last reported (close or recover over create), and its WQ."""

    fragments: list[list[Any]]
    write_quorum: int | None

    def at(self, entry: Any) -> dict[str, Any] | None:
        """The fragment holding `entry` and the entry's write set (the `wq` bookies from
        position entry mod E, BookKeeper's round robin), or None if none covers it."""
        if type(entry) is not int:
            return None
        covering = [f for f in self.fragments if f[0] <= entry]
        if not covering:
            return None
        first, bookies = covering[-1]
        view: dict[str, Any] = {"first": first, "bookies": bookies}
        if self.write_quorum and bookies and 0 < self.write_quorum <= len(bookies):
            view["write_set"] = [
                bookies[(entry + i) % len(bookies)] for i in range(self.write_quorum)
            ]
        return view


def _key(ledger: Any) -> str:
    return json.dumps(ledger, sort_keys=True, default=str)


def ledger_ensembles(client: list[Call]) -> dict[str, Ensembles]:
    """Ledger (as `_key`) -> its ensembles, from the ok creates, closes and recovers."""
    found: dict[str, Ensembles] = {}
    for call in client:
        if call.type != "ok" or call.inv.f not in ("create", "close", "recover"):
            continue
        value = call.done.decoded()
        if not isinstance(value, dict) or not _well_formed(value.get("ensembles")):
            continue
        key = _key(value.get("ledger"))
        wq = value.get("wq") if type(value.get("wq")) is int else None
        known = found.get(key)
        found[key] = Ensembles(value["ensembles"], wq or (known.write_quorum if known else None))
    return found


def _well_formed(fragments: Any) -> bool:
    return isinstance(fragments, list) and all(
        isinstance(f, list) and len(f) == 2 and type(f[0]) is int and isinstance(f[1], list)
        for f in fragments
    )


def ensemble_of(case: dict[str, Any], ensembles: dict[str, Ensembles]) -> dict[str, Any] | None:
    """The ensemble behind a case (its ledger's, at its entry or else its first fragment)."""
    if "ledger" not in case:
        return None
    known = ensembles.get(_key(case["ledger"]))
    if known is None:
        return None
    view = known.at(case.get("entry"))
    if view is None and known.fragments:  # a case without an entry: the first fragment
        first, bookies = known.fragments[0]
        view = {"first": first, "bookies": bookies}
    return view


def faults_during(calls: list[Call], faults: list[Fault]) -> list[Fault]:
    """The faults in force at any moment between the first op of a case (say, the
    acknowledgement) and its last (say, the read that missed it)."""
    if not calls:
        return []
    start = min(c.inv.time for c in calls) / 1e9
    end = max((c.done or c.inv).time for c in calls) / 1e9
    return [f for f in faults if f.start <= end and f.end >= start]


def ledger_rollup(anomalies: dict[str, Any]) -> list[dict[str, Any]]:
    """Per ledger, most affected first: cases by anomaly, and the first and last entry
    the cases name (from the cases results.json keeps)."""
    rows: dict[str, dict[str, Any]] = {}
    for name, cases in anomalies.items():
        for case in cases:
            if "ledger" not in case:
                continue
            row = rows.setdefault(
                _key(case["ledger"]), {"ledger": case["ledger"], "counts": {}, "entries": []}
            )
            row["counts"][name] = row["counts"].get(name, 0) + 1
            if type(case.get("entry")) is int:
                row["entries"].append(case["entry"])
    out = []
    for row in rows.values():
        entries = row.pop("entries")
        row["total"] = sum(row["counts"].values())
        row["first_entry"] = min(entries) if entries else None
        row["last_entry"] = max(entries) if entries else None
        out.append(row)
    return sorted(out, key=lambda r: -r["total"])
