"""Unbounded ledgers (reference 000) against real bookie processes: takeovers by term, the
truncating no-op that ends a term, and the TLA+ divergence counterexample."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any

import pytest

from bookie_image import bugs
from bookie_image.client import (
    BKError,
    BookKeeper,
    LedgerFencedError,
    LedgerRecoveryError,
    LedgerState,
)
from bookie_image.client.ledger import DATA, NOOP
from bookie_image.protocol import (
    AddRequest,
    ReadRequest,
    Status,
    decode_entry,
)
from harness.runtime.local import LocalCluster
from tests.helpers.transports import DroppingTransport, read_from_bookie


async def three_copy_unbounded_ledger(bk: BookKeeper) -> Any:
    """The ledger the scenarios below script: unbounded, E3 WQ3 AQ2, every entry on all."""
    return await bk.create_ledger(
        ensemble=3, write_quorum=3, ack_quorum=2, password=b"pw", mode="unbounded"
    )


def client(cluster: LocalCluster, drop: Callable[[str, Any], bool] | None = None) -> BookKeeper:
    transport = DroppingTransport(drop) if drop else None
    return BookKeeper(zk=cluster.zk or "", ledgers_root=cluster.ledgers_root, transport=transport)


async def bookie_read(bookie: str, ledger: int, entry_id: int) -> tuple[Status, bytes]:
    """What one bookie stores at (ledger, entry): its status and the raw payload."""
    response = await read_from_bookie(bookie, ledger, entry_id)
    if response.status is not Status.EOK:
        return response.status, b""
    return response.status, decode_entry(response.entry, "crc32c", None).payload


async def test_takeovers_fence_the_previous_writer_and_keep_every_entry(
    local_cluster: LocalCluster,
) -> None:
    async with (
        client(local_cluster) as bk1,
        client(local_cluster) as bk2,
        client(local_cluster) as bk3,
    ):
        lh1 = await bk1.create_ledger(
            ensemble=3, write_quorum=3, ack_quorum=2, password=b"pw", mode="unbounded"
        )
        for i in range(3):
            await lh1.append(b"t0-%d" % i)
        lh2 = await bk2.take_over_ledger(lh1.id, password=b"pw")
        assert lh2.metadata.term == 1 and lh2.metadata.noops == (3,)
        with pytest.raises(LedgerFencedError) as info:
            await lh1.append(b"stale")
        assert info.value.code == "EINVALIDTERM"
        assert [await lh2.append(b"t1-%d" % i) for i in range(2)] == [4, 5]
        lh3 = await bk3.take_over_ledger(lh1.id, password=b"pw")
        assert await lh3.append(b"t2-0") == 7
        with pytest.raises(LedgerFencedError):
            await lh2.append(b"stale")
        with pytest.raises(LedgerFencedError):
            await lh2.close()  # the ledger is OPEN again, but in lh3's term
        tail = await bk1.open_ledger(lh1.id, password=b"pw", recovery=False)
        lac = await tail.read_lac()
        assert lac >= 6
        payloads = [p async for _, p in tail.read(0, lac)]  # the no-ops 3 and 6 are skipped
        assert payloads == [b"t0-0", b"t0-1", b"t0-2", b"t1-0", b"t1-1"][: len(payloads)]
        closed = await bk2.open_ledger(lh1.id, password=b"pw", recovery=True)
        assert closed.metadata.term == 3 and closed.last_add_confirmed == 7
        assert [e async for e, _ in closed.read(0, 7)] == [0, 1, 2, 4, 5, 7]


async def test_concurrent_takeovers_leave_one_writer(local_cluster: LocalCluster) -> None:
    async with (
        client(local_cluster) as bk1,
        client(local_cluster) as bk2,
        client(local_cluster) as bk3,
    ):
        lh = await bk1.create_ledger(
            ensemble=3, write_quorum=3, ack_quorum=2, password=b"pw", mode="unbounded"
        )
        for i in range(5):
            await lh.append(b"%d" % i)
        results = await asyncio.gather(
            bk2.take_over_ledger(lh.id, password=b"pw"),
            bk3.take_over_ledger(lh.id, password=b"pw"),
            return_exceptions=True,
        )
        writers = []
        for result in results:  # a loser is told, or learns at its first add
            if isinstance(result, BKError):
                assert isinstance(result, LedgerFencedError | LedgerRecoveryError), result
                continue
            try:
                await result.append(b"mine")
                writers.append(result)
            except LedgerFencedError:
                pass
        assert len(writers) == 1
        current = (await bk1.open_ledger(lh.id, password=b"pw", recovery=False)).metadata
        assert writers[0].metadata.term == current.term and current.state is LedgerState.OPEN


@pytest.mark.parametrize("local_cluster", ["", "unbounded-no-truncate"], indirect=True)
async def test_tla_counterexample_divergence(local_cluster: LocalCluster) -> None:
    """Reference 000, shifted by c1's own takeover no-op at entry 0: c1 writes e1 everywhere,
    then e2 and e3 reach b1 only. c2 takes over without hearing from b1, so it recovers to
    e1, ends the term with a no-op at e2, and writes a new e3 that b2 and b3 acknowledge
    while b1 is unreachable. The no-op's truncate flag made b1 drop c1's e3; a bookie that
    ignores the flag keeps it: two different entries 3, the log diverged."""
    bug = bool(local_cluster.extra_env.get(bugs.ENV_VAR))
    async with client(local_cluster) as setup:
        lh = await three_copy_unbounded_ledger(setup)
    b1, b2, b3 = lh.metadata.ensembles[0][1]

    def c1_drops(bookie: str, request: Any) -> bool:
        return (
            isinstance(request, AddRequest) and request.header.entry_id >= 2 and bookie in (b2, b3)
        )

    def c2_drops(bookie: str, request: Any) -> bool:
        if bookie != b1:
            return False
        if isinstance(request, ReadRequest):
            return request.entry_id >= 2  # b1's answers to recovery reads never arrive
        return isinstance(request, AddRequest) and request.header.entry_id >= 3

    async with client(local_cluster, c1_drops) as c1:
        writer = await c1.take_over_ledger(lh.id, password=b"pw")  # term 1, no-op at 0
        assert await writer.append(b"A") == 1
        old = [asyncio.ensure_future(writer.append(p)) for p in (b"B1", b"B2")]
        for entry_id in (2, 3):
            while (await bookie_read(b1, lh.id, entry_id))[0] is not Status.EOK:
                await asyncio.sleep(0.01)
        for future in old:
            with contextlib.suppress(BKError):
                await future
    async with client(local_cluster, c2_drops) as c2:
        writer2 = await c2.take_over_ledger(lh.id, password=b"pw")
        assert writer2.metadata.noops == (0, 2)  # recovered to e1 ("A"), no-op at e2
        assert await writer2.append(b"C") == 3  # acked by b2 and b3; b1 unreachable
    on_b1 = await bookie_read(b1, lh.id, 3)
    assert await bookie_read(b2, lh.id, 3) == (Status.EOK, DATA + b"C")
    if bug:
        assert on_b1 == (Status.EOK, DATA + b"B2")  # two different entries 3: diverged
    else:
        assert on_b1[0] is Status.ENOENTRY  # the no-op's truncate flag dropped c1's entry


@pytest.mark.parametrize("then", ["take-over", "recover"])
async def test_a_failed_takeovers_noop_is_never_read_as_data(
    local_cluster: LocalCluster, then: str
) -> None:
    """A chaos run's garbage read: a takeover recovers entries 0-2 and writes its truncating
    no-op at entry 3 to b1 and b2, but b3 never answers, so it fails before the metadata
    update that would have recorded the no-op. The next takeover (or a closing recovery)
    recovers entry 3: it must know it for a no-op by its payload — write it back as one,
    end the recovered entries there, never return it as data — and keep every acked entry."""
    async with client(local_cluster) as setup:
        lh = await three_copy_unbounded_ledger(setup)
        for i in range(3):
            await lh.append(b"t0-%d" % i)
    bookies = lh.metadata.ensembles[0][1]

    def noop_misses_b3(bookie: str, request: Any) -> bool:
        return bookie == bookies[2] and isinstance(request, AddRequest) and request.truncate

    async with client(local_cluster, noop_misses_b3) as failing:
        with pytest.raises(LedgerRecoveryError, match="must reach every bookie"):
            await failing.take_over_ledger(lh.id, password=b"pw")
    assert await bookie_read(bookies[0], lh.id, 3) == (Status.EOK, NOOP)  # left behind
    expected = [b"t0-0", b"t0-1", b"t0-2"]
    async with client(local_cluster) as c2:
        if then == "take-over":
            writer = await c2.take_over_ledger(lh.id, password=b"pw")
            assert writer.last_add_confirmed == 4  # the leftover no-op, then its own
            assert writer.metadata.noops == (4,)  # the metadata never heard of entry 3
            assert [await writer.append(b"t2-%d" % i) for i in range(2)] == [5, 6]
            expected += [b"t2-0", b"t2-1"]
            tail = await c2.open_ledger(lh.id, password=b"pw", recovery=False)
            lac = await tail.read_lac()
            assert lac >= 5
            assert [p async for _, p in tail.read(0, lac)] == expected[: lac - 1]
        closed = await c2.open_ledger(lh.id, password=b"pw", recovery=True)
        last = closed.last_add_confirmed
        assert last == (6 if then == "take-over" else 3)
        assert [p async for _, p in closed.read(0, last)] == expected
    for bookie in bookies:  # written back as the no-op it is, never as data
        assert await bookie_read(bookie, lh.id, 3) == (Status.EOK, NOOP)


async def leftover_noop(cluster: LocalCluster) -> tuple[Any, str, str, str]:
    """c1's entries 3 and 4 reach b3 only. A takeover that never hears b3 proves entry 3
    absent and writes its no-op at 3 to b1 and b2, then fails (b3 misses the no-op): b1
    and b2 hold a no-op at 3 that no metadata records, b3 holds c1's dirty C there.
    Returns the ledger id and b1, b2, b3."""
    async with client(cluster) as setup:
        lh = await three_copy_unbounded_ledger(setup)
    b1, b2, b3 = lh.metadata.ensembles[0][1]

    def c1_drops(bookie: str, request: Any) -> bool:
        return (
            isinstance(request, AddRequest) and request.header.entry_id >= 3 and bookie in (b1, b2)
        )

    def b3_misses_read_3_and_noop(bookie: str, request: Any) -> bool:
        noop = bookie == b3 and isinstance(request, AddRequest) and request.truncate
        return noop or misses_read_3(b3)(bookie, request)

    async with client(cluster, c1_drops) as c1:
        writer = await c1.take_over_ledger(lh.id, password=b"pw")  # term 1, no-op at 0
        assert [await writer.append(p) for p in (b"A", b"B")] == [1, 2]
        dirty = [asyncio.ensure_future(writer.append(p)) for p in (b"C", b"D")]
        for entry_id in (3, 4):
            while (await bookie_read(b3, lh.id, entry_id))[0] is not Status.EOK:
                await asyncio.sleep(0.01)
        for future in dirty:
            with contextlib.suppress(BKError):
                await future
    async with client(cluster, b3_misses_read_3_and_noop) as failing:
        with pytest.raises(LedgerRecoveryError, match="must reach every bookie"):
            await failing.take_over_ledger(lh.id, password=b"pw")
    assert [(await bookie_read(b, lh.id, 3))[1] for b in (b1, b2, b3)] == [NOOP, NOOP, DATA + b"C"]
    return lh.id, b1, b2, b3


def misses_read_3(b3: str) -> Callable[[str, Any], bool]:
    """Drops b3's answers to reads of entry 3, so recovery hears the no-op first."""
    return lambda bookie, request: (
        bookie == b3 and isinstance(request, ReadRequest) and request.entry_id == 3
    )


