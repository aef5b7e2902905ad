"""Ledger storage, written behind the journal: memtables, entry logs and a SQLite index.

Entries reach storage only once the journal has made them durable. They sit in an
in-memory layer until a checkpoint, which appends them to entry logs (``current/
entrylog-<id>.log`` in the ledger dirs, one active log per dir, a ledger always routed to
the same dir; a log that holds `log_bytes` is closed and the next flush starts a new id;
logs are never deleted: no compaction), fsyncs those, and then commits, in ONE SQLite
transaction, the index rows ``(scope, ledger, entry) -> (log, offset, length, crc32)``,
the per-ledger state and the journal position the checkpoint covers. Journal files before
that position can then go.

Every stored record carries a CRC32 in the index; a short read or a mismatch raises
:class:`CorruptEntry` (the bookie answers EIO), never "no such entry": an entry the index
says exists must not be reported absent, or recovery could truncate the ledger.

Replay and live requests change state through the same two methods, `apply_state` and
`apply_add`, which are idempotent and order-preserving, so replaying a journal over a
checkpoint that already includes part of it is harmless.
"""

from __future__ import annotations

import asyncio
import sqlite3
import struct
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from bookie_image.probes import reach

from .env import Offload
from .files import AppendFile, FileLayer
from .journal import ADD, FENCED, NO_KEY, STATE, TRUNCATE, Position, Record

LKey = tuple[int, int]  # (scope, ledger)

STORE_DIR = "current"
INDEX = f"{STORE_DIR}/index.sqlite"
LOG_BYTES = 256 * 1024 * 1024
PILE_UP_BYTES = 64 * 1024 * 1024
"""Unflushed entry bytes in memory that call for a checkpoint before the next one is due."""
_LOG_HEADER = struct.Struct("!II")  # length, crc32: lets a scan tell records apart


class NoLedger(Exception):
    """The bookie has never seen this ledger."""


class NoEntry(Exception):
    """The ledger exists here but this entry does not."""


class CorruptEntry(Exception):
    """The index says the entry exists but its bytes cannot be read back intact."""


@dataclass(slots=True)
class LedgerState:
    key: bytes = NO_KEY
    fenced: bool = False
    term: int = -1
    lac: int = -1  # explicit LAC (WRITE_LAC)
    piggy_lac: int = -1  # highest LAC piggybacked on a stored entry
    last_entry: int = -1  # highest entry id stored

    @property
    def known_lac(self) -> int:
        return max(self.lac, self.piggy_lac)


class _Gone:
    """Marker: a newer layer truncated this entry away."""


GONE = _Gone()


class MemLayer:
    """Entries not yet in the index, and truncations not yet applied to it."""

    def __init__(self) -> None:
        self.entries: dict[LKey, dict[int, bytes]] = {}
        self.truncated: dict[LKey, int] = {}

    def __bool__(self) -> bool:
        return bool(self.entries or self.truncated)

    def put(self, lk: LKey, entry_id: int, data: bytes) -> None:
        self.entries.setdefault(lk, {})[entry_id] = data

    def truncate_after(self, lk: LKey, entry_id: int) -> None:
        entries = self.entries.get(lk)
        if entries:
            for eid in [e for e in entries if e > entry_id]:
                del entries[eid]
        self.truncated[lk] = min(self.truncated.get(lk, entry_id), entry_id)

    def lookup(self, lk: LKey, entry_id: int) -> bytes | _Gone | None:
        entries = self.entries.get(lk)
        if entries is not None:
            data = entries.get(entry_id)
            if data is not None:
                return data
        floor = self.truncated.get(lk)
        if floor is not None and entry_id > floor:
            return GONE
        return None


_SCHEMA = """
CREATE TABLE IF NOT EXISTS entries (
    scope INTEGER, ledger INTEGER, entry INTEGER,
    log INTEGER, offset INTEGER, length INTEGER, crc INTEGER,
    PRIMARY KEY (scope, ledger, entry)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS ledgers (
    scope INTEGER, ledger INTEGER, key BLOB, fenced INTEGER, term INTEGER,
    lac INTEGER, piggy_lac INTEGER, PRIMARY KEY (scope, ledger)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS meta (k TEXT PRIMARY KEY, v INTEGER);
"""


