"""The journal: an append-only log of every mutation, with group commit.

A request's record is queued; the writer task takes up to `max_batch` queued records
(letting the batch grow while requests keep arriving, at most `max_wait` after the oldest
one), writes them with one write, issues ONE fsync for the whole batch and only then
calls each record's completion callback, in
order. So an add is acknowledged only after the fsync that covers it, and the cost of an
fsync is shared by every request in flight.

Files are ``current/journal-<seq>.log`` in the journal dir. A file that holds `file_bytes`
is closed and the next batch starts the next sequence number (a rollover); so does a
restart, which never appends to an old file (its tail may be torn). A position
``(seq, offset)`` names the end of a durable batch; the ledger storage checkpoints one,
after which older files are deleted, and a replay reads the checkpoint's file from its
offset and every later file from its start.

Record layout: ``u32 body_length, u32 crc32(body), body`` with body
``u8 kind, u64 scope, u64 ledger, i64 entry, i64 lac, i64 term, u8 flags, master_key[20],
payload``. For ADD, `entry` is the entry id, `lac` the LAC piggybacked on the entry and
`payload` the entry; for STATE, `lac` is an explicit LAC (-1: none) and `flags` may carry
FENCED. `term` is -1 when the request carried none.
"""

from __future__ import annotations

import asyncio
import struct
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from bookie_image import buggify
from bookie_image.probes import reach

from .env import Clock, Offload
from .files import AppendFile, FileLayer

ADD = 1
STATE = 2

# flags
RECOVERY = 0x01
TRUNCATE = 0x02
FENCED = 0x04

NO_KEY = bytes(20)
SHORT_RECORD = "short record"  # a BadRecord's reason when a file ends mid-record (torn)
JOURNAL_DIR = "current"
FILE_BYTES = 64 * 1024 * 1024
BATCH_BYTES = 4 * 1024 * 1024  # a batch of large entries goes before max_batch is reached

_FRAME = struct.Struct("!II")
_BODY = struct.Struct("!BQQqqqB20s")

Position = tuple[int, int]
Done = Callable[[BaseException | None], None]


@dataclass(frozen=True, slots=True)
class Record:
    kind: int
    scope: int
    ledger: int
    entry: int
    lac: int
    term: int
    flags: int
    key: bytes
    payload: bytes = b""

    def encode(self) -> bytes:
        body = _BODY.pack(
            self.kind,
            self.scope,
            self.ledger,
            self.entry,
            self.lac,
            self.term,
            self.flags,
            self.key,
        )
        body += self.payload
        return _FRAME.pack(len(body), zlib.crc32(body)) + body


def file_name(seq: int) -> str:
    return f"{JOURNAL_DIR}/journal-{seq:016d}.log"


def _seq_of(name: str) -> int | None:
    if name.startswith("journal-") and name.endswith(".log"):
        digits = name[len("journal-") : -len(".log")]
        if digits.isdigit():
            return int(digits)
    return None


def journal_seqs(files: FileLayer) -> list[int]:
    return sorted(s for s in map(_seq_of, files.list(JOURNAL_DIR)) if s is not None)


@dataclass(frozen=True)
class BadRecord:
    """Where replay of one file stopped early: a torn tail or a corrupt record."""

    seq: int
    offset: int
    reason: str


def replay(
    files: FileLayer, start: Position, on_bad: Callable[[BadRecord], None]
) -> Iterator[tuple[Record, Position]]:
    """Yield every intact record after `start`, each with the position just past it.

    A file is read up to its first damaged record (reported through `on_bad`); later files
    are still read, because each starts from a clean batch boundary.
    """
    start_seq, start_offset = start
    for seq in journal_seqs(files):
        if seq < start_seq:
            continue
        name = file_name(seq)
        data = files.read_all(name)
        offset = start_offset if seq == start_seq else 0
        while offset < len(data):
            if len(data) - offset < _FRAME.size + _BODY.size:
                on_bad(BadRecord(seq, offset, SHORT_RECORD))
                break
            length, crc = _FRAME.unpack_from(data, offset)
            body = data[offset + _FRAME.size : offset + _FRAME.size + length]
            if length < _BODY.size or len(body) < length:
                on_bad(BadRecord(seq, offset, SHORT_RECORD))
                break
            if zlib.crc32(body) != crc:
                on_bad(BadRecord(seq, offset, "checksum mismatch"))
                break
            offset += _FRAME.size + length
            record = Record(*_BODY.unpack_from(body), body[_BODY.size :])
            yield record, (seq, offset)


