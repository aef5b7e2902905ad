"""The file layer: every durable write of the bookie goes through here.

Why a layer of its own: the power-loss nemesis must drop exactly the bytes that were never
fsynced. After each fsync this layer records the fsynced length of the file in a sidecar
manifest, ``<data dir>/.fsynced.json`` (``{"files": {relative path: length}}``), replaced
atomically (write a temporary file, rename). The manifest is written *after* the fsync and
*before* the caller acknowledges anything, so truncating every listed file to its recorded
length never drops acknowledged data. Files absent from the manifest were never fsynced
(truncate them to 0); a dir without a manifest has had nothing fsynced yet. The manifest
also says where each file's last fsynced write began (``"last_flush"``: relative path ->
the length fsynced before it, since this process opened the layer), which the `corrupt`
nemesis's `tail` mode cuts into: what a disk that lied about that fsync would lose.

SQLite files (the index) are fsynced by SQLite itself; the storage records their lengths
after each committed checkpoint through :meth:`FileLayer.record_synced`.

The :class:`FileLayer` protocol is small so that a deterministic simulation can swap in
an in-memory disk.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from pathlib import Path
from typing import Protocol

MANIFEST = ".fsynced.json"


class AppendFile(Protocol):
    """An append-only file opened through the layer."""

    @property
    def size(self) -> int: ...

    def write(self, data: bytes) -> None: ...

    def sync(self) -> None:
        """fsync the file, then record its length in the manifest."""

    def close(self) -> None: ...


class FileLayer(Protocol):
    """Durable file operations under one data directory (paths are relative to it)."""

    root: Path
    syncs: int  # fsyncs of append files so far (the service reports them)

    def open_append(self, rel: str) -> AppendFile: ...

    def read_at(self, rel: str, offset: int, length: int) -> bytes: ...

    def read_all(self, rel: str) -> bytes: ...

    def write_atomic(self, rel: str, data: bytes) -> None:
        """Replace a small file durably (tmp + fsync + rename + dir fsync)."""

    def remove(self, rel: str) -> None: ...

    def record_synced(self, rel: str) -> None:
        """Record the current length of a file that someone else (SQLite) fsynced."""

    def list(self, rel_dir: str) -> list[str]: ...

    def usage(self) -> float:
        """The fraction of the disk under `root` in use (the read-only threshold's
        measure); raises OSError if it cannot be read."""


class OsFile:
    """An append-only OS file; `sync` fsyncs and updates the owning layer's manifest."""

    def __init__(self, layer: OsFileLayer, rel: str, fd: int, size: int) -> None:
        self._layer = layer
        self._rel = rel
        self._fd = fd
        self._size = size

    @property
    def size(self) -> int:
        return self._size

    def write(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            written = os.write(self._fd, view)
            view = view[written:]
            self._size += written

    def sync(self) -> None:
        if self._layer.fsync:
            # fdatasync: the data and the new length, without waiting for mtime.
            os.fdatasync(self._fd)
            self._layer.syncs += 1
            self._layer.note_synced(self._rel, self._size)

    def close(self) -> None:
        os.close(self._fd)


class OsFileLayer:
    """The real disk, under `root`.

    `fsync=False` (config `journal_fsync`, or the seeded bug `no-journal-fsync`) makes
    `AppendFile.sync` a no-op that records nothing; small atomic files and directory
    entries are always fsynced.
    """

    def __init__(self, root: Path, fsync: bool = True) -> None:
        self.root = root
        self.fsync = fsync
        self.syncs = 0  # fsyncs of append files: how tests and benches see group commit
        self._read_fds: dict[str, int] = {}
        self._synced: dict[str, int] = self._load_manifest()
        self._last_flush: dict[str, int] = {}

    def _load_manifest(self) -> dict[str, int]:
        try:
            data = json.loads((self.root / MANIFEST).read_text())
            return {str(k): int(v) for k, v in data["files"].items()}
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return {}

    def _write_manifest(self) -> None:
        # No fsync of the manifest itself: the nemesis that reads it runs after SIGKILL,
        # when the page cache (and so a renamed manifest) survives.
        tmp = self.root / (MANIFEST + ".tmp")
        manifest = {"files": self._synced, "last_flush": self._last_flush}
        tmp.write_text(json.dumps(manifest, sort_keys=True))
        os.replace(tmp, self.root / MANIFEST)

    def note_synced(self, rel: str, length: int) -> None:
        self._last_flush[rel] = self._synced.get(rel, 0)
        self._synced[rel] = length
        self._write_manifest()

    def _sync_dir(self, rel_dir: Path) -> None:
        fd = os.open(self.root / rel_dir, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def open_append(self, rel: str) -> OsFile:
        path = self.root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self._sync_dir(Path(rel).parent)
        return OsFile(self, rel, fd, os.fstat(fd).st_size)

    def read_at(self, rel: str, offset: int, length: int) -> bytes:
        fd = self._read_fds.get(rel)
        if fd is None:
            fd = self._read_fds[rel] = os.open(self.root / rel, os.O_RDONLY)
        return os.pread(fd, length, offset)

    def read_all(self, rel: str) -> bytes:
        return (self.root / rel).read_bytes()

    def write_atomic(self, rel: str, data: bytes) -> None:
        path = self.root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
        self._sync_dir(Path(rel).parent)
        self.note_synced(rel, len(data))

    def remove(self, rel: str) -> None:
        fd = self._read_fds.pop(rel, None)
        if fd is not None:
            os.close(fd)
        (self.root / rel).unlink(missing_ok=True)
        self._sync_dir(Path(rel).parent)
        self._last_flush.pop(rel, None)
        if self._synced.pop(rel, None) is not None:
            self._write_manifest()

    def record_synced(self, rel: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.note_synced(rel, (self.root / rel).stat().st_size)

    def usage(self) -> float:
        usage = shutil.disk_usage(self.root)
        return 1 - usage.free / usage.total

    def list(self, rel_dir: str) -> list[str]:
        try:
            return sorted(p.name for p in (self.root / rel_dir).iterdir())
        except FileNotFoundError:
            return []

    def close(self) -> None:
        for fd in self._read_fds.values():
            os.close(fd)
        self._read_fds.clear()
