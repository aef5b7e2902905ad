"""Fault work that must run on the node itself: `python -m nemesis.nodeops '{"op": ...}'`.

Why a module of its own: on the local runtime a bookie's files are on this host, in the
docker runtime inside a container, and a network probe must start from the node whose
view it tests. Either way the nemeses run this module *on the node* (through the
runtime's `exec`, see `on_node`) and read its one JSON line of output, which becomes the
fault's proof. Every op returns what it changed or observed, byte for byte.

Ops: `power-loss` (truncate every file to its fsynced length, per the bookie's manifest),
`move-aside` / `move-back` (a disk pulled out and put back), `wipe` (delete for good),
`corrupt` (bit flips or a truncation at seeded random offsets, or a lost last write),
`probe` (TCP connects from this node: passed, refused or dropped, with connect times).
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import shutil
import socket
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Protocol

from nemesis.base import FaultNotProven

MANIFEST = ".fsynced.json"  # bookie_image.bookie.files.MANIFEST; the image has both
ASIDE = ".bkchaos-aside"
TARGETS = {
    "entrylog": ("current/entrylog-", ".log"),
    "journal": ("current/journal-", ".log"),
    "index": ("current/index.sqlite", ""),
}
"""File kinds `corrupt` may hit: (relative path prefix, suffix)."""


def _files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file())


def _manifest(d: Path) -> dict[str, Any]:
    """The bookie's record of what it fsynced in data dir `d` (bookie_image.bookie.files)."""
    try:
        return json.loads((d / MANIFEST).read_text())
    except FileNotFoundError:
        return {}


def power_loss(dirs: list[str]) -> dict[str, Any]:
    """Drop every byte written after the last fsync: each file back to the length the
    bookie recorded after its last fsync; files it never recorded were never fsynced
    (to 0). Never extends a file. Returns per file the bytes dropped."""
    dropped: dict[str, dict[str, int]] = {}
    for d in map(Path, dirs):
        synced = _manifest(d).get("files", {})  # none: nothing was ever fsynced in this dir
        for path in _files(d):
            rel = str(path.relative_to(d))
            if rel == MANIFEST:
                continue
            size, keep = path.stat().st_size, int(synced.get(rel, 0))
            if size > keep:
                os.truncate(path, keep)
                dropped[str(path)] = {"size": size, "synced": keep, "dropped": size - keep}
    return {"files": dropped, "bytes_dropped": sum(f["dropped"] for f in dropped.values())}


def _inventory(d: Path) -> dict[str, int]:
    files = _files(d)
    return {"files": len(files), "bytes": sum(p.stat().st_size for p in files)}


def move_aside(dirs: list[str]) -> dict[str, Any]:
    """Pull the disk: each dir's contents move into a hidden sibling the bookie never
    reads, leaving an empty dir (a blank disk mounted in its place)."""
    moved = {}
    for d in map(Path, dirs):
        aside = d.parent / f"{ASIDE}-{d.name}"
        if aside.exists():
            raise RuntimeError(f"{aside} exists: {d} is already aside")
        moved[str(d)] = _inventory(d)
        d.rename(aside)
        d.mkdir()
    return {"moved": moved}


def move_back(dirs: list[str]) -> dict[str, Any]:
    """Put the original disk back, dropping whatever was written to the blank one."""
    restored = {}
    for d in map(Path, dirs):
        aside = d.parent / f"{ASIDE}-{d.name}"
        if not aside.exists():
            raise RuntimeError(f"nothing aside for {d} (expected {aside})")
        shutil.rmtree(d, ignore_errors=True)
        aside.rename(d)
        restored[str(d)] = _inventory(d)
    return {"restored": restored}


def wipe(dirs: list[str]) -> dict[str, Any]:
    """Delete each dir's contents for good, leaving it empty."""
    deleted = {}
    for d in map(Path, dirs):
        deleted[str(d)] = _inventory(d)
        shutil.rmtree(d, ignore_errors=True)
        d.mkdir(parents=True)
    return {"deleted": deleted}


def _candidates(dirs: list[str], targets: list[str]) -> list[Path]:
    found = []
    for d in map(Path, dirs):
        for path in _files(d):
            rel = str(path.relative_to(d))
            for kind in targets:
                prefix, suffix = TARGETS[kind]
                if rel.startswith(prefix) and rel.endswith(suffix) and path.stat().st_size:
                    found.append(path)
    return found


def last_write_cut(rng: random.Random, last_write_start: int, size: int) -> int:
    """Where a lost last write leaves a file of `size` bytes whose last fsynced write began
    at `last_write_start`: a seeded point inside that write, at least one byte cut (the
    simulated disk cuts at the same point: harness.sim.disk.SimDisk.cut_tail)."""
    return rng.randrange(min(last_write_start, size - 1), size)


def _cut(path: Path, to: int) -> dict[str, Any]:
    size = path.stat().st_size
    os.truncate(path, to)
    return {"file": str(path), "truncated_from": size, "to": to}


