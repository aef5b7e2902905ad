"""The client against a real local cluster: ZooKeeper plus three bookie processes."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import pytest

from bookie_image import bugs
from bookie_image.client import (
    BKError,
    BookKeeper,
    LedgerFencedError,
    LedgerHandle,
    LedgerRecoveryError,
    NoSuchLedgerError,
    UnauthorizedError,
)
from bookie_image.client.quorum import QuorumConfig, write_set
from bookie_image.client.transport import TcpTransport, next_request_id
from bookie_image.protocol import AddRequest, LedgerId, ReadRequest, Status, peek_entry_header
from tests.helpers.transports import DroppingTransport, read_from_bookie


def client(cluster, **options) -> BookKeeper:
    return BookKeeper(zk=cluster.zk, ledgers_root=cluster.ledgers_root, **options)


async def stored_on(bookie: str, ledger: int, entry_id: int) -> bool:
    """Ask one bookie directly whether it stores the entry."""
    return (await read_from_bookie(bookie, ledger, entry_id)).status is Status.EOK


async def read_all(bk: BookKeeper, ledger: int | str) -> list[bytes]:
    rh = await bk.open_ledger(ledger, password=b"pw", recovery=True)
    return [p async for _, p in rh.read(0, rh.last_add_confirmed)]


async def keep_appending(lh: LedgerHandle, acked: dict[int, bytes]) -> BKError:
    """Append until the handle fails; records every acknowledged entry."""
    i = 0
    while True:
        payload = b"p%d" % i
        try:
            acked[await lh.append(payload)] = payload
        except BKError as exc:
            return exc
        i += 1


async def test_replication_follows_write_sets(local_cluster) -> None:
    async with client(local_cluster) as bk:
        lh = await bk.create_ledger(ensemble=3, write_quorum=2, ack_quorum=2, password=b"pw")
        ids = await asyncio.gather(*(lh.append(b"e%d" % i) for i in range(30)))
        assert ids == list(range(30))
        ensemble = lh.metadata.ensembles[0][1]
        for e in (0, 1, 2, 29):
            holders = [b for b in ensemble if await stored_on(b, lh.id, e)]
            assert holders == sorted({ensemble[e % 3], ensemble[(e + 1) % 3]}, key=ensemble.index)
        await lh.close()
        assert lh.metadata.last_entry_id == 29
        assert await read_all(bk, lh.id) == [b"e%d" % i for i in range(30)]


async def test_ack_quorum_completes_while_one_bookie_is_paused(local_cluster) -> None:
    async with client(local_cluster, add_timeout=30) as bk:
        lh = await bk.create_ledger(ensemble=3, write_quorum=3, ack_quorum=2, password=b"pw")
        await lh.append(b"before")
        paused = next(b for b in local_cluster.bookies if b.id == lh.metadata.ensembles[0][1][0])
        local_cluster.pause(paused.name)
        try:
            ids = await asyncio.wait_for(
                asyncio.gather(*(lh.append(b"x%d" % i) for i in range(5))), 5
            )
            assert ids == [1, 2, 3, 4, 5]
        finally:
            local_cluster.resume(paused.name)
        await lh.close()


async def test_killed_bookie_is_replaced_and_no_acked_entry_is_lost(local_cluster) -> None:
    async with client(local_cluster, add_timeout=2) as bk:
        lh = await bk.create_ledger(ensemble=2, write_quorum=2, ack_quorum=2, password=b"pw")
        acked: dict[int, bytes] = {}
        writer = asyncio.create_task(keep_appending(lh, acked))
        while len(acked) < 50:
            await asyncio.sleep(0.01)
        victim = next(b for b in local_cluster.bookies if b.id == lh.metadata.ensembles[0][1][1])
        local_cluster.kill(victim.name)
        while len(acked) < 150:
            assert not writer.done(), writer.result()
            await asyncio.sleep(0.01)
        writer.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await writer
        fragments = lh.metadata.ensembles
        assert len(fragments) == 2 and victim.id not in fragments[1][1]
        assert 50 <= fragments[1][0] <= 150
        await lh.close()
    async with client(local_cluster) as bk:
        content = await read_all(bk, lh.id)
    assert all(content[e] == p for e, p in acked.items())


async def test_second_writer_fences_the_first(local_cluster) -> None:
    async with client(local_cluster) as bk1, client(local_cluster) as bk2:
        lh = await bk1.create_ledger(ensemble=3, write_quorum=3, ack_quorum=2, password=b"pw")
        acked: dict[int, bytes] = {}
        writer = asyncio.create_task(keep_appending(lh, acked))
        while len(acked) < 30:
            await asyncio.sleep(0.01)
        rh = await bk2.open_ledger(lh.id, password=b"pw", recovery=True)
        error = await asyncio.wait_for(writer, 10)
        assert isinstance(error, LedgerFencedError) and error.code == "EFENCED"
        with pytest.raises(LedgerFencedError) as late:
            await lh.append(b"after")
        assert not late.value.may_have_happened  # the handle already knew it was fenced
        content = [p async for _, p in rh.read(0, rh.last_add_confirmed)]
        assert rh.metadata.closed and rh.last_add_confirmed >= max(acked)
        assert all(content[e] == p for e, p in acked.items())


async def test_recovery_after_writer_and_bookie_crash(local_cluster) -> None:
    """The writer vanishes (its client is never closed) and one bookie is killed: a new
    client recovers every acknowledged entry from the other two (WQ=3, AQ=2)."""
    bk1 = client(local_cluster)
    await bk1.__aenter__()
    lh = await bk1.create_ledger(ensemble=3, write_quorum=3, ack_quorum=2, password=b"pw")
    acked = {await lh.append(b"k%d" % i): b"k%d" % i for i in range(20)}
    local_cluster.kill(local_cluster.bookies[0].name)
    async with client(local_cluster, read_timeout=2) as bk2:
        content = await read_all(bk2, lh.id)
    assert content[: len(acked)] == list(acked.values())
    await bk1.close()


async def test_tail_reader_follows_the_lac_without_recovering(local_cluster) -> None:
    async with client(local_cluster) as bk1, client(local_cluster) as bk2:
        lh = await bk1.create_ledger(ensemble=3, write_quorum=2, ack_quorum=2, password=b"pw")
        for i in range(5):
            await lh.append(b"t%d" % i)
        tail = await bk2.open_ledger(lh.id, password=b"pw", recovery=False)
        lac = await tail.read_lac()
        assert 3 <= lac <= 4  # the bookies know the LAC piggybacked on the last entry
        assert [p async for _, p in tail.read(0, lac)] == [b"t%d" % i for i in range(lac + 1)]
        await lh.append(b"t5")  # the writer was not fenced
        await lh.close()
        assert await tail.read_lac() == 5  # closed: the metadata's last entry


def test_sync_facade_and_delete(local_cluster) -> None:
    with BookKeeper.sync(zk=local_cluster.zk, ledgers_root=local_cluster.ledgers_root) as bk:
        lh = bk.create_ledger(ensemble=2, write_quorum=2, ack_quorum=1, password=b"pw")
        assert [lh.append(b"s%d" % i) for i in range(3)] == [0, 1, 2]
        lh.close()
        rh = bk.open_ledger(lh.id, password=b"pw", recovery=False)
        assert rh.last_add_confirmed == 2
        assert list(rh.read(0, 2)) == [(0, b"s0"), (1, b"s1"), (2, b"s2")]
        with pytest.raises(UnauthorizedError):
            bk.open_ledger(lh.id, password=b"wrong")
        bk.delete_ledger(lh.id)
        with pytest.raises(NoSuchLedgerError):
            bk.open_ledger(lh.id, password=b"pw")


def test_sync_facade_tails_a_ledger_that_is_still_open(local_cluster) -> None:
    options = {"zk": local_cluster.zk, "ledgers_root": local_cluster.ledgers_root}
    with BookKeeper.sync(**options) as writer, BookKeeper.sync(**options) as reader:
        lh = writer.create_ledger(ensemble=3, write_quorum=2, ack_quorum=2, password=b"pw")
        for i in range(3):
            lh.append(b"t%d" % i)  # the bookies learn LAC 1 from entry 2's piggyback
        tail = reader.open_ledger(lh.id, password=b"pw", recovery=False).follow(wait_ms=200)
        assert [next(tail), next(tail)] == [(0, b"t0"), (1, b"t1")]  # the ledger is open
        lh.append(b"t3")
        lh.close()
        assert list(tail) == [(2, b"t2"), (3, b"t3")]


@pytest.mark.parametrize("bug", [False, True])
async def test_128_bit_ledger_ids(local_cluster, bug: bool) -> None:
    """A BP-35 ledger (scope 7, id 0) and the 64-bit ledger 0 are different ledgers; with
    ``scope-id-ignored`` the client drops the scope on the wire and they share storage."""
    seeded = bugs.Bugs({"scope-id-ignored"} if bug else ())
    async with client(local_cluster, bugs=seeded) as bk:
        plain = await bk.create_ledger(ensemble=3, write_quorum=3, ack_quorum=3, password=b"pw")
        scoped = await bk.create_ledger(
            ensemble=3, write_quorum=3, ack_quorum=3, password=b"pw", id_bits=128, scope=7
        )
        assert plain.id == 0 and scoped.id == f"{7:016x}{0:016x}"
        await plain.append(b"plain")
        await scoped.append(b"scoped")
        await plain.close()
        await scoped.close()
        random_id = await bk.create_ledger(password=b"pw", id_bits=128)
        assert isinstance(random_id.id, str) and len(random_id.id) == 32
        assert await read_all(bk, scoped.id) == [b"scoped"]
        plain_content = await read_all(bk, 0)
    if bug:
        assert plain_content != [b"plain"]  # ledger 0 shows the 128-bit ledger's entry
    else:
        assert plain_content == [b"plain"]
        transport = TcpTransport()
        request = ReadRequest(next_request_id(), LedgerId(7, 0), 0)
        response = await transport.request(scoped.metadata.ensembles[0][1][0], request, 5.0)
        await transport.close()
        assert peek_entry_header(response.entry).format == 2  # V2 entry format on the wire


async def test_follow_tails_until_the_ledger_is_closed(local_cluster) -> None:
    async with client(local_cluster) as bk1, client(local_cluster) as bk2:
        lh = await bk1.create_ledger(ensemble=3, write_quorum=2, ack_quorum=2, password=b"pw")
        tail = await bk2.open_ledger(lh.id, password=b"pw", recovery=False)

        async def write() -> None:
            for i in range(20):
                await lh.append(b"f%d" % i)
                await asyncio.sleep(0.01)
            await lh.close()

        writer = asyncio.create_task(write())
        seen = [item async for item in tail.follow(wait_ms=300)]
        await writer
        assert seen == [(i, b"f%d" % i) for i in range(20)]


async def test_writes_continue_degraded_when_no_replacement_exists(local_cluster) -> None:
    """E=WQ=3, AQ=2 on a three-bookie cluster: a dead bookie cannot be replaced, but every
    write set still has an ack quorum, so pipelined adds keep completing."""
    async with client(local_cluster) as bk:
        lh = await bk.create_ledger(ensemble=3, write_quorum=3, ack_quorum=2, password=b"pw")
        await lh.append(b"first")
        local_cluster.kill(local_cluster.bookies[1].name)
        ids = await asyncio.wait_for(
            asyncio.gather(*(lh.append(b"d%d" % i) for i in range(20))), 10
        )
        assert ids == list(range(1, 21))
        assert len(lh.metadata.ensembles) == 1
        await lh.close()
        assert (await read_all(bk, lh.id))[-1] == b"d19"


@pytest.mark.parametrize(("e", "wq", "aq"), [(3, 2, 1), (3, 2, 2), (3, 3, 1), (3, 3, 2), (3, 3, 3)])
@pytest.mark.parametrize("enough", [True, False])
async def test_negative_threshold_on_real_bookies(
    local_cluster, e: int, wq: int, aq: int, enough: bool
) -> None:
    """Reference 003's table: entry 3 was never written, so every bookie of its write set
    that is heard says ENOENTRY. With (WQ−AQ)+1 of them heard recovery closes at 2; with one
    fewer (the others cannot be heard) it cannot tell, and must not close."""
    negatives = wq - aq + 1 - (0 if enough else 1)
    unheard: list[str] = []

    def cannot_hear_entry_3(bookie: str, request: Any) -> bool:
        return bookie in unheard and isinstance(request, ReadRequest) and request.entry_id == 3

    async with client(local_cluster) as bk1:
        lh = await bk1.create_ledger(ensemble=e, write_quorum=wq, ack_quorum=aq, password=b"pw")
        assert [await lh.append(b"n%d" % i) for i in range(3)] == [0, 1, 2]
    ensemble = lh.metadata.ensembles[0][1]
    unheard += [ensemble[slot] for slot in write_set(3, QuorumConfig(e, wq, aq))[negatives:]]
    async with client(local_cluster, transport=DroppingTransport(cannot_hear_entry_3)) as bk2:
        if enough:
            rh = await bk2.open_ledger(lh.id, password=b"pw", recovery=True)
            assert rh.metadata.last_entry_id == 2
        else:
            with pytest.raises(LedgerRecoveryError, match=f"{negatives} negative"):
                await bk2.open_ledger(lh.id, password=b"pw", recovery=True)


@pytest.mark.parametrize("bug", [False, True])
async def test_unknown_answers_are_never_negatives(local_cluster, bug: bool) -> None:
    """Reference 003 on real bookies: WQ=3, AQ=2; entry 3 is acknowledged by b1 and b2 and
    never reached b3. At recovery b1 and b2 cannot be heard on reads, b3 says ENOENTRY: one
    negative, below (WQ−AQ)+1 = 2, so recovery must abort rather than close at 2. With
    ``recovery-unknown-as-negative`` it closes at 2: the acknowledged entry is truncated."""
    ensemble: tuple[str, ...] = ()

    def lose_entry_3_on_b3(bookie: str, request: Any) -> bool:
        return (
            bookie == ensemble[2]
            and isinstance(request, AddRequest)
            and request.header.entry_id == 3
        )

    def cannot_hear_b1_b2_reads(bookie: str, request: Any) -> bool:
        return bookie in ensemble[:2] and isinstance(request, ReadRequest) and request.entry_id >= 0

    async with client(local_cluster, transport=DroppingTransport(lose_entry_3_on_b3)) as bk1:
        lh = await bk1.create_ledger(ensemble=3, write_quorum=3, ack_quorum=2, password=b"pw")
        ensemble = lh.metadata.ensembles[0][1]
        assert [await lh.append(b"u%d" % i) for i in range(4)] == [0, 1, 2, 3]
    seeded = bugs.Bugs({"recovery-unknown-as-negative"} if bug else ())
    bk2 = client(local_cluster, transport=DroppingTransport(cannot_hear_b1_b2_reads), bugs=seeded)
    async with bk2:
        if bug:
            rh = await bk2.open_ledger(lh.id, password=b"pw", recovery=True)
            assert rh.metadata.last_entry_id == 2  # acknowledged entry 3 truncated away
            return
        with pytest.raises(LedgerRecoveryError, match="1 negative, 2 unknown"):
            await bk2.open_ledger(lh.id, password=b"pw", recovery=True)
    async with client(local_cluster) as bk3:  # b1 and b2 can be heard again
        assert await read_all(bk3, lh.id) == [b"u0", b"u1", b"u2", b"u3"]