class Journal:
    """Group-committing journal writer. Call `start()` inside the running loop."""

    def __init__(
        self,
        files: FileLayer,
        clock: Clock,
        offload: Offload,
        max_batch: int = 512,
        max_wait_s: float = 0.001,
        file_bytes: int = FILE_BYTES,
        after_seq: int = 0,
    ) -> None:
        """`after_seq`: the checkpointed sequence number. New files must sort after it even
        when every journal file has been deleted, or replay would skip them."""
        self._files = files
        self._clock = clock
        self._offload = offload
        self._max_batch = max_batch
        self._max_wait = max_wait_s
        self._file_bytes = file_bytes
        seqs = journal_seqs(files)
        self._seq = max(seqs[-1] if seqs else 0, after_seq) + 1
        self._file: AppendFile | None = None
        self._queue: list[tuple[bytes, Done]] = []
        self._first_at = 0.0
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.durable: Position = (self._seq, 0)
        self.batches = 0
        self.wrote = asyncio.Event()
        """Set after each batch is written (or failed): what a stats reporter waits for."""
        self._writing = False

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="journal")

    async def close(self) -> None:
        """Finish every queued batch (so queued requests get their answers), then stop."""
        while self._task is not None and (self._queue or self._writing):
            await asyncio.sleep(0.001)
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        if self._file is not None:
            self._file.close()
            self._file = None

    def append(self, record: Record, done: Done) -> None:
        """Queue `record`; `done(None)` runs after its fsync, `done(exc)` if that failed."""
        if not self._queue:
            self._first_at = self._clock.monotonic()
            self._wake.set()
        self._queue.append((record.encode(), done))

    def release_before(self, seq: int) -> None:
        """Delete journal files older than `seq` (their records are checkpointed)."""
        for old in journal_seqs(self._files):
            if old < seq:
                self._files.remove(file_name(old))

    async def _run(self) -> None:
        while True:
            if not self._queue:
                self._wake.clear()
                await self._wake.wait()
            if pause := buggify.delay("bookie-journal-delay"):
                await asyncio.sleep(pause)
            await self._gather()
            take, size = 0, 0
            while take < min(self._max_batch, len(self._queue)) and (
                take == 0 or size + len(self._queue[take][0]) <= BATCH_BYTES
            ):
                size += len(self._queue[take][0])
                take += 1
            batch = self._queue[:take]
            del self._queue[:take]
            self._first_at = self._clock.monotonic()
            self._writing = True
            try:
                self.durable = await self._offload.run(
                    self._write, b"".join(data for data, _ in batch)
                )
                error: BaseException | None = None
            except OSError as exc:
                error = exc
            finally:
                self._writing = False
            self.batches += 1
            self.wrote.set()
            for _, done in batch:
                try:
                    done(error)
                except Exception as exc:  # one bad callback must not stop every later ack
                    asyncio.get_running_loop().call_exception_handler(
                        {"message": "journal completion callback failed", "exception": exc}
                    )

    async def _gather(self) -> None:
        """Let a batch grow while requests keep arriving, for at most `max_wait`.

        Each pass yields one loop iteration, so requests already sitting in socket buffers
        join the batch; once an iteration brings nothing new, waiting longer would only add
        latency (nobody else is about to write), so the batch goes.
        """
        while len(self._queue) < self._max_batch:
            if self._clock.monotonic() - self._first_at >= self._max_wait:
                return
            queued = len(self._queue)
            await asyncio.sleep(0)
            if len(self._queue) == queued:
                return

    def _write(self, data: bytes) -> Position:
        """Through the offload: write one batch, fsync once, return the durable position."""
        if self._file is not None and self._file.size >= self._file_bytes:
            self._file.close()
            self._file = None
            self._seq += 1
            reach("journal-rolled", file=self._seq)
        if self._file is None:
            self._file = self._files.open_append(file_name(self._seq))
        try:
            self._file.write(data)
            self._file.sync()
        except OSError:
            # The file may end in a partial batch: never append after it.
            self._file.close()
            self._file = None
            self._seq += 1
            raise
        return (self._seq, self._file.size)
