"""Soak runs (`bkchaos test --soak DURATION`): one workload after another, for hours.

A soak's history is too long to check in one piece, and its bugs hide in churn: so the
run is cut into epochs of `epoch_s` seconds, each with a fresh workload (new ledgers,
streams named for the epoch, payloads from one counter so that they stay unique). At
the end of an epoch no new op starts; once every op in flight has completed, the epoch's
final ops run one at a time (a closed read of every ledger, then the audits), each
retried, backing off, until it is ok or has failed `FINAL_ATTEMPTS` times, while the
faults go on; then the next epoch starts. Each epoch's end is a place where the streaming
checker can cut the history (docs/history.md §9), so the check needs memory for one epoch,
not the run.
The run's own final phase (after the heal) runs the last epoch's final ops, or those it
had not run yet.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from core.generator import PENDING, Context, Generator, Pending, Repeat

Op = dict[str, Any]

FINAL_ATTEMPTS = 10
"""Attempts of each of an epoch's final ops (faults may still hold) before going on."""
RETRY_FIRST_S = 0.25
RETRY_MAX_S = 8.0
"""A failed final op is tried again after RETRY_FIRST_S, doubling up to RETRY_MAX_S: the
attempts span about 50 s, longer than a drawn fault holds. Back to back they took a
second, so a bookie killed for a few seconds left its ledgers unchecked (7 of 1,140 in a
one-hour docker soak, 2026-11-27)."""


@dataclass
class Soak:
    """The Workload protocol over epochs of the workload `make(epoch)` builds."""

    make: Callable[[int], Any]
    epoch_s: float
    epoch: int = 0
    current: Any = None
    epochs_done: int = 0
    _gen: Generator | None = None
    _started: float | None = None
    _closing: Iterator[Op] | None = None
    _final: Op | None = None
    _in_flight: bool = False
    _attempts: int = 0
    _wait_s: float = 0.0
    """Set by a failed final op: how long its next attempt waits."""
    _retry_at: float = 0.0

    def __post_init__(self) -> None:
        self.current = self.make(0)
        self._gen = self.current.generator()

    def generator(self) -> Generator:
        return Repeat(self.next_op)

    def next_op(self, ctx: Context) -> Op | Pending:
        if self._started is None:
            self._started = ctx.time
        if self._closing is None and ctx.time < self._started + self.epoch_s:
            return self._gen.op(ctx)  # type: ignore[union-attr, return-value]
        if self._closing is None:  # the epoch is over: let what is in flight complete
            if ctx.outstanding:
                return PENDING
            self._closing = iter(self.current.final_ops())
            self._final = next(self._closing, None)
        if self._in_flight:
            return PENDING
        if self._wait_s:
            self._retry_at, self._wait_s = ctx.time + self._wait_s, 0.0
        if ctx.time < self._retry_at:
            return Pending(self._retry_at)
        if self._final is None:
            self._next_epoch(ctx.time)
            return self._gen.op(ctx)  # type: ignore[union-attr, return-value]
        self._in_flight = True
        return self._final

    def _next_epoch(self, now: float) -> None:
        self.epochs_done += 1
        self.epoch += 1
        self.current = self.make(self.epoch)
        self._gen = self.current.generator()
        self._started, self._closing, self._attempts = now, None, 0

    def observe(self, process: int, op: Op, kind: str, value: Any, error: str | None) -> None:
        self.current.observe(process, op, kind, value, error)
        if op is not self._final:
            return
        self._in_flight = False
        self._attempts += 1
        if kind == "ok" or self._attempts >= FINAL_ATTEMPTS:
            self._final, self._attempts = next(self._closing, None), 0  # type: ignore[arg-type]
        else:
            self._wait_s = min(RETRY_MAX_S, RETRY_FIRST_S * 2 ** (self._attempts - 1))

    def final_ops(self) -> Iterable[Op]:
        """The current epoch's final ops, or what is left of them if it was closing: an
        earlier epoch's ledger read again would tie the history's segments together."""
        if self._closing is None:
            return self.current.final_ops()
        return [] if self._final is None else [self._final, *self._closing]
