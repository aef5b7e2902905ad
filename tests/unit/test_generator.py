"""Generators: composition, determinism under a seed, and exhaustion."""

from __future__ import annotations

import itertools
import random

from core.generator import (
    NOT_FOR_THIS_ASKER,
    PENDING,
    Context,
    Pending,
    Repeat,
    clients,
    each_process,
    interleave,
    mix,
    nemesis,
    phases,
    seq,
)


def counter(f: str) -> Repeat:
    numbers = itertools.count()
    return Repeat(lambda ctx: {"f": f, "value": next(numbers)})


def drain(gen, process=0, seed=1, step=0.0, outstanding=0, max_asks=10_000):
    rng, ops, t = random.Random(seed), [], 0.0
    for _ in range(max_asks):
        answer = gen.op(Context(t, process, rng, outstanding))
        if answer is None:
            return ops
        if not isinstance(answer, Pending):
            ops.append(answer)
        t += step
    raise AssertionError("generator never ended")


def test_limit_and_seq() -> None:
    assert drain(counter("a").limit(3)) == [{"f": "a", "value": i} for i in range(3)]
    assert drain(seq([{"f": "x"}, {"f": "y"}])) == [{"f": "x"}, {"f": "y"}]


def test_time_limit_counts_from_the_first_ask() -> None:
    ops = drain(counter("a").time_limit(1.0), step=0.25)
    assert len(ops) == 4


def test_stagger_spaces_ops_and_averages_its_period() -> None:
    ops = drain(counter("a").stagger(0.5).time_limit(100.0), step=0.01, max_asks=20_000)
    assert 150 < len(ops) < 250


def test_a_waiting_generator_says_when_its_next_op_is_due() -> None:
    """A worker sleeps until the due time instead of polling: the stagger's next op, capped
    by the time limit, the soonest of interleaved parts, and no clock when one part waits on
    something else (in-flight ops)."""
    rng = random.Random(1)
    staggered = counter("a").stagger(100.0).time_limit(5.0)
    assert staggered.op(Context(0.0, 0, rng))["f"] == "a"
    assert staggered.op(Context(0.1, 0, rng)) == Pending(5.0)  # next op after the end

    gen = counter("a").stagger(1.0)
    gen.op(Context(0.0, 0, rng))
    due = gen.op(Context(0.0, 0, rng))
    assert isinstance(due, Pending) and 0.0 < due.until < 2.0
    assert gen.op(Context(due.until, 0, rng))["f"] == "a"

    waits_on_ops = phases(counter("x").limit(1), counter("y"))
    waits_on_ops.op(Context(0.0, 0, rng))
    soon = interleave(clients(gen), clients(waits_on_ops))
    assert soon.op(Context(0.0, 0, rng, outstanding=1)) is PENDING
    timed = interleave(clients(gen), nemesis(counter("kill")))
    assert timed.op(Context(0.0, 0, rng)) == Pending(gen.next_time)


def test_same_seed_same_ops_different_seed_different_ops() -> None:
    def run(seed):
        return drain(mix(counter("a"), counter("b")).limit(50), seed=seed)

    assert run(7) == run(7)
    assert run(7) != run(8)


def test_mix_continues_past_an_exhausted_part() -> None:
    ops = drain(mix(counter("a").limit(2), counter("b").limit(5)))
    assert sorted(op["f"] for op in ops) == ["a"] * 2 + ["b"] * 5


def test_phases_wait_for_outstanding_ops() -> None:
    gen = phases(counter("a").limit(1), counter("b").limit(1))
    rng = random.Random(1)
    assert gen.op(Context(0, 0, rng))["f"] == "a"
    assert gen.op(Context(0, 0, rng, outstanding=1)) is PENDING
    assert gen.op(Context(0, 0, rng, outstanding=0))["f"] == "b"


def test_clients_and_nemesis_are_routed() -> None:
    gen = interleave(clients(counter("append").limit(3)), nemesis(counter("kill").limit(1)))
    rng = random.Random(1)
    assert gen.op(Context(0, "nemesis", rng))["f"] == "kill"
    assert gen.op(Context(0, 0, rng))["f"] == "append"
    assert gen.op(Context(0, "nemesis", rng)) is NOT_FOR_THIS_ASKER  # the clients' part lives
    assert [gen.op(Context(0, 1, rng))["f"] for _ in range(2)] == ["append", "append"]
    assert gen.op(Context(0, 1, rng)) is None
    assert gen.op(Context(0, "nemesis", rng)) is None


def test_each_process_sequences_independently() -> None:
    gen = each_process(lambda p: seq([{"f": "create", "p": p}, {"f": "append", "p": p}]))
    rng = random.Random(1)
    got = [gen.op(Context(0, p, rng)) for p in (0, 1, 0, 1)]
    assert [(o["f"], o["p"]) for o in got] == [
        ("create", 0),
        ("create", 1),
        ("append", 0),
        ("append", 1),
    ]
    assert gen.op(Context(0, 0, rng)) is None
