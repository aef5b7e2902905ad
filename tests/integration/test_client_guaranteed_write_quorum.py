"""Guaranteed write quorum (reference 000) against real bookies: a confirmed entry reaches
every bookie of its write set, or the writer fails; without the option, AQ copies suffice."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from bookie_image.client import BookKeeper, NotEnoughBookiesError
from bookie_image.protocol import AddRequest, Status, peek_entry_header
from harness.runtime.local import LocalCluster
from tests.helpers.transports import DroppingTransport, read_from_bookie

ENTRIES = 20
LATE = range(5, 10)
"""Entries whose add to one bookie ends in a timeout after the other two acknowledged it."""


async def missing_copies(bk: BookKeeper, ledger: int) -> list[tuple[int, str]]:
    """(entry, bookie) for every bookie of an entry's write set that does not store it."""
    rh = await bk.open_ledger(ledger, password=b"pw", recovery=False)
    metadata = rh.metadata
    missing = []
    for entry_id in range(ENTRIES):
        _, bookies = metadata.ensemble_at(entry_id)  # E = WQ: the write set is the ensemble
        for bookie in bookies:
            if (await read_from_bookie(bookie, ledger, entry_id)).status is not Status.EOK:
                missing.append((entry_id, bookie))
    return missing


@pytest.mark.parametrize("guaranteed", [False, True])
async def test_a_bookie_that_times_out_after_the_ack_quorum_still_gets_its_copies(
    zookeeper: str, ledgers_root: str, tmp_path: Path, guaranteed: bool
) -> None:
    cluster = LocalCluster(
        tmp_path / "cluster", bookie_count=4, zk=zookeeper, ledgers_root=ledgers_root
    ).up()
    slow: list[str] = []  # the bookie whose adds of LATE entries never get an answer

    def times_out(bookie: str, request: object) -> bool:
        return (
            isinstance(request, AddRequest)
            and bookie in slow
            and peek_entry_header(request.entry).entry_id in LATE
        )

    try:
        transport = DroppingTransport(times_out, delay=1.0)
        async with BookKeeper(zk=zookeeper, ledgers_root=ledgers_root, transport=transport) as bk:
            lh = await bk.create_ledger(
                ensemble=3,
                write_quorum=3,
                ack_quorum=2,
                password=b"pw",
                guaranteed_write_quorum=guaranteed,
            )
            slow.append(lh.metadata.ensembles[0][1][0])
            appends = [lh.append(b"e%d" % i) for i in range(ENTRIES)]
            assert await asyncio.gather(*appends) == list(range(ENTRIES))
            await lh.close()  # with the guarantee: only once every copy is stored
            fragments = lh.metadata.ensembles
        async with BookKeeper(zk=zookeeper, ledgers_root=ledgers_root) as bk:
            missing = await missing_copies(bk, lh.id)
            rh = await bk.open_ledger(lh.id, password=b"pw")
            assert [p async for _, p in rh.read(0, rh.last_add_confirmed)] == [
                b"e%d" % i for i in range(ENTRIES)
            ]
    finally:
        cluster.down()
    if guaranteed:
        # The slow bookie was replaced from the oldest entry it never stored, though that
        # entry was long confirmed, and its replacement was sent everything from there.
        assert missing == []
        assert [first for first, _ in fragments] == [0, LATE[0]]
        assert slow[0] not in fragments[1][1]
    else:
        assert missing == [(entry_id, slow[0]) for entry_id in LATE]


async def test_without_a_replacement_the_writer_fails_instead_of_carrying_on(
    local_cluster: LocalCluster,
) -> None:
    """The counterpart of test_writes_continue_degraded_when_no_replacement_exists: E=WQ=3 on
    three bookies, one killed; AQ copies would do, but the ledger guarantees WQ copies."""
    async with BookKeeper(zk=local_cluster.zk, ledgers_root=local_cluster.ledgers_root) as bk:
        lh = await bk.create_ledger(
            ensemble=3, write_quorum=3, ack_quorum=2, password=b"pw", guaranteed_write_quorum=True
        )
        await lh.append(b"first")
        local_cluster.kill(local_cluster.bookies[1].name)
        with pytest.raises(NotEnoughBookiesError, match="write quorum is guaranteed"):
            for i in range(50):
                await asyncio.wait_for(lh.append(b"d%d" % i), 10)