def _last_writes_cut(dirs: list[str], files: list[Path], rng: random.Random) -> list[dict]:
    """Mode "tail": the newest of `files` in each dir cut inside its last fsynced write."""
    cuts = []
    for d in map(Path, dirs):
        mine = [p for p in files if p.is_relative_to(d)]
        if mine:
            path = max(mine, key=lambda p: (p.stat().st_mtime_ns, p.name))
            size = path.stat().st_size
            start = _manifest(d).get("last_flush", {}).get(str(path.relative_to(d)), 0)
            cuts.append(_cut(path, last_write_cut(rng, start, size)))
    return cuts


def _flips(files: list[Path], sizes: list[int], count: int, rng: random.Random) -> list[dict]:
    """Mode "flip": `count` single-bit flips at offsets picked uniformly over all bytes."""
    flips = []
    for _ in range(count):
        path = rng.choices(files, sizes)[0]
        with path.open("r+b") as f:
            offset = rng.randrange(path.stat().st_size)
            f.seek(offset)
            before = f.read(1)
            if not before:  # the bookie truncated it meanwhile: skip this flip
                continue
            after = bytes([before[0] ^ (1 << rng.randrange(8))])
            f.seek(offset)
            f.write(after)
        flips.append(
            {"file": str(path), "offset": offset, "before": before.hex(), "after": after.hex()}
        )
    return flips


def corrupt(
    dirs: list[str], targets: list[str], mode: str, count: int, seed: int
) -> dict[str, Any]:
    """`count` single-bit flips (mode "flip") at seeded random offsets, or one truncation
    (mode "truncate") to a random length, in files of the `targets` kinds. Files are
    picked in proportion to their size, so every byte is equally likely to be hit. Mode
    "tail" cuts the newest such file of each dir at a random point of its last fsynced
    write (the manifest's `last_flush`), as a disk that lied about that fsync would lose
    it: the entries stored last, the ones a recovery reads, are what it damages. One
    write, so two tails cut seconds apart never take both copies of an entry."""
    files = _candidates(dirs, targets)
    if not files:
        raise RuntimeError(f"no non-empty {'/'.join(targets)} files in {dirs} to corrupt")
    rng = random.Random(seed)
    sizes = [p.stat().st_size for p in files]
    if mode == "flip":
        flips = _flips(files, sizes, count, rng)
        return {"changes": flips, "bytes_changed": len(flips)}
    if mode == "tail":
        cuts = _last_writes_cut(dirs, files, rng)
    else:
        path = rng.choices(files, sizes)[0]
        cuts = [_cut(path, rng.randrange(path.stat().st_size))]
    return {"changes": cuts, "bytes_changed": sum(c["truncated_from"] - c["to"] for c in cuts)}


def _connect(address: tuple[str, int], timeout: float) -> tuple[str, float | None]:
    sock = socket.socket()
    sock.settimeout(timeout)
    start = time.monotonic()
    try:
        sock.connect(address)
        return "passed", (time.monotonic() - start) * 1000
    except ConnectionRefusedError:  # the host answered: only the port is closed
        return "refused", (time.monotonic() - start) * 1000
    except OSError:  # no answer at all: dropped on the way
        return "dropped", None
    finally:
        sock.close()


def probe(targets: dict[str, list[Any]], timeout: float, repeat: int = 1) -> dict[str, Any]:
    """TCP-connect to each target `name: [host, port]` (all at once, `repeat` times each):
    its outcome and the median connect time in ms."""

    def one(address: list[Any]) -> dict[str, Any]:
        runs = [_connect((address[0], int(address[1])), timeout) for _ in range(repeat)]
        times = [ms for outcome, ms in runs if ms is not None]
        ms = round(statistics.median(times), 2) if times else None
        return {"result": runs[-1][0], "ms": ms}

    with ThreadPoolExecutor(max(1, len(targets))) as pool:
        return dict(zip(targets, pool.map(one, targets.values()), strict=True))


OPS = {
    "power-loss": power_loss,
    "move-aside": move_aside,
    "move-back": move_back,
    "wipe": wipe,
    "corrupt": corrupt,
    "probe": probe,
}


class NodeRuntime(Protocol):
    python: str

    def exec(self, name: str, argv: list[str], timeout: float = 60.0) -> tuple[int, str]: ...


async def on_node(runtime: NodeRuntime, node: str, op: str, **params: Any) -> dict[str, Any]:
    """The controller's side: run one op on `node`; its result, or FaultNotProven."""
    argv = [runtime.python, "-m", "nemesis.nodeops", json.dumps({"op": op, **params})]
    code, output = await asyncio.to_thread(runtime.exec, node, argv)
    try:
        result = json.loads(output.strip().splitlines()[-1])
    except (ValueError, IndexError):
        raise FaultNotProven(f"{op} on {node} answered {output!r} (exit {code})") from None
    if code != 0 or "error" in result:
        raise FaultNotProven(f"{op} on {node}: {result.get('error', output)}")
    return result


def main(argv: list[str]) -> int:
    """One op from a JSON argument; prints one JSON line: the result or {"error": ...}."""
    try:
        request = json.loads(argv[0])
        op = OPS[request.pop("op")]
        print(json.dumps(op(**request)))
        return 0
    except Exception as exc:  # reported to the nemesis, which raises FaultNotProven
        print(json.dumps({"error": f"{type(exc).__name__}: {exc}"}))
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
