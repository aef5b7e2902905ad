"""The bookie's view of time and of blocking work, behind small interfaces.

Why: the same bookie code should later run inside a deterministic simulation, which
replaces the clock and runs "blocking" work inline instead of on a thread.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Protocol, TypeVar

T = TypeVar("T")


class Clock(Protocol):
    def time(self) -> float:
        """Wall-clock seconds (log timestamps only; never used for ordering)."""

    def monotonic(self) -> float:
        """Seconds on a monotonic clock (timeouts, batching)."""


class Offload(Protocol):
    async def run(self, fn: Callable[..., T], *args: object) -> T:
        """Run blocking work (fsync, SQLite commit) without stalling the event loop."""


class SystemClock:
    def time(self) -> float:
        return time.time()

    def monotonic(self) -> float:
        return time.monotonic()


class ThreadOffload:
    """Blocking work on the default executor (checkpoints, ZooKeeper calls)."""

    async def run(self, fn: Callable[..., T], *args: object) -> T:
        return await asyncio.get_running_loop().run_in_executor(None, fn, *args)


class InlineOffload:
    """Blocking work right on the loop thread: for short work where a thread hop costs
    more than the work (the journal's write + fsync), and for a simulation."""

    async def run(self, fn: Callable[..., T], *args: object) -> T:
        return fn(*args)
