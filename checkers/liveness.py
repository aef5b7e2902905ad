"""`stuck-after-heal` (docs/history.md §4): a healthy cluster that cannot make progress;
`writer-stuck-after-heal`: a writer the run left open that cannot finish.

The other checkers judge what was acknowledged and read, so a product that stops
acknowledging anything passes them: a history of timeouts is a valid history. Every test
therefore ends, after its final reads, with a progress check (docs/history.md §2, ops
carrying `after_heal`): a few attempts, each creating a fresh ledger, appending to it,
closing it and reading it back, then creating a second one, appending and reading it
closed from another client (a recovery of a ledger whose writer is still open). An
attempt stops at its first op that is not `ok`; the next one starts on new ledgers.

The anomaly is every attempt failing after the final heal completed with its proof
(every node up and serving). What counts as failing is recorded in the ops themselves
(`after_heal.idle`), so the verdict is a function of the history alone:
- `idle` (the simulation: one process, virtual time, the perturbation off while the
  check runs, no fault in force): nothing but the product can delay an op, so a timeout or
  an unknown outcome fails the attempt as surely as an error does;
- not idle (real processes on a machine that may be loaded): only an error in which the
  cluster refused what a healthy cluster must do for a ledger nobody else knows counts
  (`DEFINITE`); a timeout may be load, and then the run is not judged here.

Where the check is idle, the write handles the run left open are closed first (ops
carrying `after_heal.held`): a close that never completes is a writer whose adds or
ensemble change hang for ever — the run's timeouts of it were valid, and the final reads
recovered its ledger without it, so only asking it to finish shows it. Any answer, an
error included (fenced by the final reads' recovery), is not stuck.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from checkers.availability import judged_heal
from checkers.history import Call, History
from checkers.result import Case, case, collect

DEFINITE = frozenset({"EFENCED", "ELEDGERCLOSED", "ENOLEDGER", "ENOENTRY", "EDIGEST", "EUA"})
"""Errors that fail a progress attempt on real processes: for a ledger only this check
writes, a correct cluster answers none of them. A timeout, `ENOTENOUGHBOOKIES` (a real
disk may have filled and turned a bookie read-only, which BookKeeper does on purpose),
`EMETADATA` or `ERECOVERY` may be the machine, not the product."""


def progress_attempts(h: History, healed: int) -> dict[int, list[Call]]:
    """The progress check's calls invoked after op `healed`, by attempt, in invoke order."""
    attempts: dict[int, list[Call]] = {}
    for call in sorted(h.progress, key=lambda c: c.inv.index):
        tag = call.inv.value.after_heal if call.inv.value is not None else None
        if isinstance(tag, dict) and "attempt" in tag and call.inv.index > healed:
            attempts.setdefault(tag.get("attempt"), []).append(call)
    return attempts


def stuck_writers(h: History, heal: Call) -> Iterator[Case]:
    """One case per close of a write handle the run left open (`after_heal.held`) that
    never completed where nothing but the product can delay it (`idle`)."""
    for call in h.progress:
        tag = call.inv.value.after_heal if call.inv.value is not None else None
        if not (isinstance(tag, dict) and tag.get("held") and tag.get("idle") is True):
            continue
        hung = call.done is None or call.done.error == "ETIMEOUT"
        if call.inv.f == "close" and call.inv.index > heal.done.index and hung:
            ledger = call.inv.value.ledger
            yield case(
                f"after the final heal (op {heal.done.index}), with every node up and nothing "
                f"else running, the close of ledger {ledger} by the writer the run left "
                f"holding it (op {call.inv.index}) never completed: the writer cannot "
                "finish what it started (adds or an ensemble change that never end).",
                [*heal.ops, *call.ops],
                ledger=ledger,
            )


def _first_failure(calls: list[Call]) -> Call | None:
    return next((c for c in calls if c.type != "ok"), None)


def _counts(failure: Call, idle: bool) -> bool:
    """Whether `failure` fails its attempt under the check's rule (module docstring)."""
    if idle:
        return True
    error = failure.done.error if failure.done is not None else None
    return failure.type == "fail" and error in DEFINITE


def _describe(number: Any, failure: Call) -> str:
    error = failure.done.error if failure.done is not None else None
    outcome = "never completed" if failure.done is None else f"{failure.type} {error or ''}"
    return f"attempt {number}: {failure.inv.f} (op {failure.inv.index}) {outcome.strip()}"


def stuck_after_heal(h: History, heal: Call, attempts: dict[int, list[Call]]) -> Iterator[Case]:
    """One case if every attempt of the progress check failed under its rule."""
    failures = {n: _first_failure(calls) for n, calls in attempts.items()}
    if any(f is None for f in failures.values()):
        return
    idle = all(c.inv.value.after_heal.get("idle") is True for cs in attempts.values() for c in cs)
    if not all(_counts(f, idle) for f in failures.values() if f is not None):
        return
    said = "; ".join(_describe(n, f) for n, f in failures.items() if f is not None)
    where = (
        "with every node up and nothing else running"
        if idle
        else "with every node up, each refused with an error a healthy cluster never gives"
    )
    yield case(
        f"after the final heal (op {heal.done.index}), {where}, all {len(attempts)} "
        f"attempts to create a ledger, append, close and read it back failed: {said}.",
        [*heal.ops, *(i for f in failures.values() if f is not None for i in f.ops)],
        attempts=len(attempts),
        idle=idle,
    )


def check_liveness(h: History) -> dict[str, Any]:
    """`stuck-after-heal` (module docstring); says why when it cannot judge."""
    heal = judged_heal(h)
    if isinstance(heal, dict):
        return heal
    attempts = progress_attempts(h, heal.done.index)
    if not attempts:
        writers = collect({"writer-stuck-after-heal": stuck_writers(h, heal)})
        return {**writers, "not_judged": "no progress check after the final heal"}
    result = collect(
        {
            "writer-stuck-after-heal": stuck_writers(h, heal),
            "stuck-after-heal": stuck_after_heal(h, heal, attempts),
        }
    )
    passed = [n for n, calls in attempts.items() if _first_failure(calls) is None]
    return {**result, "attempts": len(attempts), "passed_at": passed[0] if passed else None}
