"""The soak's epoch ends (workloads/soak.py): a failed final op is tried again, backing
off, so that its attempts outlast a fault instead of failing back to back."""

from __future__ import annotations

import itertools
import random
from typing import Any

from core.generator import Context, Pending
from workloads.soak import FINAL_ATTEMPTS, RETRY_MAX_S, Soak


class OneReadPerEpoch:
    """A workload whose epoch ends with one closed read, and which has nothing else to do."""

    def __init__(self, epoch: int) -> None:
        self.read = {"f": "read", "value": {"ledger": epoch, "closed": True}}

    def generator(self) -> Any:
        return self

    def op(self, ctx: Context) -> Pending:
        return Pending(ctx.time + 1.0)

    def final_ops(self) -> list[dict[str, Any]]:
        return [self.read]

    def observe(self, *_: Any) -> None:
        pass


def _attempt_times(fails: int) -> list[float]:
    """When the first epoch's closed read is invoked, when it fails `fails` times first."""
    soak, rng, times, now = Soak(OneReadPerEpoch, epoch_s=1.0), random.Random(0), [], 1.0
    while soak.epoch == 0 and now < 1000:
        op = soak.next_op(Context(now, 0, rng))
        if isinstance(op, dict):
            times.append(now)
            failed = len(times) <= fails
            soak.observe(0, op, "fail" if failed else "ok", None, "ETIMEOUT" if failed else None)
        elif op.until is not None:
            now = op.until
        else:
            now += 0.01
    return times


def test_a_failed_final_op_backs_off_and_an_ok_one_ends_the_epoch() -> None:
    times = _attempt_times(fails=3)
    assert len(times) == 4  # three failures, then ok: the next epoch starts
    gaps = [round(b - a, 2) for a, b in itertools.pairwise(times)]
    assert gaps == [0.25, 0.5, 1.0]


def test_the_attempts_of_a_final_op_outlast_a_fault_then_give_up() -> None:
    times = _attempt_times(fails=FINAL_ATTEMPTS)
    assert len(times) == FINAL_ATTEMPTS  # then the epoch goes on without it
    assert times[-1] - times[0] > 30  # back to back they took a second
    assert max(b - a for a, b in itertools.pairwise(times)) <= RETRY_MAX_S
