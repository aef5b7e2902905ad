"""Ledger metadata and its store on ZooKeeper (kazoo).

Layout under the ledger root (default ``/ledgers``, configurable so tests can use a
fresh root each):

- ``<root>/<name>`` — one znode per ledger holding UTF-8 JSON (see
  :meth:`LedgerMetadata.to_json`). ``<name>`` is the decimal id of a 64-bit ledger, or the
  32-hex-digit qualified name (scope first) of a BP-35 128-bit ledger. The JSON object:
  ``format`` (1), ``scope``, ``ledger``, ``state`` (OPEN / IN_RECOVERY / CLOSED),
  ``last_entry_id`` (−1 until closed), ``length``, ``ensemble_size``, ``write_quorum``,
  ``ack_quorum``, ``digest`` (CRC32 / CRC32C / HMAC_SHA1 / DUMMY), ``password_hash`` (hex
  SHA-256), ``ctime_ms``, ``ensembles`` (``[[first_entry_id, ["host:port", …]], …]``),
  ``custom`` (name → base64), ``mode`` (bounded / unbounded), ``term`` and ``noops``
  (entry ids of the no-ops that ended each term of an unbounded ledger),
  ``max_fragment_entries`` (0, or the fragment size that triggers an ensemble change),
  ``guaranteed_write_quorum`` (every confirmed entry reaches all WQ bookies; absent = false).
- ``<root>/idgen/ID-<seq>`` — transient persistent-sequential znodes: ZooKeeper's sequence
  counter of ``idgen`` hands out ledger ids (created then deleted at once, the counter
  survives; ids are never reused, even after a delete; at most 2^31−1 ids per root).
  ``<root>/idgen-<scope as 16 hex digits>`` does the same within one BP-35 scope.
- ``<root>/available/<host:port>`` — writable bookies (ephemeral, written by bookies);
  ``<root>/available/readonly/<host:port>`` — read-only ones, never chosen for writes.

Every update is a compare-and-set on the znode version; on a version conflict the store
re-reads the znode and re-applies the caller's change to the fresh copy, so the caller's
``mutate`` function decides whether its change still makes sense (the merge).
"""

from __future__ import annotations

import asyncio
import base64
import enum
import json
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

from kazoo.client import KazooClient
from kazoo.exceptions import (
    BadVersionError,
    KazooException,
    NodeExistsError,
    NoNodeError,
)
from kazoo.handlers.threading import KazooTimeoutError

from bookie_image.bugs import NO_BUGS, Bugs
from bookie_image.client.errors import (
    LedgerExistsError,
    MetadataError,
    NoSuchLedgerError,
)
from bookie_image.probes import reach
from bookie_image.protocol import LedgerId

__all__ = [
    "LedgerMetadata",
    "LedgerState",
    "Versioned",
    "ZkMetadataStore",
    "ledger_name",
]

FORMAT_VERSION = 1
_T = TypeVar("_T")


def ledger_name(scope: int, ledger: int) -> int | str:
    """Public id of a ledger: the int for 64-bit ids, the BP-35 qualified name (32 lowercase
    hex digits, scope first) for 128-bit ones."""
    return ledger if scope == 0 else f"{scope:016x}{ledger:016x}"


class LedgerState(enum.Enum):
    OPEN = "OPEN"
    IN_RECOVERY = "IN_RECOVERY"
    CLOSED = "CLOSED"


Ensemble = tuple[str, ...]


