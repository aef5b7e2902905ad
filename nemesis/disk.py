"""Disk faults: wipe (and the operator's wipe with a reset cookie), power loss, corruption.

They act on a bookie's data dirs where those live, by running `nemesis.nodeops` on the
node through the runtime's `exec`, and on its process through the node lifecycle
(`stop`, `kill`, `start`, `process_state`), so they work on every runtime offering those.
Each start op leaves the bookie in a state its stop op (or `heal`) ends:

- `wipe` stops the bookie, pulls its disk (the dirs' contents move aside, leaving blank
  dirs) and starts it: the cookie check must refuse (proof: the `cookie-refused` event and
  the process gone). The bookie stays down (or, if it accepted the blank disk, serves from
  it); `restore` stops it, puts the disk back and restarts it.
- `wipe-reset` deletes the dirs for good, is refused the same way, then deletes the
  ZooKeeper cookie; `rejoin` starts the bookie, which re-registers with empty disks. This
  is the operator error the reference warns about: acknowledged entries vanish from one
  replica and recovery may truncate ledgers, so it is opt-in and expected to cause
  anomalies.
- `power-loss` SIGKILLs the bookie and truncates every data file to its last fsynced
  length (the bookie's manifest); proof: bytes dropped per file. `power-on` restarts it.
- `corrupt` flips bits (or truncates) at seeded random offsets of entry logs (default),
  journal or index files of a running or stopped bookie; proof: offsets and bytes before
  and after. `corrupt-restart` restarts the bookie so that startup reads them too.
"""

from __future__ import annotations

import asyncio
import json
import shlex
import time
from pathlib import Path
from typing import Any, Protocol

from nemesis.base import FaultNotProven, stream
from nemesis.nodeops import TARGETS, NodeRuntime, on_node
from nemesis.process import ProcessRuntime

EXIT_WAIT_S = 30.0
POLL_S = 0.1
CORRUPT_MODES = ("flip", "truncate", "tail")
SAFE_CORRUPT_TARGETS = ("entrylog",)
"""Every stored record's CRC is in the index, so damage there must read as EIO; journal
and index damage can really lose acknowledged entries on that bookie (opt-in)."""


class DiskRuntime(ProcessRuntime, NodeRuntime, Protocol):
    ledgers_root: str

    def node(self, name: str) -> Any: ...
    def stop(self, name: str) -> None: ...
    def zk_client(self) -> Any: ...


def _data_dirs(runtime: DiskRuntime, node: str) -> list[str]:
    return [str(d) for d in runtime.node(node).data_dirs]


def _nodes(op: dict[str, Any]) -> list[str]:
    nodes = (op.get("value") or {}).get("nodes")
    if not nodes:
        raise ValueError(f"{op['f']} needs value.nodes (a list of node names)")
    return list(nodes)


async def _log_size(runtime: DiskRuntime, node: str) -> int:
    log = shlex.quote(str(runtime.node(node).log_path))
    script = f"stat -c %s {log} 2>/dev/null || echo 0"
    _, out = await asyncio.to_thread(runtime.exec, node, ["sh", "-c", script])
    return int(out.split()[0])


async def _events_since(runtime: DiskRuntime, node: str, offset: int) -> list[dict[str, Any]]:
    """The bookie's structured log lines written after byte `offset` of its log."""
    log = shlex.quote(str(runtime.node(node).log_path))
    script = f"tail -c +{offset + 1} {log}"
    _, out = await asyncio.to_thread(runtime.exec, node, ["sh", "-c", script])
    events = []
    for line in out.splitlines():
        if line.startswith("{"):
            try:
                events.append(json.loads(line))
            except ValueError:
                continue
    return events


async def _start_refused(runtime: DiskRuntime, node: str) -> dict[str, Any]:
    """Start the bookie on its blank disk and observe what its cookie check decides:
    refused (the `cookie-refused` event, the process gone) or accepted (`ready`)."""
    offset = await _log_size(runtime, node)
    await asyncio.to_thread(runtime.start, node, False)
    deadline = time.monotonic() + EXIT_WAIT_S
    while time.monotonic() < deadline:
        # State first, then the log: a process seen gone has written every line it will,
        # so a refusal logged just before exiting cannot slip between the two reads.
        pid, state = await asyncio.to_thread(runtime.process_state, node)
        events = await _events_since(runtime, node, offset)
        refused = [e for e in events if e.get("event") == "cookie-refused"]
        if refused and (pid is None or state in (None, "Z")):
            return {"cookie_check": "refused", "event": refused[-1], "running": False}
        if any(e.get("event") == "ready" for e in events):
            return {"cookie_check": "accepted a blank disk", "pid": pid, "running": True}
        if pid is None or state in (None, "Z"):
            raise FaultNotProven(f"{node} exited on its blank disk without a cookie decision")
        await asyncio.sleep(POLL_S)
    raise FaultNotProven(f"{node} neither refused nor registered within {EXIT_WAIT_S:.0f}s")


