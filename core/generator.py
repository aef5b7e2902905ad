"""Composable, seeded operation generators, in the spirit of Jepsen's `generator`.

A generator is asked, again and again, for the next operation for one process at one
moment; it answers an op (a dict with at least "f"), a `Pending` (nothing for now: ask
again at its `until`, or soon — `PENDING` — when what it waits for is not the clock) or
`None` (exhausted, for good). Saying when the next op is due lets a worker sleep until
then rather than poll, which is most of what an idle simulated second costs.
Generators are small values combined with methods (`.limit(n)`, `.time_limit(s)`,
`.stagger(s)`, `.then(g)`) and functions (`mix`, `phases`, `clients`, `nemesis`,
`each_process`, `interleave`).

Randomness comes only from `Context.rng`, one seeded `random.Random` per test, and time
only from `Context.time`, so the same seed and the same sequence of asks give the same
ops. Stateful combinators hold their state in the instance: build a fresh generator per
run (a test stores the recipe, not the generator).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

Op = dict[str, Any]


@dataclass(frozen=True)
class Pending:
    """Nothing for this asker now. `until`: the generator time before which the answer
    cannot change (math.inf: not while the generator lives); None: it waits on something
    other than the clock (in-flight ops, a workload's state), so ask again soon."""

    until: float | None = None

    def __repr__(self) -> str:
        return "PENDING" if self.until is None else f"Pending(until={self.until})"


PENDING = Pending()
"""Nothing to do right now; ask again soon."""

NOT_FOR_THIS_ASKER = Pending(math.inf)
"""What a generator for other processes answers: only the whole run's end changes it."""

Answer = Any  # Op | Pending | None


def sooner(a: Pending, b: Pending) -> Pending:
    """The earlier of two waits; one that is not on the clock is the earliest of all."""
    if a.until is None or b.until is None:
        return PENDING
    return a if a.until <= b.until else b


@dataclass
class Context:
    """What a generator may look at: the clock, who asks, the seeded randomness."""

    time: float
    process: int | str
    rng: random.Random
    outstanding: int = 0
    """Operations invoked and not yet completed (phases wait for zero)."""

    @property
    def is_nemesis(self) -> bool:
        return self.process == "nemesis"


class Generator:
    """Base: subclasses implement `op`. Combinators are methods so recipes read left to right."""

    def op(self, ctx: Context) -> Answer:
        raise NotImplementedError

    def limit(self, n: int) -> Generator:
        return Limit(self, n)

    def time_limit(self, seconds: float) -> Generator:
        return TimeLimit(self, seconds)

    def stagger(self, seconds: float) -> Generator:
        return Stagger(self, seconds)

    def then(self, other: Generator) -> Generator:
        return phases(self, other)


@dataclass
class Repeat(Generator):
    """An endless source: `make(ctx)` builds each op (a workload's op function)."""

    make: Callable[[Context], Op]

    def op(self, ctx: Context) -> Answer:
        return self.make(ctx)


@dataclass
class Once(Generator):
    """Exactly one op, then exhausted."""

    value: Op
    done: bool = False

    def op(self, ctx: Context) -> Answer:
        if self.done:
            return None
        self.done = True
        return dict(self.value)


def seq(ops: Iterable[Op | Generator]) -> Generator:
    """Each item in turn (plain dicts are one-op generators)."""
    return Phases([o if isinstance(o, Generator) else Once(o) for o in ops], wait=False)


@dataclass
class Limit(Generator):
    inner: Generator
    remaining: int

    def op(self, ctx: Context) -> Answer:
        if self.remaining <= 0:
            return None
        answer = self.inner.op(ctx)
        if answer is not None and not isinstance(answer, Pending):
            self.remaining -= 1
        return answer


@dataclass
class TimeLimit(Generator):
    """Exhausted `seconds` after it is first asked."""

    inner: Generator
    seconds: float
    start: float | None = None

    def op(self, ctx: Context) -> Answer:
        if self.start is None:
            self.start = ctx.time
        end = self.start + self.seconds
        if ctx.time >= end:
            return None
        answer = self.inner.op(ctx)
        if isinstance(answer, Pending) and answer.until is not None and answer.until > end:
            return Pending(end)
        return answer


@dataclass
class Stagger(Generator):
    """Ops spaced by a uniform random delay in [0, 2·seconds): on average one per `seconds`."""

    inner: Generator
    seconds: float
    next_time: float | None = None

    def op(self, ctx: Context) -> Answer:
        if self.next_time is not None and ctx.time < self.next_time:
            return Pending(self.next_time)
        answer = self.inner.op(ctx)
        if answer is not None and not isinstance(answer, Pending):
            self.next_time = ctx.time + ctx.rng.uniform(0, 2 * self.seconds)
        return answer


@dataclass
class Mix(Generator):
    """A random choice among the generators that are not exhausted, per op."""

    gens: list[Generator]

    def op(self, ctx: Context) -> Answer:
        live = list(self.gens)
        while live:
            gen = ctx.rng.choice(live)
            answer = gen.op(ctx)
            if answer is None:
                self.gens.remove(gen)
                live.remove(gen)
                continue
            return answer
        return None


def mix(*gens: Generator) -> Generator:
    return Mix(list(gens))


@dataclass
class Phases(Generator):
    """One generator after another; with `wait`, the next starts once nothing is in flight."""

    gens: list[Generator]
    wait: bool = True

    def op(self, ctx: Context) -> Answer:
        while self.gens:
            answer = self.gens[0].op(ctx)
            if answer is not None:
                return answer
            if self.wait and ctx.outstanding > 0:
                return PENDING
            self.gens.pop(0)
        return None


def phases(*gens: Generator) -> Generator:
    return Phases(list(gens))


@dataclass
class OnProcesses(Generator):
    """Answers only the processes `accept` admits; others wait while it lives."""

    accept: Callable[[int | str], bool]
    inner: Generator

    def op(self, ctx: Context) -> Answer:
        if not self.accept(ctx.process):
            return NOT_FOR_THIS_ASKER
        return self.inner.op(ctx)


def clients(gen: Generator) -> Generator:
    return OnProcesses(lambda p: p != "nemesis", gen)


def nemesis(gen: Generator) -> Generator:
    return OnProcesses(lambda p: p == "nemesis", gen)


@dataclass
class EachProcess(Generator):
    """A separate generator per process, built on first ask: per-process sequencing."""

    make: Callable[[int | str], Generator]
    per_process: dict[int | str, Generator] = field(default_factory=dict)

    def op(self, ctx: Context) -> Answer:
        gen = self.per_process.get(ctx.process)
        if gen is None:
            gen = self.per_process[ctx.process] = self.make(ctx.process)
        return gen.op(ctx)


def each_process(make: Callable[[int | str], Generator]) -> Generator:
    return EachProcess(make)


@dataclass
class Interleave(Generator):
    """Client and nemesis generators side by side; exhausted when every part is.

    A part that has nothing for this asker (a `Pending`) does not end the whole: the asker
    waits for the soonest part; the combined generator only ends once no part has anything
    left for anyone.
    """

    parts: list[Generator]

    def op(self, ctx: Context) -> Answer:
        wait: Pending | None = None
        for gen in list(self.parts):
            answer = gen.op(ctx)
            if answer is None:
                self.parts.remove(gen)
            elif not isinstance(answer, Pending):
                return answer
            else:
                wait = answer if wait is None else sooner(wait, answer)
        return wait


def interleave(*gens: Generator) -> Generator:
    return Interleave(list(gens))


class Workload(Protocol):
    """What the controller drives: an op source that learns from completions and names the
    ops of the final phase (workloads/ implements it)."""

    def generator(self) -> Generator: ...
    def observe(
        self, process: int, op: dict[str, Any], kind: str, value: Any, error: str | None
    ) -> None: ...
    def final_ops(self) -> Iterable[dict[str, Any]]: ...