@dataclass(frozen=True)
class LedgerMetadata:
    """One ledger's metadata; immutable, changed with :func:`dataclasses.replace`."""

    ledger: int
    ensemble_size: int
    write_quorum: int
    ack_quorum: int
    digest: str  # DigestType name, e.g. "CRC32C"
    password_hash: str  # hex SHA-256 of the password, to reject a wrong one on open
    ensembles: tuple[tuple[int, Ensemble], ...]  # (first entry id, bookie ids), ascending
    scope: int = 0
    state: LedgerState = LedgerState.OPEN
    last_entry_id: int = -1
    length: int = 0
    ctime_ms: int = 0
    custom: Mapping[str, bytes] = field(default_factory=dict)
    # Unbounded ledgers (reference 000): writers take over by raising the term; each
    # takeover leaves a no-op entry (the one carrying the truncate flag), recorded here.
    # Reads and recovery know a no-op by its payload (ledger.py), not by this record: a
    # takeover that failed before its metadata update left one that is not in it.
    unbounded: bool = False
    term: int = 0
    noops: tuple[int, ...] = ()
    max_fragment_entries: int = 0  # > 0: a fragment that holds this many entries is rotated
    # Guaranteed write quorum (reference 000): an entry stays pending until every bookie of
    # its write set has it, replacing any that fails even after the ack quorum answered.
    guaranteed_write_quorum: bool = False

    @property
    def name(self) -> int | str:
        return ledger_name(self.scope, self.ledger)

    @property
    def closed(self) -> bool:
        return self.state is LedgerState.CLOSED

    def ensemble_at(self, entry_id: int) -> tuple[int, Ensemble]:
        """The fragment that holds ``entry_id``: (its first entry id, its bookies)."""
        chosen = self.ensembles[0]
        for first, bookies in self.ensembles:
            if first > entry_id:
                break
            chosen = (first, bookies)
        return chosen

    @property
    def last_ensemble(self) -> tuple[int, Ensemble]:
        return self.ensembles[-1]

    def with_ensemble(self, first_entry_id: int, bookies: Ensemble) -> LedgerMetadata:
        """Start a new fragment at ``first_entry_id`` (replacing one that starts there: an
        ensemble change before any entry of the last fragment was confirmed)."""
        kept = tuple(e for e in self.ensembles if e[0] < first_entry_id)
        return replace(self, ensembles=(*kept, (first_entry_id, tuple(bookies))))

    def to_json(self) -> bytes:
        doc: dict[str, Any] = {
            "format": FORMAT_VERSION,
            "scope": self.scope,
            "ledger": self.ledger,
            "state": self.state.value,
            "last_entry_id": self.last_entry_id,
            "length": self.length,
            "ensemble_size": self.ensemble_size,
            "write_quorum": self.write_quorum,
            "ack_quorum": self.ack_quorum,
            "digest": self.digest,
            "password_hash": self.password_hash,
            "ctime_ms": self.ctime_ms,
            "ensembles": [[first, list(bookies)] for first, bookies in self.ensembles],
            "custom": {k: base64.b64encode(v).decode() for k, v in sorted(self.custom.items())},
            "mode": "unbounded" if self.unbounded else "bounded",
            "term": self.term,
            "noops": list(self.noops),
            "max_fragment_entries": self.max_fragment_entries,
            "guaranteed_write_quorum": self.guaranteed_write_quorum,
        }
        return json.dumps(doc, sort_keys=True).encode()

    @classmethod
    def from_json(cls, data: bytes) -> LedgerMetadata:
        doc = json.loads(data)
        if doc.get("format") != FORMAT_VERSION:
            raise ValueError(f"unsupported ledger metadata format {doc.get('format')!r}")
        return cls(
            scope=doc["scope"],
            ledger=doc["ledger"],
            state=LedgerState(doc["state"]),
            last_entry_id=doc["last_entry_id"],
            length=doc["length"],
            ensemble_size=doc["ensemble_size"],
            write_quorum=doc["write_quorum"],
            ack_quorum=doc["ack_quorum"],
            digest=doc["digest"],
            password_hash=doc["password_hash"],
            ctime_ms=doc["ctime_ms"],
            ensembles=tuple((first, tuple(bookies)) for first, bookies in doc["ensembles"]),
            custom={k: base64.b64decode(v) for k, v in doc["custom"].items()},
            unbounded=doc["mode"] == "unbounded",
            term=doc["term"],
            noops=tuple(doc["noops"]),
            max_fragment_entries=doc["max_fragment_entries"],
            guaranteed_write_quorum=doc.get("guaranteed_write_quorum", False),
        )


@dataclass(frozen=True, slots=True)
class Versioned:
    """Metadata plus the znode version it was read or written at (the CAS token)."""

    metadata: LedgerMetadata
    version: int


