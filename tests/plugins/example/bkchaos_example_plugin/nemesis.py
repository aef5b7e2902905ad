"""`bounce`: a fault kind with its simulated nemesis (entry point `bkchaos.nemeses`)."""

from __future__ import annotations

import random
from typing import Any

from nemesis.kinds import FaultKind


class BounceNemesis:
    """`bounce`: crash the named bookies and start them again at once, in the simulation."""

    fs = frozenset({"bounce", "bounce-done"})

    def __init__(self, cluster: Any, rng: random.Random) -> None:
        self.cluster = cluster

    async def invoke(self, op: dict[str, Any]) -> dict[str, Any]:
        value = dict(op.get("value") or {})
        proof: dict[str, Any] = {}
        if op["f"] == "bounce":
            for name in value.get("nodes") or []:
                bookie = self.cluster.bookies[name]
                bookie.crash()
                await bookie.start()
                proof[name] = f"restarted as {bookie.id}"
        return {**value, "proof": proof}

    async def heal(self) -> list[dict[str, Any]]:
        return []  # a bounce is over as soon as it is done


BOUNCE = FaultKind(
    "bounce",
    "bounce",
    "bounce-done",
    "crash a bookie and start it again at once",
    runtimes=("sim",),
    sim_nemesis=BounceNemesis,
)
