"""Where a guaranteed-write-quorum ensemble change may start its new fragment, and what a
failed writer tells its pending adds (pure logic)."""

from __future__ import annotations

import asyncio

from bookie_image.client.errors import BKError, MetadataError
from bookie_image.client.ledger import ClientContext, Writer, _PendingAdd
from bookie_image.client.metadata import LedgerMetadata, Versioned

METADATA = LedgerMetadata(
    ledger=1,
    ensemble_size=3,
    write_quorum=3,
    ack_quorum=2,
    digest="CRC32C",
    password_hash="",
    ensembles=((0, ("a:1", "b:1", "c:1")),),
    guaranteed_write_quorum=True,
)


def writer_with(stored: dict[int, set[int]], lac: int) -> Writer:
    """A writer whose confirmed-but-unretired entries were acked by these slots (it talks
    to no store or bookie)."""
    offline = ClientContext(None, None)  # type: ignore[arg-type]
    writer = Writer(offline, Versioned(METADATA, 0), b"", lac=lac, length=0)
    for entry_id, slots in stored.items():
        writer._pending[entry_id] = _PendingAdd(entry_id, 0, b"", None, None, stored=slots)  # type: ignore[arg-type]
    return writer


def test_the_new_fragment_takes_every_owed_entry_that_keeps_an_ack_quorum() -> None:
    # c (slot 2) never stored entries 4 and 5; a and b hold both: c's replacement takes both.
    assert writer_with({4: {0, 1}, 5: {0, 1}}, lac=5)._first_of_new_fragment({2}) == 4
    # Replacing a instead would leave each with one holder: both stay where they are.
    assert writer_with({4: {0, 1}, 5: {0, 1}}, lac=5)._first_of_new_fragment({0}) == 6
    # Entry 4 would keep only b, entry 5 keeps b and c: the fragment starts at 5.
    assert writer_with({4: {0, 1}, 5: {1, 2}}, lac=5)._first_of_new_fragment({0}) == 5


def test_nothing_owed_starts_after_the_lac() -> None:
    assert writer_with({}, lac=7)._first_of_new_fragment({0}) == 8


def test_a_writer_failing_for_a_reason_that_did_not_happen_leaves_its_sent_adds_in_doubt() -> None:
    """A ZooKeeper read failing during an ensemble change did not happen; the adds already
    sent to bookies may be stored there and recovered, so their failure is not definite.
    (Once recorded `fail`: a clean docker run showed `failed-append-visible`.)"""

    async def fail_with_a_metadata_read_error() -> tuple[BKError, BKError]:
        loop = asyncio.get_running_loop()
        writer = writer_with({}, lac=-1)
        sent, queued = (
            _PendingAdd(e, 0, b"", loop.create_future(), loop.create_future()) for e in (0, 1)
        )
        sent.sent[0] = "a:1"
        writer._pending.update({0: sent, 1: queued})
        writer.fail(MetadataError("ZooKeeper get_children failed", may_have_happened=False))
        return sent.future.exception(), queued.future.exception()  # type: ignore[return-value]

    sent_error, queued_error = asyncio.run(fail_with_a_metadata_read_error())
    assert (sent_error.code, sent_error.may_have_happened) == ("EMETADATA", True)
    assert (queued_error.code, queued_error.may_have_happened) == ("EMETADATA", False)


def test_a_close_given_up_while_draining_leaves_the_writer_able_to_fail_its_adds() -> None:
    """A caller that cancels a close mid-drain (an agent's op timeout) must not cancel
    the writer's own futures: the writer failing later (fenced by a recovery) still fails
    every pending add, or the appends waiting on them hang for ever."""

    async def cancel_a_drain_then_fail() -> tuple[bool, bool, list[int]]:
        loop = asyncio.get_running_loop()
        writer = writer_with({}, lac=-1)
        adds = [_PendingAdd(e, 0, b"", loop.create_future(), loop.create_future()) for e in (0, 1)]
        writer._pending.update({add.entry_id: add for add in adds})
        close = asyncio.ensure_future(writer.drain())
        await asyncio.sleep(0)
        close.cancel()
        await asyncio.sleep(0)
        writer.fail(MetadataError("fenced meanwhile", may_have_happened=False))
        for add in adds:
            add.future.exception()  # retrieved: the appends would see it
        return close.cancelled(), all(a.retired.done() for a in adds), list(writer._pending)

    cancelled, retired, pending = asyncio.run(cancel_a_drain_then_fail())
    assert cancelled and retired and pending == []
