"""ReadHandle.read_lac without bookies: scripted answers show that overlapping calls never
lower what the handle knows."""

from __future__ import annotations

import asyncio
from typing import Any

from bookie_image.client.ledger import ClientContext, ReadHandle
from bookie_image.client.metadata import LedgerMetadata, Versioned
from bookie_image.protocol import LedgerId, ReadLacRequest, ReadLacResponse, Status

BOOKIES = ("b1:3181", "b2:3181", "b3:3181")
LEDGER = LedgerMetadata(
    ledger=7,
    ensemble_size=3,
    write_quorum=2,
    ack_quorum=2,
    digest="CRC32C",
    password_hash="",
    ensembles=((0, BOOKIES),),
)


class Store:
    """Answers every metadata read with ``current``."""

    def __init__(self, current: Versioned) -> None:
        self.current = current

    async def read(self, name: int | str) -> Versioned:
        return self.current


class Bookies:
    """Every bookie answers READ_LAC with the LAC of the call its request belongs to: the
    first call's answers (``slow_lac``) wait for ``release``; later calls' (``fast_lac``)
    come at once."""

    def __init__(self, slow_lac: int, fast_lac: int) -> None:
        self.slow_lac, self.fast_lac = slow_lac, fast_lac
        self.release = asyncio.Event()
        self.slow_sent = asyncio.Event()
        self._requests = 0

    async def request(self, bookie: str, request: Any, timeout: float) -> Any:
        assert isinstance(request, ReadLacRequest)
        self._requests += 1
        lac = self.fast_lac
        if self._requests <= len(BOOKIES):  # the first call's requests
            self.slow_sent.set()
            await self.release.wait()
            lac = self.slow_lac
        return ReadLacResponse(request.request_id, Status.EOK, LedgerId(0, 7), lac)

    async def close(self) -> None:
        pass


def handle(store: Store, bookies: Bookies, versioned: Versioned | None = None) -> ReadHandle:
    """A handle opened at ``versioned`` (by default what the store has)."""
    ctx = ClientContext(store, bookies)  # type: ignore[arg-type]
    return ReadHandle(ctx, versioned or store.current, b"", lac=-1)


async def test_a_slower_lower_answer_never_lowers_the_lac() -> None:
    bookies = Bookies(slow_lac=3, fast_lac=7)
    rh = handle(Store(Versioned(LEDGER, 0)), bookies)
    slow = asyncio.ensure_future(rh.read_lac())
    await bookies.slow_sent.wait()
    assert await rh.read_lac() == 7
    bookies.release.set()
    assert await slow == 7  # it learned 3, but the handle already knew 7
    assert rh.last_add_confirmed == 7


async def test_an_older_metadata_read_never_replaces_a_newer_one() -> None:
    newer = Versioned(LEDGER.with_ensemble(5, BOOKIES[::-1]), 3)
    store = Store(Versioned(LEDGER, 2))  # a read that was answered late, say
    bookies = Bookies(slow_lac=6, fast_lac=6)
    bookies.release.set()
    rh = handle(store, bookies, newer)
    assert await rh.read_lac() == 6
    assert rh.metadata == newer.metadata