def _u64_to_i64(v: int) -> int:
    """SQLite integers are signed 64-bit; store u64 ids bit-for-bit."""
    return v - (1 << 64) if v >= 1 << 63 else v


def _i64_to_u64(v: int) -> int:
    return v + (1 << 64) if v < 0 else v


def _log_name(log_id: int) -> str:
    return f"{STORE_DIR}/entrylog-{log_id:08d}.log"


class Store:
    """Per-ledger state plus entries; `open` it, then `apply_*`, `read` and `checkpoint`."""

    def __init__(
        self,
        dirs: Sequence[FileLayer],
        offload: Offload,
        on_pile_up: Callable[[], None] | None = None,
        log_bytes: int = LOG_BYTES,
    ) -> None:
        """`on_pile_up` is called on each entry applied while PILE_UP_BYTES are unflushed;
        an entry log that holds `log_bytes` is closed and the next flush starts a new one."""
        self._dirs = dirs
        self._log_bytes = log_bytes
        self._offload = offload
        self._on_pile_up = on_pile_up
        self.ledgers: dict[LKey, LedgerState] = {}
        self._layers: list[MemLayer] = [MemLayer()]  # newest first
        self._dirty: set[LKey] = set()
        self._log_dir: dict[int, int] = {}  # log id -> index in dirs
        self._active: dict[int, tuple[int, AppendFile]] = {}  # dir index -> (log id, file)
        self._next_log = 1
        self.checkpointed: Position = (0, 0)
        self._checkpoint_lock = asyncio.Lock()
        self.pending_bytes = 0  # entry bytes applied since the last checkpoint began
        index_path = dirs[0].root / INDEX
        index_path.parent.mkdir(parents=True, exist_ok=True)
        self._writer = sqlite3.connect(index_path, isolation_level=None, check_same_thread=False)
        self._writer.execute("PRAGMA journal_mode=WAL")
        self._writer.execute("PRAGMA synchronous=FULL")
        self._writer.executescript(_SCHEMA)
        self._reader = sqlite3.connect(index_path, isolation_level=None)
        self._load()

    def _load(self) -> None:
        for i, layer in enumerate(self._dirs):
            for name in layer.list(STORE_DIR):
                if name.startswith("entrylog-") and name.endswith(".log"):
                    log_id = int(name[len("entrylog-") : -len(".log")])
                    self._log_dir[log_id] = i
                    self._next_log = max(self._next_log, log_id + 1)
        rows = self._reader.execute(
            "SELECT scope, ledger, key, fenced, term, lac, piggy_lac FROM ledgers"
        )
        for scope, ledger, key, fenced, term, lac, piggy in rows:
            lk = (_i64_to_u64(scope), _i64_to_u64(ledger))
            self.ledgers[lk] = LedgerState(key, bool(fenced), term, lac, piggy)
        rows = self._reader.execute(
            "SELECT scope, ledger, MAX(entry) FROM entries GROUP BY scope, ledger"
        )
        for scope, ledger, last in rows:
            lk = (_i64_to_u64(scope), _i64_to_u64(ledger))
            self.ledgers.setdefault(lk, LedgerState()).last_entry = last
        meta = dict(self._reader.execute("SELECT k, v FROM meta"))
        self.checkpointed = (meta.get("journal_seq", 0), meta.get("journal_offset", 0))

    def close(self) -> None:
        for _, file in self._active.values():
            file.close()
        self._active.clear()
        self._reader.close()
        self._writer.close()

    # -- state changes (live requests and replay alike) ------------------------------------

    def apply_state(
        self, lk: LKey, key: bytes = NO_KEY, term: int = -1, lac: int = -1, fenced: bool = False
    ) -> LedgerState:
        """Merge monotone state: key set once, fence only on, term and LAC only up."""
        st = self.ledgers.get(lk)
        if st is None:
            st = self.ledgers[lk] = LedgerState()
        before = (st.key, st.fenced, st.term, st.lac)
        if st.key == NO_KEY and key != NO_KEY:
            st.key = key
        st.fenced = st.fenced or fenced
        st.term = max(st.term, term)
        st.lac = max(st.lac, lac)
        if before != (st.key, st.fenced, st.term, st.lac):
            self._dirty.add(lk)
        return st

    def apply_add(
        self, lk: LKey, entry_id: int, data: bytes, piggy_lac: int, truncate: bool = False
    ) -> LedgerState:
        """Store a durable entry; with `truncate`, drop every entry after it first."""
        st = self.apply_state(lk)
        layer = self._layers[0]
        if truncate:
            layer.truncate_after(lk, entry_id)
            st.last_entry = entry_id
        else:
            st.last_entry = max(st.last_entry, entry_id)
        layer.put(lk, entry_id, data)
        self.pending_bytes += len(data)
        if self.pending_bytes >= PILE_UP_BYTES and self._on_pile_up is not None:
            self._on_pile_up()
        if piggy_lac > st.piggy_lac:
            st.piggy_lac = piggy_lac
            self._dirty.add(lk)
        return st

    def apply_record(self, record: Record) -> None:
        """Replay one journal record."""
        lk = (record.scope, record.ledger)
        if record.kind == ADD:
            self.apply_state(lk, record.key, record.term)
            self.apply_add(
                lk, record.entry, record.payload, record.lac, bool(record.flags & TRUNCATE)
            )
        elif record.kind == STATE:
            self.apply_state(lk, record.key, record.term, record.lac, bool(record.flags & FENCED))

    # -- reads -----------------------------------------------------------------------------

    def read(self, lk: LKey, entry_id: int) -> tuple[int, bytes]:
        """Return (entry id, entry); entry id -1 means the highest entry stored."""
        st = self.ledgers.get(lk)
        if st is None:
            raise NoLedger
        if entry_id == -1:
            entry_id = st.last_entry
        if entry_id < 0 or entry_id > st.last_entry:
            raise NoEntry
        for layer in self._layers:
            found = layer.lookup(lk, entry_id)
            if found is GONE:
                raise NoEntry
            if found is not None:
                assert isinstance(found, bytes)
                return entry_id, found
        return entry_id, self._read_indexed(lk, entry_id)

    def _read_indexed(self, lk: LKey, entry_id: int) -> bytes:
        try:
            row = self._reader.execute(
                "SELECT log, offset, length, crc FROM entries "
                "WHERE scope=? AND ledger=? AND entry=?",
                (_u64_to_i64(lk[0]), _u64_to_i64(lk[1]), entry_id),
            ).fetchone()
        except sqlite3.DatabaseError as exc:
            raise CorruptEntry(f"index: {exc}") from exc
        if row is None:
            raise NoEntry
        log_id, offset, length, crc = row
        where = self._log_dir.get(log_id)
        if where is None:
            raise CorruptEntry(f"entry log {log_id} is missing")
        try:
            data = self._dirs[where].read_at(_log_name(log_id), offset, length)
        except OSError as exc:
            raise CorruptEntry(f"entry log {log_id}: {exc}") from exc
        if len(data) != length:
            raise CorruptEntry(f"short read in entry log {log_id} at {offset}")
        if zlib.crc32(data) != crc:
            raise CorruptEntry(f"checksum mismatch in entry log {log_id} at {offset}")
        return data

    # -- checkpoints -----------------------------------------------------------------------

    @property
    def needs_checkpoint(self) -> bool:
        return bool(self._dirty) or any(self._layers)

    async def checkpoint(self, position: Position) -> None:
        """Flush everything applied so far and record `position` (the journal's durable
        position, read when the caller decided to checkpoint) as covered.

        Checkpoints run one at a time; a caller arriving during one waits for it and then
        flushes whatever came after. Entries applied after `position` was read may be
        included too: replay from `position` re-applies them, which is idempotent. On
        failure the frozen layers stay readable and the next checkpoint retries them. The
        caller must not cancel a checkpoint: the flush thread would run on unsupervised.
        """
        async with self._checkpoint_lock:
            self._layers.insert(0, MemLayer())
            frozen = self._layers[1:]
            states = {lk: replace(self.ledgers[lk]) for lk in self._dirty}
            self._dirty = set()
            self.pending_bytes = 0
            try:
                rolled = await self._offload.run(self._flush, frozen[::-1], states, position)
            except BaseException:
                self._dirty.update(states)
                raise
            del self._layers[1 : 1 + len(frozen)]
            self.checkpointed = position
            for log_id in rolled:  # on the loop: a real bookie's flush runs in a thread
                reach("entrylog-rolled", log=log_id)

    def _route(self, lk: LKey) -> int:
        # Fixed by the ledger id alone and recorded per log in the index, so reads never
        # depend on it; changing ledger_dirs is refused by the cookie check anyway.
        return (lk[0] + lk[1]) % len(self._dirs)

    def _log_for(self, where: int, rolled: list[int]) -> tuple[int, AppendFile]:
        """The active entry log of dir `where`; a new one (its id added to `rolled`) once
        the active one holds `log_bytes`."""
        active = self._active.get(where)
        if active is not None and active[1].size < self._log_bytes:
            return active
        if active is not None:
            active[1].close()
        log_id = self._next_log
        self._next_log += 1
        file = self._dirs[where].open_append(_log_name(log_id))
        self._log_dir[log_id] = where
        self._active[where] = (log_id, file)
        if active is not None:
            rolled.append(log_id)
        return log_id, file

    def _flush(
        self, layers: list[MemLayer], states: dict[LKey, LedgerState], position: Position
    ) -> list[int]:
        """Runs off the loop: entry logs first (fsynced), then one index transaction.
        Returns the entry logs it started because the active one was full."""
        rolled: list[int] = []
        buffers: dict[int, bytearray] = {}
        bases: dict[int, tuple[int, int]] = {}
        rows_per_layer: list[list[tuple[int, ...]]] = []
        for layer in layers:
            rows = []
            for lk, entries in layer.entries.items():
                where = self._route(lk)
                if where not in buffers:
                    log_id, file = self._log_for(where, rolled)
                    buffers[where] = bytearray()
                    bases[where] = (log_id, file.size)
                log_id, base = bases[where]
                buf = buffers[where]
                scope, ledger = _u64_to_i64(lk[0]), _u64_to_i64(lk[1])
                for entry_id, data in entries.items():
                    crc = zlib.crc32(data)
                    buf += _LOG_HEADER.pack(len(data), crc)
                    rows.append((scope, ledger, entry_id, log_id, base + len(buf), len(data), crc))
                    buf += data
            rows_per_layer.append(rows)
        for where, buf in buffers.items():
            file = self._active[where][1]
            file.write(bytes(buf))
            file.sync()
        db = self._writer
        db.execute("BEGIN")
        try:
            for layer, rows in zip(layers, rows_per_layer, strict=True):
                db.executemany(
                    "DELETE FROM entries WHERE scope=? AND ledger=? AND entry>?",
                    [
                        (_u64_to_i64(s), _u64_to_i64(led), e)
                        for (s, led), e in layer.truncated.items()
                    ],
                )
                db.executemany("INSERT OR REPLACE INTO entries VALUES (?,?,?,?,?,?,?)", rows)
            db.executemany(
                "INSERT OR REPLACE INTO ledgers VALUES (?,?,?,?,?,?,?)",
                [
                    (
                        _u64_to_i64(s),
                        _u64_to_i64(led),
                        st.key,
                        st.fenced,
                        st.term,
                        st.lac,
                        st.piggy_lac,
                    )
                    for (s, led), st in states.items()
                ],
            )
            db.executemany(
                "INSERT OR REPLACE INTO meta VALUES (?, ?)",
                [("journal_seq", position[0]), ("journal_offset", position[1])],
            )
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        self._dirs[0].record_synced(INDEX)
        self._dirs[0].record_synced(INDEX + "-wal")
        return rolled
