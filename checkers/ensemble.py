"""`bad-ensemble` (docs/history.md §4): every fragment of every ensemble a history
reports names distinct bookies, as many as the ledger's ensemble size.

A fragment that names a bookie twice, or too few bookies, is a ledger that silently
holds fewer copies than it promises: the write set of some entry has fewer distinct
bookies than WQ, though every add is still acknowledged. The ensembles come from the
`ok` values of create, close and recover (histories without them have none to judge).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from checkers.history import History
from checkers.result import Case, case, collect


def bad_ensemble(h: History) -> Iterator[Case]:
    """A fragment naming a bookie twice, or not as many bookies as the ledger's ensemble
    size (known from its create); each distinct bad fragment once, at its first report."""
    seen: set[tuple[Any, int, tuple[str, ...]]] = set()
    for ledger, reports in h.ensembles.items():
        size = h.sizes.get(ledger)
        for call, fragments in reports:
            for first, bookies in fragments:
                key = (ledger, first, tuple(bookies))
                twice = sorted({b for b in bookies if bookies.count(b) > 1})
                short = size is not None and len(set(bookies)) != size
                if key in seen or not (twice or short):
                    continue
                seen.add(key)
                why = f"names {', '.join(twice)} twice" if twice else ""
                if short:
                    why += (" and " if why else "") + (
                        f"has {len(set(bookies))} distinct bookies for an ensemble of {size}"
                    )
                yield case(
                    f"the fragment of ledger {ledger} from entry {first} ({', '.join(bookies)}),"
                    f" as {call.inv.f} (op {call.ops[-1]}) reported it, {why}: its entries "
                    "are on fewer bookies than the ledger promises.",
                    call.ops,
                    ledger=ledger,
                    entry=first,
                    bookies=bookies,
                )


def check_ensembles(h: History) -> dict[str, Any]:
    """The `bad-ensemble` cases of every ensemble the history reports."""
    result = collect({"bad-ensemble": bad_ensemble(h)})
    result["ledgers_with_ensembles"] = len(h.ensembles)
    return result
