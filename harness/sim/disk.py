"""Simulated disks: the bookie's file layer (bookie_image/bookie/files.py) in memory.

Each data dir of a simulated bookie is a `SimDisk` that outlives the bookie's process:
files are byte arrays with the length last fsynced beside them. A crash (kill) keeps
every written byte, as the page cache survives a killed process; a power loss drops the
bytes written since each file's last fsync, exactly what the power-loss nemesis does to a
real disk; corruption flips bytes; a wipe pulls the disk out, leaving a blank one, until
it is put back. The layer a process holds becomes unusable when its process dies (a dead
process writes nothing more).

The SQLite index is not simulated: SQLite writes under `root` on a real scratch
directory (tmpfs where there is one) and its committed transactions are durable, which is
what `PRAGMA synchronous=FULL` promises on a real disk.
"""

from __future__ import annotations

import random
import shutil
from pathlib import Path
from typing import Any

from nemesis.nodeops import ASIDE, last_write_cut

DISK_BYTES = 1 << 30
"""The size of a simulated disk: what its usage (the bookie's read-only threshold) is of."""


class SimDisk:
    """The contents of one data dir: path -> bytes, plus each file's fsynced length and
    where its last fsynced write began (the real manifest's `last_flush`)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.files: dict[str, bytearray] = {}
        self.synced: dict[str, int] = {}
        self.last_flush: dict[str, int] = {}
        self.incarnation = 0  # bumped when the process using the disk dies
        self.ballast = 0  # bytes a `fill-disk` fault holds (harness/sim/diskfull.py)
        self._aside: tuple[dict[str, bytearray], dict[str, int], dict[str, int]] | None = None

    @property
    def name(self) -> str:
        """The disk as a history names it, `<bookie>/<dir>` (`b3/journal`): `root` lies in
        a scratch directory named anew by every run, and a history that named it would
        make two runs of one seed differ."""
        return f"{self.root.parent.name}/{self.root.name}"

    def usage(self) -> float:
        """The fraction of the disk in use: its files and any ballast, of `DISK_BYTES`."""
        stored = sum(map(len, self.files.values()))
        return min(1.0, (stored + self.ballast) / DISK_BYTES)

    def fill(self, fraction: float) -> int:
        """Write ballast until `fraction` of the disk is in use; returns its bytes."""
        stored = sum(map(len, self.files.values()))
        self.ballast = max(0, round(fraction * DISK_BYTES) - stored)
        return self.ballast

    def crash(self) -> None:
        """The process died: its open layer may no longer touch the disk."""
        self.incarnation += 1

    def lose_power(self) -> dict[str, int]:
        """Drop every byte not covered by an fsync; returns the bytes lost per file."""
        lost = {}
        for rel, data in self.files.items():
            keep = self.synced.get(rel, 0)
            if len(data) > keep:
                lost[rel] = len(data) - keep
                del data[keep:]
        return lost

    def corrupt(self, rng: random.Random, prefix: str = "") -> dict[str, Any] | None:
        """Flip one bit at a seeded place of a seeded non-empty file whose path starts
        with `prefix`; returns where, or None if there is no such file."""
        names = sorted(rel for rel, data in self.files.items() if data and rel.startswith(prefix))
        if not names:
            return None
        rel = rng.choice(names)
        offset = rng.randrange(len(self.files[rel]))
        bit = rng.randrange(8)
        self.files[rel][offset] ^= 1 << bit
        return {"file": rel, "offset": offset, "bit": bit}

    def cut_tail(self, rng: random.Random, prefix: str) -> dict[str, Any] | None:
        """`corrupt` mode `tail`: cut the newest non-empty file whose path starts with
        `prefix` at a seeded point of the last write fsynced into it, as the real nemesis
        does (nemesis.nodeops.corrupt); returns the cut, or None if there is no such file."""
        names = sorted(rel for rel, data in self.files.items() if data and rel.startswith(prefix))
        if not names:
            return None
        rel = names[-1]  # log ids are zero-padded and only grow: the newest sorts last
        data = self.files[rel]
        size = len(data)
        to = last_write_cut(rng, self.last_flush.get(rel, 0), size)
        del data[to:]
        return {"file": rel, "truncated_from": size, "to": to}

    @property
    def pulled(self) -> bool:
        return self._aside is not None

    def pull(self) -> dict[str, int]:
        """The `wipe` nemesis: the disk is pulled and a blank one takes its place. Its files
        move aside, and so does the real dir under `root` (the SQLite index); returns what
        moved, as the real nemesis's proof counts it."""
        if self._aside is not None:
            raise RuntimeError(f"{self.name} is already aside")
        moved = {"files": len(self.files), "bytes": sum(map(len, self.files.values()))}
        self._aside = (self.files, self.synced, self.last_flush)
        self.files, self.synced, self.last_flush = {}, {}, {}
        if self.root.exists():
            self.root.rename(self._real_aside)
        return moved

    def put_back(self) -> dict[str, int]:
        """`restore`: the original disk back, whatever the blank one got dropped."""
        if self._aside is None:
            raise RuntimeError(f"nothing aside for {self.name}")
        self.files, self.synced, self.last_flush = self._aside
        self._aside = None
        shutil.rmtree(self.root, ignore_errors=True)
        if self._real_aside.exists():
            self._real_aside.rename(self.root)
        return {"files": len(self.files), "bytes": sum(map(len, self.files.values()))}

    @property
    def _real_aside(self) -> Path:
        return self.root.parent / f"{ASIDE}-{self.root.name}"