class ZkMetadataStore:
    """Ledger metadata in ZooKeeper. kazoo is synchronous, so calls run in a thread.

    ``client`` (a kazoo-compatible client) and ``call`` (how a blocking call is awaited)
    let a deterministic simulation put its own ZooKeeper behind the same store. ``bugs``:
    the seeded bugs of the client it serves."""

    def __init__(
        self,
        hosts: str,
        root: str = "/ledgers",
        *,
        timeout: float = 10.0,
        client: Any = None,
        call: Callable[..., Awaitable[Any]] = asyncio.to_thread,
        bugs: Bugs = NO_BUGS,
    ) -> None:
        self.root = root.rstrip("/") or "/"
        self.bugs = bugs
        self._timeout = timeout
        self._zk = client if client is not None else KazooClient(hosts=hosts, timeout=timeout)
        self._run = call

    async def start(self) -> None:
        await self._call(self._zk.start, self._timeout, write=False)
        for path in (self._idgen, self._available):
            await self._call(self._zk.ensure_path, path, write=False)

    async def close(self) -> None:
        await self._run(self._zk.stop)
        await self._run(self._zk.close)

    @property
    def _idgen(self) -> str:
        return f"{self.root}/idgen"

    @property
    def _available(self) -> str:
        return f"{self.root}/available"

    def path(self, name: int | str) -> str:
        """The znode of a ledger, whichever spelling of its id the caller used."""
        ledger = LedgerId.parse(name)
        return f"{self.root}/{ledger_name(ledger.scope, ledger.id)}"

    async def new_ledger_id(self, scope: int = 0) -> int:
        """A fresh id from a ZooKeeper sequence counter; each BP-35 scope has its own."""
        parent = self._idgen if scope == 0 else f"{self._idgen}-{scope:016x}"
        if scope:
            await self._call(self._zk.ensure_path, parent, write=True)
        created = await self._call(self._zk.create, f"{parent}/ID-", b"", sequence=True, write=True)
        await self._call(self._zk.delete, created, write=True)
        return int(created.rsplit("-", 1)[1])

    async def create(self, metadata: LedgerMetadata) -> Versioned:
        try:
            await self._call(
                self._zk.create, self.path(metadata.name), metadata.to_json(), write=True
            )
        except NodeExistsError:
            raise LedgerExistsError(
                f"ledger {metadata.name} already exists", may_have_happened=False
            ) from None
        return Versioned(metadata, 0)

    async def read(self, name: int | str) -> Versioned:
        try:
            data, stat = await self._call(self._zk.get, self.path(name), write=False)
        except NoNodeError:
            raise NoSuchLedgerError(
                f"ledger {name} does not exist", may_have_happened=False
            ) from None
        return Versioned(LedgerMetadata.from_json(data), stat.version)

    async def update(
        self, current: Versioned, mutate: Callable[[LedgerMetadata], LedgerMetadata]
    ) -> Versioned:
        """Compare-and-set ``mutate(current)``; on a version conflict re-read and re-apply.

        ``mutate`` raises (a :class:`BKError`) when the fresh metadata makes the change
        impossible; when it returns the metadata unchanged nothing is written.
        """
        while True:
            wanted = mutate(current.metadata)
            if wanted == current.metadata:
                return current
            # The seeded bug writes blindly, overwriting whatever a racing client wrote.
            version = -1 if self.bugs.enabled("metadata-blind-write") else current.version
            try:
                stat = await self._call(
                    self._zk.set, self.path(wanted.name), wanted.to_json(), version, write=True
                )
            except BadVersionError:
                reach("metadata-cas-conflict", ledger=wanted.name)
                current = await self.read(wanted.name)
                continue
            except NoNodeError:
                raise NoSuchLedgerError(
                    f"ledger {wanted.name} was deleted", may_have_happened=False
                ) from None
            return Versioned(wanted, stat.version)

    async def delete(self, name: int | str) -> None:
        try:
            await self._call(self._zk.delete, self.path(name), write=True)
        except NoNodeError:
            raise NoSuchLedgerError(
                f"ledger {name} does not exist", may_have_happened=False
            ) from None

    async def available_bookies(self) -> list[str]:
        """Writable bookies: children of ``available`` except the ``readonly`` subtree."""
        children = await self._call(self._zk.get_children, self._available, write=False)
        return sorted(c for c in children if c != "readonly")

    async def _call(self, fn: Callable[..., _T], *args: Any, write: bool, **kw: Any) -> _T:
        """Run a kazoo call in a thread, turning connection trouble into MetadataError."""
        try:
            return await self._run(fn, *args, **kw)
        except (NoNodeError, NodeExistsError, BadVersionError):
            raise
        except (KazooException, KazooTimeoutError, TimeoutError) as exc:
            raise MetadataError(
                f"ZooKeeper {getattr(fn, '__name__', fn)} failed: {exc!r}",
                may_have_happened=write,
            ) from exc