async def test_recovery_ends_at_a_recovered_noop(local_cluster: LocalCluster) -> None:
    """The next takeover after `leftover_noop`, still deaf to b3 for entry 3, recovers that
    no-op: the term ended there, so c1's dirty entry 4 on b3 is not recovered after it, but
    replaced by the new no-op."""
    ledger, _, _, b3 = await leftover_noop(local_cluster)
    async with client(local_cluster, misses_read_3(b3)) as c2:
        writer2 = await c2.take_over_ledger(ledger, password=b"pw")
        assert writer2.last_add_confirmed == 4  # the leftover no-op at 3, its own at 4
        assert await writer2.append(b"E") == 5
        closed = await c2.open_ledger(ledger, password=b"pw", recovery=True)
        assert closed.last_add_confirmed == 5
        assert [p async for _, p in closed.read(0, 5)] == [b"A", b"B", b"E"]
    assert await bookie_read(b3, ledger, 3) == (Status.EOK, NOOP)  # c1's C overwritten


async def test_a_recovered_leftover_noop_reaches_every_bookie(local_cluster: LocalCluster) -> None:
    """A closing recovery after `leftover_noop` that recovers the no-op but cannot write to
    b3: closed so, b3 would keep c1's C where b1 and b2 hold the no-op, and a reader asking
    b3 first would read C. The no-op is completed as its takeover should have done it, on
    every bookie, so recovery fails until b3 takes it; then every copy is the no-op."""
    ledger, b1, b2, b3 = await leftover_noop(local_cluster)

    def b3_deaf(bookie: str, request: Any) -> bool:
        add = bookie == b3 and isinstance(request, AddRequest)
        return add or misses_read_3(b3)(bookie, request)

    async with client(local_cluster, b3_deaf) as cut_off:
        with pytest.raises(LedgerRecoveryError, match="must reach every bookie"):
            await cut_off.open_ledger(ledger, password=b"pw", recovery=True)
    async with client(local_cluster, misses_read_3(b3)) as c2:
        closed = await c2.open_ledger(ledger, password=b"pw", recovery=True)
        assert closed.last_add_confirmed == 3
        assert [p async for _, p in closed.read(0, 3)] == [b"A", b"B"]
    for bookie in (b1, b2, b3):
        assert await bookie_read(bookie, ledger, 3) == (Status.EOK, NOOP)
