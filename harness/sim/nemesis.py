"""Faults inside the simulation, as a `Nemesis` (nemesis/base.py) the controller drives.

The ops and their values are those of the real nemeses (shared/spec/history.md §3), with
`value.nodes` naming the targets; each completion carries a `proof` read back from the
simulation (the grudge in force, bytes a power loss dropped, the bit a corruption flipped).

The op names and values are the real nemeses' (docs/nemeses.md, `START_STOP` in
nemesis/schedule.py), so a schedule found in the simulation passes `bkchaos test
--schedule` on a real runtime unchanged.

| f | effect |
|---|---|
| `kill` / `restart` | SIGKILL the bookie (its disks keep every written byte) / start it again |
| `pause` / `resume` | SIGSTOP the bookie (its callbacks and timers wait; see loop.py) / SIGCONT |
| `power-loss` / `power-on` | kill, then drop every byte written since the last fsync / start |
| `corrupt` / `corrupt-restart` | flip `value.count` bits (default 3) in the `value.targets` |
| | files (`entrylog`, the default, or `journal`) / restart the bookie so it reads them |
| `start-partition` / `stop-partition` | cut the network by `value.grudge` (a nemesis.grudge |
| | name, default `isolate`: `value.nodes` from every other node) / heal |
| `clock-bump` / `clock-reset` | shift the nodes' wall clocks by `value.delta_s` s / undo |
"""

from __future__ import annotations

import random
from typing import Any

from harness.sim.cluster import SimCluster
from harness.sim.zk import ZK_NODE
from nemesis.base import FaultNotProven
from nemesis.grudge import grudge

CORRUPTIBLE = {
    "entrylog": ("ledgers", "current/entrylog-"),
    "journal": ("journal", "current/journal-"),
}
"""`corrupt` target -> (the data dir it lives in, the path prefix of its files)."""

STARTS = frozenset({"restart", "power-on", "corrupt-restart"})
"""Ops that (re)start bookies."""

SIM_FAULTS = STARTS | {
    "kill",
    "power-loss",
    "corrupt",
    "start-partition",
    "stop-partition",
    "clock-bump",
    "clock-reset",
    "pause",
    "resume",
}


class SimNemesis:
    fs = SIM_FAULTS

    def __init__(self, cluster: SimCluster, rng: random.Random) -> None:
        self.cluster = cluster
        self.rng = rng

    def _bookies(self, value: dict[str, Any]) -> list[Any]:
        names = value.get("nodes") or []
        unknown = [n for n in names if n not in self.cluster.bookies]
        if unknown or not names:
            raise ValueError(f"value.nodes must name bookies among {list(self.cluster.bookies)}")
        return [self.cluster.bookies[n] for n in names]

    def _role(self, node: str) -> str:
        if node == ZK_NODE:
            return "zk"
        return "bookie" if node in self.cluster.bookies else "client"

    async def invoke(self, op: dict[str, Any]) -> dict[str, Any]:
        f, value = op["f"], dict(op.get("value") or {})
        network = self.cluster.loop.network
        proof: dict[str, Any] = {}
        if f in ("kill", "power-loss"):
            for bookie in self._bookies(value):
                was_running = bookie.running
                bookie.crash()
                if f == "power-loss":
                    lost = {}
                    for disk in bookie.disks.values():
                        lost.update(disk.lose_power())
                    proof[bookie.name] = {"lost_bytes": sum(lost.values()), "files": len(lost)}
                else:
                    proof[bookie.name] = "killed" if was_running else "already down"
        elif f in STARTS:
            for bookie in self._bookies(value):
                if f == "corrupt-restart":
                    bookie.crash()
                if not bookie.running:
                    await bookie.start()
                proof[bookie.name] = f"registered as {bookie.id}"
        elif f == "pause":
            for bookie in self._bookies(value):
                if not bookie.running:
                    raise FaultNotProven(f"{bookie.name} is not running: nothing to pause")
                self.cluster.loop.pause_node(bookie.name)
                proof[bookie.name] = {"state": "T"}
        elif f == "resume":
            for bookie in self._bookies(value):
                self.cluster.loop.resume_node(bookie.name)
                proof[bookie.name] = {"state": "S" if bookie.running else "not running"}
        elif f == "start-partition":
            nodes = self.cluster.nodes
            roles = {n: self._role(n) for n in nodes}
            cut = grudge(
                value.get("grudge", "isolate"), nodes, roles, self.rng, value.get("nodes") or ()
            )
            network.partition(cut)
            value["grudge"] = proof["grudge"] = {n: sorted(g) for n, g in network.grudge.items()}
        elif f == "stop-partition":
            network.partition({})
            proof["grudge"] = {}
        elif f == "clock-bump":
            delta = float(value.get("delta_s", 60.0))
            for bookie in self._bookies(value):
                self.cluster.skews[bookie.name] = self.cluster.skews.get(bookie.name, 0.0) + delta
            proof["skews"] = dict(self.cluster.skews)
        elif f == "clock-reset":
            self.cluster.skews.clear()
            proof["skews"] = {}
        elif f == "corrupt":
            targets = value.get("targets") or ["entrylog"]
            if not set(targets) <= set(CORRUPTIBLE):
                raise ValueError(f"value.targets must be among {sorted(CORRUPTIBLE)}: {targets}")
            for bookie in self._bookies(value):
                flips = []
                for _ in range(int(value.get("count", 3))):
                    dir_name, prefix = CORRUPTIBLE[self.rng.choice(sorted(targets))]
                    disk = next(d for root, d in bookie.disks.items() if root.name == dir_name)
                    flips.append(disk.corrupt(self.rng, prefix))
                if not any(flips):
                    raise FaultNotProven(f"{bookie.name} has no {targets} file to corrupt yet")
                proof[bookie.name] = [flip for flip in flips if flip]
        else:
            raise ValueError(f"the simulation has no fault {f!r} (known: {sorted(SIM_FAULTS)})")
        return {**value, "proof": proof}

    async def heal(self) -> list[dict[str, Any]]:
        """Partitions healed, clocks reset, paused bookies resumed, every bookie that is down
        started again."""
        proofs = []
        if self.cluster.loop.network.grudge:
            proofs.append((await self.invoke({"f": "stop-partition"}))["proof"])
        if self.cluster.skews:
            proofs.append((await self.invoke({"f": "clock-reset"}))["proof"])
        paused = sorted(n for n in self.cluster.loop.paused if n in self.cluster.bookies)
        if paused:
            proofs.append((await self.invoke({"f": "resume", "value": {"nodes": paused}}))["proof"])
        down = [b.name for b in self.cluster.bookies.values() if not b.running]
        if down:
            proofs.append((await self.invoke({"f": "restart", "value": {"nodes": down}}))["proof"])
        return proofs
