"""`in_order`, which hands a parallel search its results in the order its tests were drawn:
whatever order they finish in, the search sees the same walk; a decisive result stops the
tests after it; the clock stops the rest but keeps what finished."""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Iterator
from contextlib import closing
from typing import Any

from harness.runtime.sim import SimSpec
from harness.sim.workers import Inline, in_order


class LastStartedFirstDone:
    """A runner of `slots` workers where the test started last always finishes first (the
    worst order for a search that offers results as they arrive). A test's result is its
    seed."""

    def __init__(self, slots: int) -> None:
        self.slots = slots
        self.started: list[int] = []
        self.cancelled: list[int] = []
        self._running: list[tuple[int, SimSpec]] = []

    def start(self, key: int, spec: SimSpec) -> None:
        self.started.append(key)
        self._running.append((key, spec))

    def finished(self, timeout: float) -> list[tuple[int, dict[str, Any]]]:
        key, spec = self._running.pop()
        return [(key, {"seed": spec.seed})]

    def cancel(self, keys: Iterable[int]) -> None:
        stopped = set(keys)
        self.cancelled += sorted(stopped & self.running())
        self._running = [(k, s) for k, s in self._running if k not in stopped]

    def running(self) -> set[int]:
        return {key for key, _ in self._running}


def numbered(count: int) -> Iterator[tuple[int, SimSpec]]:
    return ((i, SimSpec(seed=i)) for i in range(count))


def test_results_come_in_the_order_drawn_whatever_order_they_finish_in() -> None:
    runner = LastStartedFirstDone(slots=3)
    with closing(in_order(runner, numbered(10), math.inf, lambda r: False)) as walk:
        assert [item for item, _, _ in walk] == list(range(10))
    assert sorted(runner.started) == list(range(10))


def test_a_test_is_drawn_only_once_the_one_ahead_places_before_it_was_yielded() -> None:
    drawn: list[int] = []
    yielded_when_drawn: list[int] = []
    yielded = 0

    def draws() -> Iterator[tuple[int, SimSpec]]:
        for i in range(8):
            drawn.append(i)
            yielded_when_drawn.append(yielded)
            yield i, SimSpec(seed=i)

    with closing(in_order(LastStartedFirstDone(2), draws(), math.inf, lambda r: False, 4)) as walk:
        for _ in walk:
            yielded += 1
    assert yielded_when_drawn == [0, 0, 0, 0, 1, 2, 3, 4]


def test_a_decisive_result_stops_the_tests_after_it() -> None:
    runner = LastStartedFirstDone(slots=3)
    walk = in_order(runner, numbered(10), math.inf, lambda r: r["seed"] == 2)
    with closing(walk):
        assert [item for item, _, _ in walk] == [0, 1, 2]  # the walk ends at it…
    assert runner.started == [0, 1, 2]  # …and once it came, nothing after it started


class HeadNeverFinishes(LastStartedFirstDone):
    """Every test but the first finishes at once; the first runs past any deadline."""

    def finished(self, timeout: float) -> list[tuple[int, dict[str, Any]]]:
        done = [(k, {"seed": s.seed}) for k, s in self._running if k != 0]
        if not done:
            time.sleep(timeout)
        self._running = [(k, s) for k, s in self._running if k == 0]
        return done


def test_at_the_deadline_what_finished_is_yielded_and_the_rest_stopped() -> None:
    runner = HeadNeverFinishes(slots=3)
    walk = in_order(runner, numbered(10), time.monotonic() + 0.2, lambda r: False, ahead=5)
    with closing(walk):
        assert [item for item, _, _ in walk] == [1, 2, 3, 4]
    assert runner.started == [0, 1, 2, 3, 4] and runner.cancelled == [0]


def test_no_test_starts_past_the_deadline() -> None:
    runner = LastStartedFirstDone(slots=3)
    with closing(in_order(runner, numbered(10), until=-1.0, decisive=lambda r: False)) as walk:
        assert list(walk) == []
    assert runner.started == []


def test_one_inline_worker_runs_each_test_only_when_its_result_is_asked_for() -> None:
    ran: list[int] = []

    def run(spec: SimSpec) -> dict[str, Any]:
        ran.append(spec.seed)
        return {"seed": spec.seed}

    walk = in_order(Inline(run), numbered(5), math.inf, lambda r: r["seed"] == 2)
    with closing(walk):
        for item, _, _ in walk:
            assert ran[-1] == item  # run just before it is yielded, not ahead
    assert ran == [0, 1, 2]
