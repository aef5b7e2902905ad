"""Nemeses built from one test seed draw independent random streams that still replay."""

from __future__ import annotations

from nemesis.base import stream
from nemesis.clock import ClockNemesis
from nemesis.disk import CorruptNemesis
from nemesis.net import PartitionNemesis


def first_draws(seed: int) -> dict[str, list[int]]:
    nemeses = {
        "partition": PartitionNemesis(runtime=None, seed=seed),  # type: ignore[arg-type]
        "corrupt": CorruptNemesis(runtime=None, seed=seed),  # type: ignore[arg-type]
        "clock": ClockNemesis(runtime=None, seed=seed),  # type: ignore[arg-type]
    }
    return {name: [n.rng.randrange(2**32) for _ in range(4)] for name, n in nemeses.items()}


def test_nemeses_with_one_seed_draw_different_numbers() -> None:
    draws = first_draws(42)
    assert len({tuple(d) for d in draws.values()}) == 3, draws


def test_the_same_seed_replays_every_stream() -> None:
    assert first_draws(7) == first_draws(7)
    assert first_draws(7) != first_draws(8)


def test_a_named_stream_does_not_depend_on_the_process() -> None:
    """blake2b, not hash(): PYTHONHASHSEED and the interpreter cannot move it."""
    assert stream(1, "partition").randrange(2**32) == 4293924507
