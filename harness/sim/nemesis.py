"""Faults inside the simulation, as a `Nemesis` (nemesis/base.py) the controller drives.

The ops and their values are those of the real nemeses (docs/history.md §3), with
`value.nodes` naming the targets; each completion carries a `proof` read back from the
simulation (the grudge in force, bytes a power loss dropped, the bit a corruption flipped).

The op names and values are the real nemeses' (docs/nemeses.md, `START_STOP` in
nemesis/schedule.py), so a schedule found in the simulation passes `bkchaos test
--schedule` on a real runtime unchanged.

| f | effect |
|---|---|
| `kill` / `restart` | SIGKILL the bookie (its disks keep every written byte) / start it again |
| `pause` / `resume` | SIGSTOP the bookie or client agent (its callbacks and timers wait, and |
| | so do the ops the controller sent it: see loop.py, cluster.py) / SIGCONT |
| `power-loss` / `power-on` | kill, then drop every byte written since the last fsync / start |
| `corrupt` / `corrupt-restart` | flip `value.count` bits (default 3) in the `value.targets` |
| | files (`entrylog`, the default, or `journal`), or with `value.mode` `tail` kill the |
| | bookie and cut its newest such files in their last fsynced write / restart the bookie |
| `start-partition` / `stop-partition` | cut the network by `value.grudge` (a nemesis.grudge |
| | name, default `isolate`: `value.nodes` from every other node) / heal |
| `clock-bump` / `clock-reset` | shift the nodes' wall clocks by `value.delta_s` s / undo |
| `clock-strobe` / `clock-strobe-stop` | flip the nodes' wall clocks between `value.delta_s` s |
| | and no offset every `value.period_s` s (virtual time) / stop, offset gone |
| `start-packet` / `stop-packet` | shape the `value.nodes`' egress as netem would, as TCP |
| | shows it: `delay_ms` ± `jitter_ms` more per write (`reorder_pct` of writes skip it), |
| | `loss_pct` and `corrupt_pct` of writes retransmitted, `duplicate_pct` absorbed, writes |
| | queued at `rate` (default 50 ± 10 ms; harness.sim.net) / undo |
| `wipe` / `restore` | kill the bookie, pull its disks (a blank one in their place) and |
| | start it: the cookie check must refuse / put the disks back and start it |
| `fill-disk` / `free-disk` | ballast on the bookie's ledger disk until 99% of it is in use; |
| | a running bookie must turn read-only / ballast gone, it must turn writable |

A bookie whose disks are pulled cannot be started by `restart` or `power-on` either (its
cookie check refuses, as on a real node): the op is recorded as not taking effect.
"""

from __future__ import annotations

import asyncio
import functools
import random
from dataclasses import asdict
from typing import Any

from bookie_image.bookie.cookies import CookieRefused
from harness.sim.cluster import SimBookie, SimCluster
from harness.sim.disk import SimDisk
from harness.sim.net import Shaping
from harness.sim.zk import ZK_NODE
from harness.testspec import SIM_CORRUPT_MODES
from nemesis.base import FaultNotProven
from nemesis.clock import STROBE_PERIOD_S, strobe
from nemesis.grudge import grudge
from nemesis.kinds import KINDS, SIM_NEMESES, START_STOP
from nemesis.net import netem_params, packet_destinations, rate_bits_per_second

CORRUPTIBLE = {
    "entrylog": ("ledgers", "current/entrylog-"),
    "journal": ("journal", "current/journal-"),
}
"""`corrupt` target -> (the data dir it lives in, the path prefix of its files)."""

FILL_FRACTION = 0.99
"""How full `fill-disk` leaves a ledger disk: past the bookie's read-only threshold
(0.95 by default), short of refusing writes."""
MODE_CHANGE_WAIT_S = 5.0
"""How long a bookie may take to change mode after its disk filled or freed: its disk
check runs every second."""
MODE_POLL_S = 0.05

REACHABILITY = frozenset({"pause", "resume", "start-partition", "stop-partition"})
"""Faults that may cut a bookie off from ZooKeeper, or put it back in touch (its session)."""