async def _restart(runtime: DiskRuntime, node: str) -> dict[str, Any]:
    """Start a bookie and wait until it is registered: its new pid."""
    await asyncio.to_thread(runtime.start, node)
    pid, state = await asyncio.to_thread(runtime.process_state, node)
    if pid is None or state in (None, "Z"):
        raise FaultNotProven(f"{node} did not come back")
    return {"new_pid": pid, "registered": True}


async def _stop_if_running(runtime: DiskRuntime, node: str) -> None:
    pid, _ = await asyncio.to_thread(runtime.process_state, node)
    if pid is not None:
        await asyncio.to_thread(runtime.stop, node)


class WipeNemesis:
    """`wipe` / `restore`, and the opt-in `wipe-reset` / `rejoin` (module docstring)."""

    fs = frozenset({"wipe", "restore", "wipe-reset", "rejoin"})

    def __init__(self, runtime: DiskRuntime) -> None:
        self.runtime = runtime
        self.aside: set[str] = set()  # disk pulled, waiting for `restore`
        self.reset: set[str] = set()  # wiped with the cookie deleted, waiting for `rejoin`

    async def invoke(self, op: dict[str, Any]) -> dict[str, Any]:
        f, value = op["f"], op.get("value") or {}
        if f in ("restore", "rejoin"):
            pending = self.aside if f == "restore" else self.reset
            nodes = value.get("nodes") or sorted(pending)
            return {"nodes": nodes, "proof": await self._end(f, nodes)}
        proof = {}
        for node in _nodes(op):
            await _stop_if_running(self.runtime, node)
            dirs = _data_dirs(self.runtime, node)
            if f == "wipe":
                done = await on_node(self.runtime, node, "move-aside", dirs=dirs)
                self.aside.add(node)
            else:
                done = await on_node(self.runtime, node, "wipe", dirs=dirs)
                self.reset.add(node)
            # A bookie that accepts the blank disk (seeded bug `no-cookie`) is recorded so
            # and left serving, as it would in production, until `restore` stops it.
            start = await _start_refused(self.runtime, node)
            if f == "wipe-reset":
                start["zk_cookie_deleted"] = await asyncio.to_thread(self._delete_cookie, node)
            proof[node] = {**done, **start}
        return {**value, "proof": proof}

    def _delete_cookie(self, node: str) -> str | None:
        path = f"{self.runtime.ledgers_root}/cookies/{self.runtime.node(node).id}"
        with self.runtime.zk_client() as zk:
            if zk.exists(path) is None:
                return None
            zk.delete(path)
            if zk.exists(path) is not None:
                raise FaultNotProven(f"the cookie {path} is still in ZooKeeper")
        return path

    async def _end(self, f: str, nodes: list[str]) -> dict[str, Any]:
        proof = {}
        for node in nodes:
            done: dict[str, Any] = {}
            await _stop_if_running(self.runtime, node)
            if f == "restore":
                if node in self.aside:
                    done = await on_node(
                        self.runtime, node, "move-back", dirs=_data_dirs(self.runtime, node)
                    )
                self.aside.discard(node)
            else:
                self.reset.discard(node)
            offset = await _log_size(self.runtime, node)
            done.update(await _restart(self.runtime, node))
            checked = [
                e
                for e in await _events_since(self.runtime, node, offset)
                if e.get("event") == "cookie-checked"
            ]
            done["cookie_check"] = checked[-1].get("action") if checked else None
            proof[node] = done
        return proof

    async def heal(self) -> list[dict[str, Any]]:
        healed = []
        for f, pending in (("restore", self.aside), ("rejoin", self.reset)):
            if pending:
                healed.append({"f": f, "proof": await self._end(f, sorted(pending))})
        return healed


