"""The nemesis verdict, read from the history itself (docs/history.md §7).

A fault that did not take effect is an error, never a silent pass: a run whose faults
were not all proven tested less than it claims, so its verdict is `unknown`. The verdict
comes from the nemesis ops of the history, not from the controller's memory, so that
`bkchaos test` and a later `bkchaos check` of the same history always agree.

- a nemesis completion with an `error` (a fault, or a heal, that raised) is unproven;
- a fault start (any nemesis op that does not end a fault, `checkers.perf.is_healing`)
  whose completion carries no `proof`, or that never completed, is unproven.
"""

from __future__ import annotations

from typing import Any

from checkers.history import History
from checkers.perf import is_healing
from checkers.result import UNKNOWN


def unproven(h: History) -> list[str]:
    """One line per unproven nemesis op: `f: why` (the controller's own wording for an
    error, so results recorded before this checker existed read the same)."""
    found = []
    for call in h.nemesis:
        f, done = call.inv.f, call.done
        if done is None:
            if not is_healing(f):
                found.append(f"{f}: never completed (op {call.inv.index}), so never proven")
        elif done.error is not None:
            found.append(f"{f}: {done.error}")
        elif not is_healing(f) and (done.value is None or done.value.proof is None):
            found.append(f"{f}: op {done.index} completed without a proof")
    return found


def check_nemesis(h: History) -> dict[str, Any]:
    """`unknown` when a fault (or the final heal) is unproven, naming each; else valid.
    `faults` counts the nemesis ops that took effect (starts and stops)."""
    errors = unproven(h)
    faults = sum(  # nemesis ops that took effect, the final heal aside
        1 for c in h.nemesis if c.inv.f != "heal" and c.done is not None and c.done.error is None
    )
    return {"valid": UNKNOWN if errors else True, "faults": faults, "errors": errors}
