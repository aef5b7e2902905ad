"""The simulation's BUGGIFY: seeded answers to the product's perturbation points.

As FoundationDB's BUGGIFY does, each point of bookie_image/buggify.py is switched on for
a whole run or not (a coin per point, so runs differ in *which* corners misbehave), and a
point that is on fires at some of the times it is asked. Delays are mostly short (a
reordering) and sometimes long enough to outlast a timeout. Every draw comes from one
stream named after the test's seed and used for nothing else, so a perturbed run replays
exactly, and turning perturbation on changes no other random draw of the run.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from bookie_image import buggify

ENABLED_SHARE = 0.5
"""The chance that a point is on in a run."""

FIRE_CHANCE: dict[str, float] = {
    "client-request-delay": 0.1,
    "client-spurious-timeout": 0.02,
    "client-drop-connection": 0.01,
    "client-request-lost": 0.01,
    "ensemble-change-delay": 0.5,
    "recovery-writeback-delay": 0.3,
    "recovery-close-delay": 0.5,
    "bookie-reply-delay": 0.05,
    "bookie-journal-delay": 0.05,
    "zk-delay": 0.1,
    "zk-lost-reply": 0.02,
}
"""How often a point that is on fires when asked: rarely where it is asked for every
request (a drop per request would stall everything), often where it is asked once per
recovery or ensemble change."""

SHORT_DELAY_S = 0.02
LONG_DELAY_S = 1.5
LONG_SHARE = 0.2
"""A delay is uniform below SHORT_DELAY_S (reorders messages), or with LONG_SHARE uniform
up to LONG_DELAY_S (outlasts the bookies' fencing of a writer, a ZooKeeper round, or a
read timeout of a client under load)."""


def stream(seed: int) -> random.Random:
    """The perturbation's own random stream for the test with `seed`."""
    return random.Random(f"buggify/{seed}")


@dataclass
class Perturbation:
    """One run's perturber: which points are on, and how often each one fired."""

    rng: random.Random
    enabled: frozenset[str] = frozenset()
    fired: Counter[str] = field(default_factory=Counter)
    armed: bool = False
    """Nothing fires until the cluster is up: a start-up that fails is no test of the
    protocol (the simulation arms it once the cluster settled)."""

    @classmethod
    def for_seed(cls, seed: int) -> Perturbation:
        rng = stream(seed)
        enabled = frozenset(p for p in sorted(buggify.POINTS) if rng.random() < ENABLED_SHARE)
        return cls(rng, enabled)

    def fires(self, point: str) -> bool:
        if not self.armed or point not in self.enabled:
            return False
        if self.rng.random() >= FIRE_CHANCE[point]:
            return False
        self.fired[point] += 1
        return True

    def delay(self, point: str) -> float:
        if not self.fires(point):
            return 0.0
        if self.rng.random() < LONG_SHARE:
            return self.rng.uniform(SHORT_DELAY_S, LONG_DELAY_S)
        return self.rng.uniform(0.0, SHORT_DELAY_S)

    def summary(self) -> dict[str, Any]:
        """What results.json records: the points on, and the fires per point."""
        return {"enabled": sorted(self.enabled), "fired": dict(sorted(self.fired.items()))}


@contextmanager
def perturbing(seed: int, on: bool) -> Iterator[Perturbation | None]:
    """Install the perturbation of the test with `seed` while the block runs (if `on`)."""
    if not on:
        yield None
        return
    perturbation = Perturbation.for_seed(seed)
    with buggify.installed(perturbation):
        yield perturbation
