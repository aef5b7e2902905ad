"""The client entry point: create, open (with or without recovery) and delete ledgers."""

from __future__ import annotations

import asyncio
import random
import threading
import time
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterator, Mapping
from concurrent.futures import Future
from types import TracebackType
from typing import Any

from bookie_image.bugs import NO_BUGS, Bugs
from bookie_image.client.errors import NotEnoughBookiesError
from bookie_image.client.ledger import (
    ClientContext,
    LedgerHandle,
    ReadHandle,
    check_password,
    password_hash,
)
from bookie_image.client.metadata import LedgerMetadata, ZkMetadataStore
from bookie_image.client.quorum import QuorumConfig
from bookie_image.client.recovery import recover
from bookie_image.client.transport import BookieTransport, TcpTransport
from bookie_image.protocol import DigestType, master_key_for

__all__ = ["BookKeeper", "SyncBookKeeper"]


class BookKeeper:
    """An asyncio BookKeeper client; use as ``async with BookKeeper(zk=...) as bk``.

    ``ledgers_root`` is the ZooKeeper path of the metadata (bookies must register under the
    same root). A bookie that has not acknowledged an add within ``add_timeout`` seconds is
    replaced by an ensemble change; reads give up on a bookie after ``read_timeout`` and ask
    the next one of the write set already after ``speculative_timeout``. ``transport``
    replaces TCP (e.g. by a simulated network); ``clock`` gives the wall-clock milliseconds
    recorded as a ledger's ctime. Every other timing goes through the running event loop.
    ``metadata`` replaces the ZooKeeper store built from ``zk`` (a simulation's own).
    ``bugs``: the seeded bugs this client has (`bookie_image/bugs.py`; the store given as
    ``metadata`` has its own). ``rng`` picks ensembles (a simulation passes a seeded one).
    """

    def __init__(
        self,
        zk: str,
        *,
        ledgers_root: str = "/ledgers",
        add_timeout: float = 10.0,
        read_timeout: float = 10.0,
        speculative_timeout: float = 0.5,
        zk_timeout: float = 10.0,
        transport: BookieTransport | None = None,
        clock: Callable[[], int] = lambda: time.time_ns() // 1_000_000,
        metadata: ZkMetadataStore | None = None,
        bugs: Bugs = NO_BUGS,
        rng: random.Random | None = None,
    ) -> None:
        self._store = metadata or ZkMetadataStore(zk, ledgers_root, timeout=zk_timeout, bugs=bugs)
        self._ctx = ClientContext(
            self._store,
            transport or TcpTransport(),
            add_timeout,
            read_timeout,
            speculative_timeout,
            bugs,
            rng or random.Random(),
        )
        self._clock = clock

    async def __aenter__(self) -> BookKeeper:
        await self._store.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        await self._ctx.close()
        await self._store.close()

    async def create_ledger(
        self,
        *,
        ensemble: int = 3,
        write_quorum: int = 2,
        ack_quorum: int = 2,
        password: bytes = b"",
        digest: str = "crc32c",
        custom: Mapping[str, bytes] | None = None,
        id_bits: int = 64,
        scope: int | None = None,
        mode: str = "bounded",
        max_fragment_entries: int = 0,
        guaranteed_write_quorum: bool = False,
    ) -> LedgerHandle:
        """Create a ledger on ``ensemble`` bookies chosen at random among the writable ones.

        ``id_bits=128`` makes a BP-35 ledger (entries in format V2, named by its 32-hex
        qualified name): in ``scope`` with an id from that scope's ZooKeeper counter, or,
        without a scope, with a random (UUID4) 128-bit id needing no coordination.
        ``mode="unbounded"`` makes a ledger that other clients may take over in turn
        (:meth:`take_over_ledger`), fenced by terms instead of the once-only fence.
        ``max_fragment_entries`` > 0 moves writes to a fresh random ensemble each time the
        last fragment holds that many entries. ``guaranteed_write_quorum`` keeps every
        entry pending until all WQ bookies of its write set have it (a bookie that fails after
        the ack quorum answered is replaced and sent the entry again); without a replacement
        the writer fails instead of carrying on with AQ copies.
        """
        QuorumConfig(ensemble, write_quorum, ack_quorum)  # validates
        digest_type = DigestType.parse(digest)
        if mode not in ("bounded", "unbounded"):
            raise ValueError(f"mode must be 'bounded' or 'unbounded', got {mode!r}")
        if max_fragment_entries < 0:
            raise ValueError(f"max_fragment_entries must be >= 0, got {max_fragment_entries!r}")
        if id_bits not in (64, 128):
            raise ValueError(f"id_bits must be 64 or 128, got {id_bits!r}")
        if scope is not None and (id_bits != 128 or not 0 < scope < 2**64):
            raise ValueError(f"scope needs id_bits=128 and 0 < scope < 2**64, got {scope!r}")
        available = await self._store.available_bookies()
        if len(available) < ensemble:
            raise NotEnoughBookiesError(
                f"need {ensemble} writable bookies, found {len(available)}: {available}",
                may_have_happened=False,
            )
        if id_bits == 64:
            scope, ledger = 0, await self._store.new_ledger_id()
        elif scope is None:
            random_id = uuid.uuid4().int
            scope, ledger = (random_id >> 64) or 1, random_id & (2**64 - 1)
        else:
            ledger = await self._store.new_ledger_id(scope)
        metadata = LedgerMetadata(
            scope=scope,
            ledger=ledger,
            ensemble_size=ensemble,
            write_quorum=write_quorum,
            ack_quorum=ack_quorum,
            digest=digest_type.name,
            password_hash=password_hash(password),
            ensembles=((0, tuple(self._ctx.rng.sample(available, ensemble))),),
            ctime_ms=self._clock(),
            custom=dict(custom or {}),
            unbounded=mode == "unbounded",
            max_fragment_entries=max_fragment_entries,
            guaranteed_write_quorum=guaranteed_write_quorum,
        )
        versioned = await self._store.create(metadata)
        return LedgerHandle(self._ctx, versioned, master_key_for(password))

    async def open_ledger(
        self, ledger_id: int | str, *, password: bytes = b"", recovery: bool = True
    ) -> ReadHandle:
        """Open for reading. With ``recovery`` an open ledger is fenced, recovered and closed
        first (its writer can add no more); without it the handle reads up to the LAC it
        learns from ``read_lac``."""
        versioned = await self._store.read(ledger_id)
        master_key = check_password(versioned.metadata, password)
        if recovery and not versioned.metadata.closed:
            versioned = (await recover(self._ctx, versioned, master_key)).versioned
        return ReadHandle(self._ctx, versioned, master_key, lac=-1)

    async def take_over_ledger(
        self, ledger_id: int | str, *, password: bytes = b""
    ) -> LedgerHandle:
        """Become the writer of an unbounded ledger: raise its term (which fences the
        previous writer), recover the previous term's entries, end it with a truncating
        no-op and return a handle that appends after it."""
        versioned = await self._store.read(ledger_id)
        master_key = check_password(versioned.metadata, password)
        if not versioned.metadata.unbounded:
            raise ValueError(f"ledger {ledger_id} is bounded: only unbounded ledgers change hands")
        recovered = await recover(self._ctx, versioned, master_key, take_over=True)
        return LedgerHandle(
            self._ctx,
            recovered.versioned,
            master_key,
            lac=recovered.last_entry,
            length=recovered.length,
        )

    async def delete_ledger(self, ledger_id: int | str) -> None:
        """Remove the ledger's metadata; bookies drop its entries on their own."""
        await self._store.delete(ledger_id)

    @staticmethod
    def sync(zk: str, **options: Any) -> SyncBookKeeper:
        """The same client with blocking calls (it runs its own event loop in a thread)."""
        return SyncBookKeeper(zk, **options)


