"""The `takeover-race` workload: concurrent takeovers of one unbounded stream."""

from __future__ import annotations

from tests.unit.test_workloads import complete, ctx
from workloads.takeover_race import RACERS, TakeoverRaceWorkload


def test_a_race_sends_every_free_worker_to_take_the_same_stream_over() -> None:
    w = TakeoverRaceWorkload(concurrency=4, race_fraction=1.0)
    create = w.next_op(ctx(0))
    assert create["f"] == "create" and create["value"]["mode"] == "unbounded"
    complete(w, 0, create, ledger=5, term=1)
    takers = [w.next_op(ctx(p)) for p in range(1, RACERS + 1)]
    assert [op["f"] for op in takers] == ["take-over"] * RACERS
    assert {op["value"]["ledger"] for op in takers} == {5}
    assert w.race is None  # each free worker joined once
    complete(w, 1, takers[0], term=2)
    complete(w, 2, takers[1], term=3)
    complete(w, 3, takers[2], "fail")  # lost to a newer term: gives the stream up
    # Nobody is told it was superseded: each writer appends in its own term until refused.
    terms = {p: w.next_op(ctx(p))["value"].get("term") for p in (0, 1, 2)}
    assert terms == {0: 1, 1: 2, 2: 3}
    assert 3 not in w.writing and 3 not in w.acquiring


def test_without_a_race_it_is_the_unbounded_workload() -> None:
    w = TakeoverRaceWorkload(concurrency=4, race_fraction=0.0)
    complete(w, 0, w.next_op(ctx(0)), ledger=5, term=1)
    assert w.next_op(ctx(1))["f"] == "create"  # the second stream, not a takeover
