"""What every nemesis is: a small object that injects a fault, proves it, and heals.

A nemesis declares the `fs` it handles, `invoke(op)` performs one fault op and returns the
completion value carrying a `proof` (what was observed to confirm the fault took effect),
and `heal()` undoes everything it still has in force. A fault that cannot be proven raises
`FaultNotProven`: the controller records the op with an `error` and the run says so —
it never passes silently.
"""

from __future__ import annotations

import hashlib
import random
from typing import Any, Protocol


def stream(seed: int, name: str) -> random.Random:
    """The random stream named `name` of a test's seed: nemeses built with the same seed
    draw independent numbers (one stream each), and a seed still replays every one."""
    digest = hashlib.blake2b(f"{seed}/{name}".encode(), digest_size=8).digest()
    return random.Random(int.from_bytes(digest, "big"))


class FaultNotProven(Exception):
    """The fault was attempted but its effect could not be observed."""


class Nemesis(Protocol):
    fs: frozenset[str]

    async def invoke(self, op: dict[str, Any]) -> dict[str, Any]:
        """Perform op (`f`, `value`) and return its completion value with a `proof`."""
        ...

    async def heal(self) -> list[dict[str, Any]]:
        """Undo every fault still in force; return one proof per fault healed."""
        ...


class Composed:
    """Several nemeses as one: each op goes to the nemesis that declares its `f`."""

    def __init__(self, nemeses: list[Nemesis]) -> None:
        self.by_f: dict[str, Nemesis] = {}
        for nemesis in nemeses:
            for f in nemesis.fs:
                if f in self.by_f:
                    raise ValueError(f"two nemeses handle {f!r}")
                self.by_f[f] = nemesis
        self.nemeses = nemeses
        self.fs = frozenset(self.by_f)

    async def invoke(self, op: dict[str, Any]) -> dict[str, Any]:
        nemesis = self.by_f.get(op["f"])
        if nemesis is None:
            raise ValueError(f"no nemesis handles {op['f']!r} (known: {sorted(self.fs)})")
        return await nemesis.invoke(op)

    async def heal(self) -> list[dict[str, Any]]:
        proofs = []
        for nemesis in self.nemeses:
            proofs.extend(await nemesis.heal())
        return proofs
