"""`unreadable-after-heal` (docs/history.md §4): acknowledged data that a healthy
cluster cannot serve.

Every test ends with a `heal` that undoes every fault and waits until the cluster serves
again; its completion carries a proof, or an error (then the run is unknown, and this
checker judges nothing). After it, the final phase reads every ledger closed, which
recovers it if need be. A ledger with `ok` appends whose closed reads (and recoveries)
after that heal all failed, the last with a definite error, is the anomaly: with every
node up, BookKeeper must serve what it acknowledged.

Three things keep it from crying wolf:
- only errors in which bookies or the metadata answered that the data is not there, or
  not intact, count (`DEFINITE`); a timeout, an `info`, a recovery that gave up for want
  of answers (`ERECOVERY`), a lost ZooKeeper session (`EMETADATA`) or the agent's own
  refusals say nothing of the data, so that ledger stays unchecked and the run unknown;
- a run with a data-destroying fault (`checkers.replication.DATA_DESTROYING_FAULTS`, the
  copy audit's rule) may truly have lost entries on a correct build: not judged.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from checkers.history import Call, History
from checkers.replication import DATA_DESTROYING_FAULTS
from checkers.result import Case, case, collect

DEFINITE = frozenset({"ENOLEDGER", "ENOENTRY", "EDIGEST", "EIO"})
"""Errors in which the cluster answered that the data is gone or damaged. Anything else
(a timeout, ERECOVERY from unanswered fencing or reads, EMETADATA, an unexpected error's
class name) may only mean that nobody answered: never judged."""


def final_heal(h: History) -> Call | None:
    """The last `heal`, if it completed with its proof and no error; else None."""
    heals = [c for c in h.nemesis if c.inv.f == "heal"]
    if not heals:
        return None
    heal = heals[-1]
    done = heal.done
    if done is None or done.error is not None or done.value is None:
        return None
    return heal if done.value.proof is not None else None


def unreadable_after_heal(h: History, heal: Call) -> Iterator[Case]:
    """A ledger with ok appends whose closed reads and recoveries after the final heal all
    failed, the last with a definite error."""
    healed = heal.done.index
    for ledger, acked in h.acked_counts.items():
        after = [c for c in h.closings.get(ledger, ()) if c.inv.index > healed]
        if not after or any(c.type == "ok" for c in after):
            continue
        last = after[-1]
        error = last.done.error if last.done is not None else None
        if last.type != "fail" or error not in DEFINITE:
            continue
        yield case(
            f"ledger {ledger} has {acked} acknowledged append(s), but after "
            f"the final heal (op {heal.done.index}) with every node up, its "
            f"{len(after)} closed read(s) or recoveries failed, the last (op "
            f"{last.inv.index}, {last.inv.f}) with {error}.",
            [*heal.ops, *(i for c in after for i in c.ops)],
            ledger=ledger,
            error=error,
        )


def judged_heal(h: History) -> Call | dict[str, Any]:
    """The final heal that the after-heal checkers (this one and `checkers.liveness`)
    judge from, or their result when they cannot judge, saying why."""
    destroying = sorted({c.inv.f for c in h.nemesis} & DATA_DESTROYING_FAULTS)
    if destroying:
        why = f"the run destroyed bookie data on purpose ({', '.join(destroying)})"
        return {"valid": True, "not_judged": why}
    heal = final_heal(h)
    if heal is None:
        return {"valid": True, "not_judged": "no final heal completed with its proof"}
    return heal


def check_availability(h: History) -> dict[str, Any]:
    """`unreadable-after-heal` (module docstring); says why when it cannot judge."""
    heal = judged_heal(h)
    if isinstance(heal, dict):
        return heal
    return collect({"unreadable-after-heal": unreadable_after_heal(h, heal)})