STARTS = frozenset({"restart", "power-on", "corrupt-restart"})
"""Ops that (re)start bookies."""

SIM_FAULTS = frozenset(
    op for kind in SIM_NEMESES if KINDS[kind].sim_nemesis is None for op in START_STOP[kind]
)
"""Every op SimNemesis performs: the start and stop of each built-in kind the simulation
runs (a plugin kind brings its own simulated nemesis)."""


class SimNemesis:
    fs = SIM_FAULTS

    def __init__(self, cluster: SimCluster, rng: random.Random) -> None:
        self.cluster = cluster
        self.rng = rng
        self.strobes: dict[str, asyncio.Task[None]] = {}

    def _bookies(self, value: dict[str, Any]) -> list[SimBookie]:
        return [self.cluster.bookies[n] for n in self._nodes(value, list(self.cluster.bookies))]

    def _nodes(self, value: dict[str, Any], among: list[str] | None = None) -> list[str]:
        """`value.nodes`, which must name some of `among` (by default, any node)."""
        among = self.cluster.nodes if among is None else among
        names = value.get("nodes") or []
        if not names or not set(names) <= set(among):
            raise ValueError(f"value.nodes must name some of {among}, got {names}")
        return list(names)

    def _pausable(self) -> list[str]:
        """The processes `pause` may stop: the bookies and the client agents."""
        return [*self.cluster.bookies, *self.cluster.agents]

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
                    await self._start(bookie)
                proof[bookie.name] = f"registered as {bookie.id}"
        elif f == "wipe":
            for bookie in self._bookies(value):
                bookie.crash()
                moved = {disk.name: disk.pull() for disk in bookie.disks.values()}
                proof[bookie.name] = {"moved": moved, **await self._start_on_blank_disk(bookie)}
        elif f == "restore":
            nodes = value.get("nodes") or [b.name for b in self._bookies_pulled()]
            for bookie in self._bookies({"nodes": nodes}) if nodes else ():
                bookie.crash()
                restored = {d.name: d.put_back() for d in bookie.disks.values() if d.pulled}
                await self._start(bookie)
                proof[bookie.name] = {"restored": restored, "registered": bookie.id}
        elif f == "pause":
            for node in self._nodes(value, self._pausable()):
                if not self.cluster.runs(node):
                    raise FaultNotProven(f"{node} is not running: nothing to pause")
                self.cluster.loop.pause_node(node)
                if node in self.cluster.agents:
                    self.cluster.agents[node].paused()
                proof[node] = {"state": "T"}
        elif f == "resume":
            for node in self._nodes(value, self._pausable()):
                self.cluster.loop.resume_node(node)
                proof[node] = {"state": "S" if self.cluster.runs(node) else "not running"}
        elif f == "start-partition":
            nodes = self.cluster.nodes
            roles = {n: self._role(n) for n in nodes}
            cut = grudge(
                value.get("grudge", "isolate"), nodes, roles, self.rng, value.get("nodes") or ()
            )
            network.partition(cut)
            value["grudge"] = proof["grudge"] = {
                n: sorted(g) for n, g in sorted(network.grudge.items())
            }
        elif f == "stop-partition":
            network.partition({})
            proof["grudge"] = {}
        elif f == "start-packet":
            params = netem_params(value)
            shaping = Shaping(
                params.get("delay_ms", 0) / 1000,
                params.get("jitter_ms", 0) / 1000,
                params.get("loss_pct", 0) / 100,
                params.get("duplicate_pct", 0) / 100,
                params.get("reorder_pct", 0) / 100,
                params.get("corrupt_pct", 0) / 100,
                rate_bits_per_second(params["rate"]) if "rate" in params else 0.0,
                tuple(packet_destinations(value, self.cluster.nodes)),
            )
            for node in self._nodes(value):
                network.shape(node, shaping)
            value.update(params)
            proof["shaped"] = {n: asdict(s) for n, s in sorted(network.shaped.items())}
        elif f == "stop-packet":
            for node in value.get("nodes") or sorted(network.shaped):
                network.shape(node, None)
            proof["shaped"] = {n: asdict(s) for n, s in sorted(network.shaped.items())}
        elif f == "clock-bump":
            delta = float(value.get("delta_s", 60.0))
            for bookie in self._bookies(value):
                self.cluster.skews[bookie.name] = self.cluster.skews.get(bookie.name, 0.0) + delta
            proof["skews"] = dict(self.cluster.skews)
        elif f == "clock-strobe":
            delta = float(value.setdefault("delta_s", 60.0))
            period = float(value.setdefault("period_s", STROBE_PERIOD_S))
            for bookie in self._bookies(value):
                self._stop_strobe(bookie.name)
                self.cluster.skews[bookie.name] = delta
                set_offset = functools.partial(self._set_skew, bookie.name)
                self.strobes[bookie.name] = asyncio.ensure_future(strobe(set_offset, delta, period))
            proof["skews"] = dict(self.cluster.skews)
        elif f == "clock-strobe-stop":
            for node in value.get("nodes") or sorted(self.strobes):
                self._stop_strobe(node)
                self.cluster.skews.pop(node, None)
            proof["skews"] = dict(self.cluster.skews)
        elif f == "clock-reset":
            for node in list(self.strobes):
                self._stop_strobe(node)
            self.cluster.skews.clear()
            proof["skews"] = {}
        elif f == "corrupt":
            targets = value.get("targets") or ["entrylog"]
            if not set(targets) <= set(CORRUPTIBLE):
                raise ValueError(f"value.targets must be among {sorted(CORRUPTIBLE)}: {targets}")
            mode = value.get("mode", "flip")
            if mode not in SIM_CORRUPT_MODES:
                raise ValueError(f"value.mode must be one of {SIM_CORRUPT_MODES}, not {mode!r}")
            for bookie in self._bookies(value):
                if mode == "tail":  # a crash that loses the last fsynced write
                    bookie.crash()
                    disks = [self._disk(bookie, target) for target in sorted(targets)]
                    changes = [disk.cut_tail(self.rng, prefix) for disk, prefix in disks]
                else:
                    changes = []
                    for _ in range(int(value.get("count", 3))):
                        disk, prefix = self._disk(bookie, self.rng.choice(sorted(targets)))
                        changes.append(disk.corrupt(self.rng, prefix))
                if not any(changes):
                    raise FaultNotProven(f"{bookie.name} has no {targets} file to corrupt yet")
                proof[bookie.name] = [change for change in changes if change]
        elif f == "fill-disk":
            for bookie in self._bookies(value):
                proof[bookie.name] = await self._fill(bookie)
        elif f == "free-disk":
            nodes = value.get("nodes") or [b.name for b in self._bookies_filled()]
            for bookie in self._bookies({"nodes": nodes}) if nodes else ():
                proof[bookie.name] = await self._free(bookie)
        else:
            raise ValueError(f"the simulation has no fault {f!r} (known: {sorted(SIM_FAULTS)})")
        if f in REACHABILITY:
            self.cluster.zk.reachability_changed()
        return {**value, "proof": proof}

    async def _set_skew(self, node: str, offset: float) -> None:
        self.cluster.skews[node] = offset

    def _stop_strobe(self, node: str) -> None:
        task = self.strobes.pop(node, None)
        if task is not None:
            task.cancel()

    @staticmethod
    def _disk(bookie: SimBookie, target: str) -> tuple[SimDisk, str]:
        """The disk a `corrupt` target lives on, and the path prefix of its files."""
        dir_name, prefix = CORRUPTIBLE[target]
        return next(d for root, d in bookie.disks.items() if root.name == dir_name), prefix

    def _bookies_filled(self) -> list[SimBookie]:
        return [b for b in self.cluster.bookies.values() if b.disks[b.cfg.ledger_dirs[0]].ballast]

    async def _fill(self, bookie: SimBookie) -> dict[str, Any]:
        """`fill-disk`: ballast on the bookie's ledger disk up to `FILL_FRACTION`; a
        running bookie must turn read-only (its disk check, BookKeeper's
        LedgerDirsMonitor) within `MODE_CHANGE_WAIT_S`, else the fault is not proven."""
        disk = bookie.disks[bookie.cfg.ledger_dirs[0]]
        proof: dict[str, Any] = {"ballast": disk.fill(FILL_FRACTION), "usage": disk.usage()}
        return {**proof, **await self._mode(bookie, readonly=True)}

    async def _free(self, bookie: SimBookie) -> dict[str, Any]:
        """`free-disk`: the ballast gone; a running bookie must turn writable again."""
        disk = bookie.disks[bookie.cfg.ledger_dirs[0]]
        disk.ballast = 0
        return {"usage": disk.usage(), **await self._mode(bookie, readonly=False)}

    async def _mode(self, bookie: SimBookie, readonly: bool) -> dict[str, Any]:
        """Wait until a running bookie is in the mode its disk calls for, and say where it
        is registered; a bookie down or paused meets its disk when it runs again."""
        if not bookie.running or bookie.name in self.cluster.loop.paused:
            return {"bookie": "paused" if bookie.running else "not running"}
        service = bookie.service
        deadline = self.cluster.loop.time() + MODE_CHANGE_WAIT_S
        while (service.bookie.readonly is not None) != readonly:
            if self.cluster.loop.time() > deadline or bookie.service is not service:
                mode = "read-only" if readonly else "writable"
                raise FaultNotProven(f"{bookie.name} did not turn {mode} ({MODE_CHANGE_WAIT_S} s)")
            await asyncio.sleep(MODE_POLL_S)
        root = f"{bookie.cfg.zk_ledgers_root}/available"
        node = f"{root}/readonly/{bookie.id}" if readonly else f"{root}/{bookie.id}"
        return {
            "mode": service.bookie.readonly or "writable",
            "registered": node if self.cluster.zk.exists(node) else "not yet",
        }

    def _bookies_pulled(self) -> list[SimBookie]:
        return [b for b in self.cluster.bookies.values() if b.pulled]

    @staticmethod
    async def _start(bookie: SimBookie) -> None:
        try:
            await bookie.start()
        except CookieRefused as exc:
            reason = _on_node(bookie, str(exc))
            raise FaultNotProven(f"{bookie.name} did not come back: {reason}") from None

    @staticmethod
    async def _start_on_blank_disk(bookie: SimBookie) -> dict[str, Any]:
        """Start a bookie whose disks were pulled: its cookie check must refuse. One that
        accepts the blank disk (seeded bug `no-cookie`) is recorded so and left serving
        until `restore`, as the real nemesis leaves it, for the checkers to judge."""
        try:
            await bookie.start()
        except CookieRefused as exc:
            return {
                "cookie_check": "refused",
                "reason": _on_node(bookie, exc.reason),
                "running": False,
            }
        return {"cookie_check": "accepted a blank disk", "running": True}

    async def heal(self) -> list[dict[str, Any]]:
        """Partitions healed, packets no longer shaped, clocks reset, paused bookies and
        client agents resumed, pulled disks put back, every bookie that is down started again."""
        proofs = []
        network = self.cluster.loop.network
        if network.grudge:
            proofs.append((await self.invoke({"f": "stop-partition"}))["proof"])
        if network.shaped:
            proofs.append((await self.invoke({"f": "stop-packet"}))["proof"])
        if self.cluster.skews:
            proofs.append((await self.invoke({"f": "clock-reset"}))["proof"])
        paused = sorted(n for n in self.cluster.loop.paused if n in self._pausable())
        if paused:
            proofs.append((await self.invoke({"f": "resume", "value": {"nodes": paused}}))["proof"])
        if self._bookies_pulled():
            proofs.append((await self.invoke({"f": "restore"}))["proof"])
        down = [b.name for b in self.cluster.bookies.values() if not b.running]
        if down:
            proofs.append((await self.invoke({"f": "restart", "value": {"nodes": down}}))["proof"])
        if self._bookies_filled():
            proofs.append((await self.invoke({"f": "free-disk"}))["proof"])
        return proofs


def _on_node(bookie: SimBookie, text: str) -> str:
    """`text` with the run's scratch directory taken out of the paths it names (as
    `SimDisk.name` does)."""
    scratch = next(iter(bookie.disks)).parents[1]
    return text.replace(f"{scratch}/", "")
