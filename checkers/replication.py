"""Replication: every entry of a closed ledger is on at least AQ bookies of its write set,
and its copies agree.

What the other checkers judge is what readers saw; an entry can read back fine and still
rest on one bookie, one lost disk away from `lost-append`. BookKeeper promises more: an
acknowledged entry was written to AQ bookies, and recovery writes every entry it recovers
back to its write set before it closes the ledger, so each entry up to a closed ledger's
last is on AQ bookies of the write set its metadata names. A ledger that falls short is
what BookKeeper's auditor calls *under-replicated*.

The final phase audits the copies (`audit` ops, docs/history.md §2): each bookie of each
entry's write set is asked for it, and says it has it, says it has not ("no such
entry"), or says nothing (no answer, an error, a copy that fails its digest). An entry
is `under-replicated` when so many bookies say they have not that fewer than AQ can hold
it, whatever the silent ones hold. Unbounded ledgers are not judged for it: terms end in
truncating no-ops, and which copies such a ledger must keep is reference 000's protocol,
which this checker does not model.

Copies that verify but differ are a `divergence` in any ledger: which one a reader gets
depends on which bookie answers first. A correct ledger never has them: one writer writes
each entry of a bounded ledger, and recovery writes back what it read; an unbounded
ledger's new term first truncates, on every bookie of the last fragment, what the old
term left beyond the entries it recovered (reference 000).

Only faults that destroy a bookie's data on purpose (`corrupt`, `wipe-reset`) may leave a
correct build short of copies; in a run with any, the audit is not judged (the result says
why), since an audit answer names a bookie's address and a fault names its node.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from checkers.history import History
from checkers.result import Case, case, collect

DATA_DESTROYING_FAULTS = frozenset({"corrupt", "wipe-reset"})
"""Nemesis ops after which a correct bookie may truly lack an entry it once held."""


def under_replicated(h: History) -> Iterator[Case]:
    """An entry of a closed ledger that more than WQ − AQ bookies of its write set say
    they do not have: fewer than AQ copies of it can exist."""
    for call in h.audits:
        done = call.done.value
        if done.unbounded:
            continue
        spare = done.wq - done.aq
        for entry, missing, unknown in done.lacking:
            if len(missing) <= spare:
                continue
            at_most = done.wq - len(missing)
            silent = f"; {', '.join(unknown)} did not answer" if unknown else ""
            yield case(
                f"entry {entry} of ledger {done.ledger}, closed at {done.last_entry}, is on "
                f"at most {at_most} of the {done.wq} bookies of its write set "
                f"({', '.join(missing)} said no such entry{silent}): fewer than its ack "
                f"quorum of {done.aq}",
                call.ops,
                ledger=done.ledger,
                entry=entry,
                missing=missing,
            )


def divergent_copies(h: History) -> Iterator[Case]:
    """An entry of a closed ledger whose bookies hold verified copies that differ."""
    for call in h.audits:
        done = call.done.value
        for entry, held in done.divergent or []:
            said = "; ".join(
                f"{bookie} holds {'a no-op' if p is None else repr(p)}"
                for bookie, p in sorted(held.items())
            )
            yield case(
                f"the copies of entry {entry} of ledger {done.ledger}, closed at "
                f"{done.last_entry}, differ: {said}. A reader gets whichever its first "
                "answering bookie holds.",
                call.ops,
                ledger=done.ledger,
                entry=entry,
                copies=held,
            )


def check_replication(h: History) -> dict[str, Any]:
    """`under-replicated` entries and `divergence` among copies in the audits of the final
    phase (module docstring)."""
    destroying = sorted({c.inv.f for c in h.nemesis} & DATA_DESTROYING_FAULTS)
    if destroying:
        return {
            "valid": True,
            "audited_ledgers": len(h.audits),
            "not_judged": f"the run destroyed bookie data on purpose ({', '.join(destroying)})",
        }
    result = collect({"under-replicated": under_replicated(h), "divergence": divergent_copies(h)})
    result["audited_ledgers"] = len(h.audits)
    return result