class _Loop:
    """An event loop in a daemon thread, to run the async client from blocking code."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()

    def run(self, coro: Any) -> Any:
        future: Future[Any] = asyncio.run_coroutine_threadsafe(coro, self.loop)
        return future.result()

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join()
        self.loop.close()


class _SyncProxy:
    """Blocking view of an async object: coroutine methods block; async iterators become
    iterators that block for each item (so ``follow()`` tails an open ledger); returned
    handles are wrapped in turn."""

    def __init__(self, target: Any, loop: _Loop) -> None:
        self._target = target
        self._loop = loop

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._target, name)
        if not callable(value):
            return value

        def call(*args: Any, **kwargs: Any) -> Any:
            result = value(*args, **kwargs)
            if isinstance(result, AsyncIterator):
                return _blocking_iterator(result, self._loop)
            if asyncio.iscoroutine(result):
                result = self._loop.run(result)
            if isinstance(result, ReadHandle):
                return _SyncProxy(result, self._loop)
            return result

        return call


_END = object()


def _blocking_iterator(iterator: AsyncIterator[Any], loop: _Loop) -> Iterator[Any]:
    """Each item of ``iterator`` fetched on the client's loop as the caller asks for it."""

    async def step() -> Any:
        return await anext(iterator, _END)

    try:
        while (item := loop.run(step())) is not _END:
            yield item
    finally:
        if isinstance(iterator, AsyncGenerator):
            loop.run(iterator.aclose())


class SyncBookKeeper(_SyncProxy):
    """``with BookKeeper.sync(zk=...) as bk:`` — the async API, blocking."""

    def __init__(self, zk: str, **options: Any) -> None:
        loop = _Loop()
        super().__init__(loop.run(_make(zk, options)), loop)

    def __enter__(self) -> SyncBookKeeper:
        self._loop.run(self._target.__aenter__())
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            self._loop.run(self._target.close())
        finally:
            self._loop.stop()


async def _make(zk: str, options: dict[str, Any]) -> BookKeeper:
    """Build the client inside the loop thread, so its asyncio objects belong to it."""
    return BookKeeper(zk, **options)