class PowerLossNemesis:
    """`power-loss`: SIGKILL, then every unsynced byte dropped; `power-on` restarts."""

    fs = frozenset({"power-loss", "power-on"})

    def __init__(self, runtime: DiskRuntime) -> None:
        self.runtime = runtime
        self.off: set[str] = set()

    async def invoke(self, op: dict[str, Any]) -> dict[str, Any]:
        value = op.get("value") or {}
        if op["f"] == "power-on":
            nodes = value.get("nodes") or sorted(self.off)
            return {"nodes": nodes, "proof": await self._power_on(nodes)}
        proof = {}
        for node in _nodes(op):
            pid, _ = await asyncio.to_thread(self.runtime.process_state, node)
            killed = await asyncio.to_thread(self.runtime.kill, node) if pid else None
            self.off.add(node)
            dropped = await on_node(
                self.runtime, node, "power-loss", dirs=_data_dirs(self.runtime, node)
            )
            proof[node] = {"killed_pid": killed, **dropped}
        return {**value, "proof": proof}

    async def _power_on(self, nodes: list[str]) -> dict[str, Any]:
        proof = {}
        for node in nodes:
            proof[node] = await _restart(self.runtime, node)
            self.off.discard(node)
        return proof

    async def heal(self) -> list[dict[str, Any]]:
        if not self.off:
            return []
        return [{"f": "power-on", "proof": await self._power_on(sorted(self.off))}]


class CorruptNemesis:
    """`corrupt` damages files in place; `corrupt-restart` restarts the damaged bookies.

    Parameters (op value, all optional): `targets` (file kinds, default entry logs only),
    `mode` ("flip", "truncate" or "tail"), `count` (bit flips, default 3), `seed` (drawn
    from the nemesis's seeded rng when absent; recorded, so the damage replays). A `tail`
    corruption is what a crash leaves on a disk that acknowledged writes it did not keep:
    the bookie is SIGKILLed first, then the end of its newest file of each dir is cut off,
    and it stays down until `corrupt-restart` (or heal) starts it again.
    """

    fs = frozenset({"corrupt", "corrupt-restart"})

    def __init__(self, runtime: DiskRuntime, seed: int = 0) -> None:
        self.runtime = runtime
        self.rng = stream(seed, "corrupt")
        self.damaged: set[str] = set()
        self.down: set[str] = set()  # killed by a `tail` corruption, waiting for a restart

    async def invoke(self, op: dict[str, Any]) -> dict[str, Any]:
        value = dict(op.get("value") or {})
        if op["f"] == "corrupt-restart":
            nodes = value.get("nodes") or sorted(self.damaged)
            return {"nodes": nodes, "proof": await self._restart(nodes)}
        targets = list(value.get("targets") or SAFE_CORRUPT_TARGETS)
        mode = value.get("mode", "flip")
        if not set(targets) <= set(TARGETS) or mode not in CORRUPT_MODES:
            raise ValueError(
                f"corrupt: targets must be among {sorted(TARGETS)} and mode one of "
                f"{CORRUPT_MODES}, got {targets}, {mode!r}"
            )
        value.update(targets=targets, mode=mode, count=int(value.get("count", 3)))
        value.setdefault("seed", self.rng.randrange(2**32))
        proof = {}
        for node in _nodes(op):
            killed = {}
            if mode == "tail":
                pid, _ = await asyncio.to_thread(self.runtime.process_state, node)
                killed["killed_pid"] = (
                    await asyncio.to_thread(self.runtime.kill, node) if pid else None
                )
                self.down.add(node)
            params = {k: value[k] for k in ("targets", "mode", "count", "seed")}
            proof[node] = killed | await on_node(
                self.runtime, node, "corrupt", dirs=_data_dirs(self.runtime, node), **params
            )
            self.damaged.add(node)
        return {**value, "proof": proof}

    async def _restart(self, nodes: list[str]) -> dict[str, Any]:
        proof = {}
        for node in nodes:
            await _stop_if_running(self.runtime, node)
            proof[node] = await _restart(self.runtime, node)
            self.damaged.discard(node)
            self.down.discard(node)
        return proof

    async def heal(self) -> list[dict[str, Any]]:
        """Damage cannot be undone; heal restarts only the bookies a `tail` left down."""
        down = sorted(self.down)
        self.damaged.clear()
        if not down:
            return []
        return [{"f": "corrupt-restart", "proof": await self._restart(down)}]