class _Dead(OSError):
    def __init__(self) -> None:
        super().__init__(5, "the process owning this file layer is dead (simulation)")


class SimFile:
    """An append-only file of a `SimFileLayer`."""

    def __init__(self, layer: SimFileLayer, rel: str) -> None:
        self._layer = layer
        self._rel = rel

    @property
    def size(self) -> int:
        return len(self._layer.data(self._rel))

    def write(self, data: bytes) -> None:
        self._layer.data(self._rel).extend(data)

    def sync(self) -> None:
        if self._layer.fsync:
            self._layer.note_synced(self._rel)
            self._layer.syncs += 1

    def close(self) -> None:
        pass


class SimFileLayer:
    """`FileLayer` over a `SimDisk`, valid for the incarnation it was opened in."""

    def __init__(self, disk: SimDisk, fsync: bool = True) -> None:
        self.disk = disk
        self.root = disk.root
        self.fsync = fsync
        self.syncs = 0
        self._incarnation = disk.incarnation

    def data(self, rel: str) -> bytearray:
        self._alive()
        try:
            return self.disk.files[rel]
        except KeyError:
            raise FileNotFoundError(2, f"no such file: {rel}") from None

    def note_synced(self, rel: str) -> None:
        self.disk.last_flush[rel] = self.disk.synced.get(rel, 0)
        self.disk.synced[rel] = len(self.data(rel))

    def _alive(self) -> None:
        if self._incarnation != self.disk.incarnation:
            raise _Dead

    def open_append(self, rel: str) -> SimFile:
        self._alive()
        self.disk.files.setdefault(rel, bytearray())
        return SimFile(self, rel)

    def read_at(self, rel: str, offset: int, length: int) -> bytes:
        return bytes(self.data(rel)[offset : offset + length])

    def read_all(self, rel: str) -> bytes:
        return bytes(self.data(rel))

    def write_atomic(self, rel: str, data: bytes) -> None:
        self._alive()
        self.disk.files[rel] = bytearray(data)
        self.note_synced(rel)

    def remove(self, rel: str) -> None:
        self._alive()
        self.disk.files.pop(rel, None)
        self.disk.synced.pop(rel, None)

    def record_synced(self, rel: str) -> None:
        if rel in self.disk.files:
            self.note_synced(rel)

    def usage(self) -> float:
        self._alive()
        return self.disk.usage()

    def list(self, rel_dir: str) -> list[str]:
        self._alive()
        prefix = rel_dir.rstrip("/") + "/" if rel_dir else ""
        return sorted(
            {
                rel[len(prefix) :].split("/", 1)[0]
                for rel in self.disk.files
                if rel.startswith(prefix)
            }
        )