BALLAST = ".bkchaos-ballast"
"""The file `fill-disk` writes into a bookie's ledger dir (the bookie reads only its own
files there)."""
FILL_FRACTION = 0.99
"""How full `fill-disk` leaves the disk: past the bookie's read-only threshold (0.95 by
default), short of refusing writes."""
MODE_CHANGE_WAIT_S = 15.0
"""How long a bookie may take to change mode: its disk check runs every second."""


class DiskFullNemesis:
    """`fill-disk`: a ballast file fills the filesystem of a bookie's ledger dir to
    `FILL_FRACTION`; the bookie must turn read-only (its `readonly` event, BookKeeper's
    LedgerDirsMonitor) — `free-disk` deletes the ballast and it must turn writable again
    (`writable`). The runtime must give each bookie's ledger dir a filesystem of its own
    (the local runtime mounts a small tmpfs per bookie for it): filling the host's disk
    would fill everybody's."""

    fs = frozenset({"fill-disk", "free-disk"})

    def __init__(self, runtime: DiskRuntime) -> None:
        self.runtime = runtime
        self.filled: set[str] = set()

    async def invoke(self, op: dict[str, Any]) -> dict[str, Any]:
        value = op.get("value") or {}
        if op["f"] == "free-disk":
            nodes = value.get("nodes") or sorted(self.filled)
            return {**value, "nodes": nodes, "proof": await self._free(nodes)}
        proof = {}
        for node in _nodes(op):
            proof[node] = await self._fill(node)
        return {**value, "proof": proof}

    def _ballast(self, node: str) -> str:
        return str(Path(_data_dirs(self.runtime, node)[1]) / BALLAST)

    async def _fill(self, node: str) -> dict[str, Any]:
        ledgers = shlex.quote(_data_dirs(self.runtime, node)[1])
        ballast = shlex.quote(self._ballast(node))
        offset = await _log_size(self.runtime, node)
        script = (
            f"set -e; df -B1 --output=size,used {ledgers} | tail -1 | {{ read size used;"
            f" want=$(( size * {round(FILL_FRACTION * 100)} / 100 - used ));"
            f" [ $want -gt 0 ] && fallocate -l $want {ballast}; }};"
            f" df -B1 --output=size,used {ledgers} | tail -1"
        )
        code, out = await asyncio.to_thread(self.runtime.exec, node, ["sh", "-c", script])
        if code != 0:
            raise FaultNotProven(f"{node}: could not fill its ledger disk: {out.strip()}")
        self.filled.add(node)
        size, used = (int(n) for n in out.split()[-2:])
        proof: dict[str, Any] = {"usage": round(used / size, 4), "disk_bytes": size}
        return {**proof, **await self._mode(node, offset, "readonly")}

    async def _free(self, nodes: list[str]) -> dict[str, Any]:
        proof = {}
        for node in nodes:
            offset = await _log_size(self.runtime, node)
            command = ["rm", "-f", self._ballast(node)]
            code, out = await asyncio.to_thread(self.runtime.exec, node, command)
            if code != 0:
                raise FaultNotProven(f"{node}: could not free its ledger disk: {out.strip()}")
            self.filled.discard(node)
            proof[node] = await self._mode(node, offset, "writable")
        return proof

    async def _mode(self, node: str, offset: int, event: str) -> dict[str, Any]:
        """Wait for the bookie's `event` (`readonly` or `writable`) after log byte
        `offset`; a bookie not running meets its disk when it starts again."""
        pid, state = await asyncio.to_thread(self.runtime.process_state, node)
        if pid is None or state in (None, "Z", "T"):
            return {"bookie": "stopped" if state == "T" else "not running"}
        deadline = time.monotonic() + MODE_CHANGE_WAIT_S
        while time.monotonic() < deadline:
            events = await _events_since(self.runtime, node, offset)
            seen = [e for e in events if e.get("event") == event]
            if seen:
                return {"event": seen[-1]}
            await asyncio.sleep(POLL_S)
        raise FaultNotProven(f"{node} logged no {event!r} event within {MODE_CHANGE_WAIT_S:.0f}s")

    async def heal(self) -> list[dict[str, Any]]:
        if not self.filled:
            return []
        return [{"f": "free-disk", "proof": await self._free(sorted(self.filled))}]
