"""Ledger handles and recovery against real ZooKeeper and scripted in-process bookies.

The bookies here sit behind the client's transport interface, so each test can script an
exact fault (an add that reached one bookie only, a bookie answering EIO to reads, a bookie
that never answers) — the cases of the reference material that real processes cannot
produce on demand. ``test_client_cluster.py`` runs the same protocol against real bookies.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import AsyncIterator
from dataclasses import dataclass, field, replace
from typing import Any

import pytest
from kazoo.client import KazooClient

from bookie_image import bugs
from bookie_image.agent.executor import Executor, LedgerOptions
from bookie_image.client import (
    BKError,
    BookKeeper,
    ConcurrentModificationError,
    LedgerFencedError,
    LedgerRecoveryError,
    LedgerState,
)
from bookie_image.client.quorum import QuorumConfig, write_set
from bookie_image.client.transport import BookieUnavailableError
from bookie_image.protocol import (
    AddRequest,
    AddResponse,
    LedgerId,
    ReadLacRequest,
    ReadLacResponse,
    ReadRequest,
    ReadResponse,
    Status,
    decode_entry,
    encode_entry,
    peek_entry_header,
)


@dataclass
class _Ledger:
    master_key: bytes
    entries: dict[int, bytes] = field(default_factory=dict)
    fenced: bool = False


@dataclass
class ScriptedBookie:
    """Follows the protocol unless told otherwise by its fault switches."""

    id: str
    ledgers: dict[LedgerId, _Ledger] = field(default_factory=dict)
    down: bool = False  # connection refused
    hang: bool = False  # never answers
    read_status: Status | None = None  # answer entry reads (not fencing LAC reads) with this
    drop_adds: set[int] = field(default_factory=set)  # entry ids never stored nor answered
    slow_adds: float = 0.0  # seconds before an add is handled
    seen: list[Any] = field(default_factory=list)  # every request received

    def handle(self, request: Any) -> Any:
        rid = request.request_id
        if isinstance(request, AddRequest):
            header = peek_entry_header(request.entry)
            ledger = self.ledgers.setdefault(header.ledger, _Ledger(request.master_key))
            if ledger.fenced and not request.recovery:
                status = Status.EFENCED
            else:
                ledger.entries[header.entry_id] = request.entry
                status = Status.EOK
            return AddResponse(rid, status, header.ledger, header.entry_id)
        if isinstance(request, ReadRequest):
            ledger = self.ledgers.get(request.ledger)
            if request.fence:
                ledger = self.ledgers.setdefault(request.ledger, _Ledger(request.master_key))
                ledger.fenced = True
            if ledger is None:
                return ReadResponse(rid, Status.ENOLEDGER, request.ledger, request.entry_id)
            if request.entry_id >= 0 and self.read_status is not None:
                return ReadResponse(rid, self.read_status, request.ledger, request.entry_id)
            entry_id = max(ledger.entries, default=-1) if request.entry_id < 0 else request.entry_id
            if entry_id not in ledger.entries:
                return ReadResponse(rid, Status.ENOENTRY, request.ledger, request.entry_id)
            return ReadResponse(rid, Status.EOK, request.ledger, entry_id, ledger.entries[entry_id])
        assert isinstance(request, ReadLacRequest)
        ledger = self.ledgers.get(request.ledger)
        if ledger is None:
            return ReadLacResponse(rid, Status.ENOLEDGER, request.ledger, -1)
        last = ledger.entries[max(ledger.entries)] if ledger.entries else b""
        return ReadLacResponse(rid, Status.EOK, request.ledger, -1, last)

    def has(self, entry_id: int) -> bool:
        return any(entry_id in ledger.entries for ledger in self.ledgers.values())


class ScriptedNetwork:
    """The transport: delivers each request to its scripted bookie."""

    def __init__(self, bookies: dict[str, ScriptedBookie]) -> None:
        self.bookies = bookies

    async def request(self, bookie: str, request: Any, timeout: float) -> Any:
        target = self.bookies[bookie]
        await asyncio.sleep(target.slow_adds if isinstance(request, AddRequest) else 0)
        if target.down:
            raise BookieUnavailableError(f"{bookie} is down")
        target.seen.append(request)
        if target.hang or (
            isinstance(request, AddRequest)
            and peek_entry_header(request.entry).entry_id in target.drop_adds
        ):
            await asyncio.sleep(timeout)
            raise TimeoutError
        if isinstance(request, ReadLacRequest) and request.timeout_ms:
            await asyncio.sleep(request.timeout_ms / 1000)  # a long poll: no progress meanwhile
        return target.handle(request)

    async def close(self) -> None:
        pass


@dataclass
class Sim:
    zk: str
    root: str
    bookies: dict[str, ScriptedBookie]
    bugs: bugs.Bugs = bugs.NO_BUGS
    """The seeded bugs of the clients made from here on."""

    def client(self, add_timeout: float = 0.3, read_timeout: float = 0.3) -> BookKeeper:
        return BookKeeper(
            self.zk,
            ledgers_root=self.root,
            transport=ScriptedNetwork(self.bookies),
            add_timeout=add_timeout,
            read_timeout=read_timeout,
            speculative_timeout=0.05,
            bugs=self.bugs,
        )

    def holders(self, entry_id: int) -> set[str]:
        return {b.id for b in self.bookies.values() if b.has(entry_id)}


@pytest.fixture
async def sim(zookeeper: str, ledgers_root: str) -> AsyncIterator[Sim]:
    bookies = {f"b{i}:3181": ScriptedBookie(f"b{i}:3181") for i in range(1, 6)}
    zk = KazooClient(zookeeper)
    zk.start()
    for bookie in bookies:
        zk.create(f"{ledgers_root}/available/{bookie}", ephemeral=True, makepath=True)
    yield Sim(zookeeper, ledgers_root, bookies)
    zk.stop()
    zk.close()


async def test_striping_and_pipelined_adds_complete_in_order(sim: Sim) -> None:
    async with sim.client() as bk:
        lh = await bk.create_ledger(ensemble=3, write_quorum=2, ack_quorum=2, password=b"pw")
        ids = await asyncio.gather(*(lh.append(f"e{i}".encode()) for i in range(20)))
        assert ids == list(range(20))
        ensemble = lh.metadata.ensembles[0][1]
        for e in range(20):
            assert sim.holders(e) == {ensemble[e % 3], ensemble[(e + 1) % 3]}
        assert [p async for _, p in lh.read(0, 19)] == [f"e{i}".encode() for i in range(20)]
        await lh.close()
        assert lh.metadata.state is LedgerState.CLOSED and lh.metadata.last_entry_id == 19
        assert lh.metadata.length == sum(len(f"e{i}") for i in range(20))


async def test_ack_quorum_does_not_wait_for_a_slow_bookie(sim: Sim) -> None:
    async with sim.client(add_timeout=30) as bk:
        lh = await bk.create_ledger(ensemble=3, write_quorum=3, ack_quorum=2)
        sim.bookies[lh.metadata.ensembles[0][1][2]].hang = True
        assert await asyncio.wait_for(lh.append(b"x"), 1) == 0
        assert lh.last_add_confirmed == 0


async def test_ensemble_change_keeps_every_acked_entry(sim: Sim) -> None:
    async with sim.client() as bk:
        lh = await bk.create_ledger(ensemble=3, write_quorum=3, ack_quorum=3)
        for i in range(5):
            await lh.append(b"%d" % i)
        victim = lh.metadata.ensembles[0][1][1]
        sim.bookies[victim].down = True
        ids = await asyncio.gather(*(lh.append(b"%d" % i) for i in range(5, 10)))
        assert ids == list(range(5, 10))
        (first0, old), (first1, new) = lh.metadata.ensembles
        assert (first0, first1) == (0, 5) and victim in old and victim not in new
        replacement = (set(new) - set(old)).pop()
        assert all(sim.bookies[replacement].has(e) for e in range(5, 10))
        await lh.close()
    sim.bookies[victim].down = False
    async with sim.client() as bk:
        rh = await bk.open_ledger(lh.id, recovery=False)
        assert [p async for _, p in rh.read(0, 9)] == [b"%d" % i for i in range(10)]


async def test_second_writer_fences_the_first(sim: Sim) -> None:
    async with sim.client() as bk1, sim.client() as bk2:
        lh = await bk1.create_ledger(ensemble=3, write_quorum=2, ack_quorum=2, password=b"p")
        acked = [await lh.append(b"a%d" % i) for i in range(6)]
        rh = await bk2.open_ledger(lh.id, password=b"p", recovery=True)
        assert rh.metadata.closed and rh.metadata.last_entry_id >= acked[-1]
        with pytest.raises(LedgerFencedError) as info:
            await lh.append(b"late")
        assert info.value.code == "EFENCED"
        got = [p async for _, p in rh.read(0, rh.last_add_confirmed)]
        assert got[: len(acked)] == [b"a%d" % i for i in acked]
        await lh.close()  # recovery closed it where this writer's LAC is: nothing to do
        assert lh.metadata.last_entry_id == acked[-1]


async def test_writer_learns_it_was_fenced_from_a_failed_ensemble_change(sim: Sim) -> None:
    async with sim.client() as bk1, sim.client() as bk2:
        lh = await bk1.create_ledger(ensemble=3, write_quorum=3, ack_quorum=3)
        await lh.append(b"0")
        # A recovery has marked the ledger IN_RECOVERY but not fenced any bookie yet.
        store = bk2._store
        current = await store.read(lh.id)
        await store.update(current, lambda m: replace(m, state=LedgerState.IN_RECOVERY))
        sim.bookies[lh.metadata.ensembles[0][1][0]].down = True
        with pytest.raises(LedgerFencedError) as info:
            await lh.append(b"1")
        assert info.value.may_have_happened


async def test_recovery_recovers_and_writes_back_an_unacknowledged_entry(sim: Sim) -> None:
    """Entry 1 reached b1 only. At recovery b2 says ENOENTRY and b3 never answers: one
    negative is below the threshold and one positive is enough, so entry 1 is recovered,
    and written back (b2 gets it; b3 is replaced by an ensemble change during write-back)."""
    async with sim.client() as bk1, sim.client() as bk2:
        lh = await bk1.create_ledger(ensemble=3, write_quorum=3, ack_quorum=2)
        await lh.append(b"0")
        _, b2, b3 = (sim.bookies[b] for b in lh.metadata.ensembles[0][1])
        b2.drop_adds.add(1)
        b3.hang = True
        pending = asyncio.ensure_future(lh.append(b"1"))  # reaches b1 only: not acked
        await asyncio.sleep(0.05)
        b2.drop_adds.clear()  # the write-back will reach b2
        rh = await bk2.open_ledger(lh.id, recovery=True)
        assert rh.metadata.last_entry_id == 1
        assert b2.has(1)  # the write-back made it durable
        assert [p async for _, p in rh.read(0, 1)] == [b"0", b"1"]
        with pytest.raises(LedgerFencedError):
            await pending


@pytest.mark.parametrize("bug", [False, True])
async def test_unknown_answers_are_never_negatives(sim: Sim, bug: bool) -> None:
    """003: WQ=3, AQ=2; entry 3 acked by b1 and b2; at recovery b3 says ENOENTRY and b1, b2
    answer EIO. One negative is below the (WQ-AQ)+1 = 2 threshold: recovery must abort.
    With ``recovery-unknown-as-negative`` it closes at 2 and truncates an acked entry."""
    _switch(sim, "recovery-unknown-as-negative", bug)  # only recovery (bk2) asks
    async with sim.client() as bk1, sim.client() as bk2:
        lh = await bk1.create_ledger(ensemble=3, write_quorum=3, ack_quorum=2)
        b1, b2, b3 = (sim.bookies[b] for b in lh.metadata.ensembles[0][1])
        for i in range(3):
            await lh.append(b"%d" % i)
        b3.drop_adds.add(3)
        assert await lh.append(b"3") == 3
        b1.read_status = b2.read_status = Status.EIO
        if bug:
            rh = await bk2.open_ledger(lh.id, recovery=True)
            assert rh.metadata.last_entry_id == 2  # truncated: acked entry 3 is lost
        else:
            with pytest.raises(LedgerRecoveryError, match="0 positive, 1 negative, 2 unknown"):
                await bk2.open_ledger(lh.id, recovery=True)
            assert (await bk2._store.read(lh.id)).metadata.state is LedgerState.IN_RECOVERY
            b1.read_status = b2.read_status = None  # the bookies heal: recovery succeeds
            rh = await bk2.open_ledger(lh.id, recovery=True)
            assert rh.metadata.last_entry_id == 3


@pytest.mark.parametrize(
    ("e", "wq", "aq"), [(3, 2, 1), (3, 2, 2), (3, 3, 1), (3, 3, 2), (3, 3, 3), (4, 3, 2), (5, 4, 2)]
)
@pytest.mark.parametrize("enough", [True, False])
async def test_negative_threshold_end_to_end(
    sim: Sim, e: int, wq: int, aq: int, enough: bool
) -> None:
    """Entry 3 was never written. Its write set answers (WQ−AQ)+1 explicit negatives (or
    one fewer) and unknowns for the rest: recovery closes at 2 only with enough negatives."""
    async with sim.client() as bk1, sim.client() as bk2:
        lh = await bk1.create_ledger(ensemble=e, write_quorum=wq, ack_quorum=aq)
        for i in range(3):
            await lh.append(b"%d" % i)
        ensemble = lh.metadata.ensembles[0][1]
        negatives = wq - aq + 1 - (0 if enough else 1)
        for slot in write_set(3, QuorumConfig(e, wq, aq))[negatives:]:
            sim.bookies[ensemble[slot]].read_status = Status.EIO
        if enough:
            rh = await bk2.open_ledger(lh.id, recovery=True)
            assert rh.metadata.last_entry_id == 2
        else:
            with pytest.raises(LedgerRecoveryError, match=f"{negatives} negative"):
                await bk2.open_ledger(lh.id, recovery=True)


async def test_concurrent_recoveries_agree_or_one_is_told(sim: Sim) -> None:
    async with sim.client() as bk1, sim.client() as bk2, sim.client() as bk3:
        lh = await bk1.create_ledger(ensemble=3, write_quorum=2, ack_quorum=2)
        acked = [await lh.append(b"%d" % i) for i in range(10)]
        in_flight = [asyncio.ensure_future(lh.append(b"late%d" % i)) for i in range(5)]
        results = await asyncio.gather(
            bk2.open_ledger(lh.id, recovery=True),
            bk3.open_ledger(lh.id, recovery=True),
            return_exceptions=True,
        )
        await asyncio.gather(*in_flight, return_exceptions=True)
        handles = [r for r in results if not isinstance(r, BaseException)]
        errors = [r for r in results if isinstance(r, BaseException)]
        assert handles and all(isinstance(e, ConcurrentModificationError) for e in errors)
        final = (await bk1.open_ledger(lh.id, recovery=True)).metadata
        assert all(h.metadata.last_entry_id == final.last_entry_id for h in handles)
        assert final.last_entry_id >= acked[-1]


async def test_recovery_aborts_without_fencing_coverage(sim: Sim) -> None:
    async with sim.client() as bk1, sim.client() as bk2:
        lh = await bk1.create_ledger(ensemble=3, write_quorum=3, ack_quorum=2)
        await lh.append(b"0")
        b1, b2, _ = (sim.bookies[b] for b in lh.metadata.ensembles[0][1])
        b1.down = b2.down = True  # only one of three can be fenced; (E-AQ)+1 = 2 needed
        with pytest.raises(LedgerRecoveryError, match="could not fence"):
            await bk2.open_ledger(lh.id, recovery=True)


async def test_tail_reader_never_reads_past_its_lac(sim: Sim) -> None:
    async with sim.client() as bk1, sim.client() as bk2:
        lh = await bk1.create_ledger(ensemble=3, write_quorum=2, ack_quorum=2)
        for i in range(4):
            await lh.append(b"%d" % i)
        tail = await bk2.open_ledger(lh.id, recovery=False)
        assert tail.last_add_confirmed == -1
        # Bookies hold entries 0..3 carrying LACs up to 2 (the LAC is piggybacked).
        assert await tail.read_lac() == 2
        with pytest.raises(ValueError, match="beyond the last add confirmed"):
            [x async for x in tail.read(0, 3)]
        assert [p async for _, p in tail.read(0, 2)] == [b"0", b"1", b"2"]
        assert not (await bk2._store.read(lh.id)).metadata.closed  # no recovery happened


async def test_a_hung_bookie_does_not_stall_reads_nor_lac_reads(sim: Sim) -> None:
    async with sim.client() as bk1, sim.client(read_timeout=30) as bk2:
        lh = await bk1.create_ledger(ensemble=3, write_quorum=3, ack_quorum=2)
        for i in range(4):
            await lh.append(b"%d" % i)
        await lh.close()
        hung = sim.bookies[lh.metadata.ensembles[0][1][0]]  # first of entry 0's write set
        hung.hang = True
        rh = await bk2.open_ledger(lh.id, recovery=False)
        got = await asyncio.wait_for(_collect(rh.read(0, 3)), 2)  # speculative reads
        assert got == [b"0", b"1", b"2", b"3"]
        hung.hang = False
        tail = await bk1.create_ledger(ensemble=3, write_quorum=3, ack_quorum=2)
        for i in range(3):
            await tail.append(b"%d" % i)
        sim.bookies[tail.metadata.ensembles[0][1][1]].hang = True
        reader = await bk2.open_ledger(tail.id, recovery=False)
        assert await asyncio.wait_for(reader.read_lac(), 2) == 1  # two answers cover


async def test_a_long_poll_without_progress_does_not_wait_for_a_hung_bookie(sim: Sim) -> None:
    """The bookies that answer say "no progress" when the poll ends; once they cover every
    ack quorum the poll is over, as a plain LAC read would be (not after read_timeout)."""
    async with sim.client() as bk1, sim.client(read_timeout=30) as bk2:
        lh = await bk1.create_ledger(ensemble=3, write_quorum=3, ack_quorum=2)
        for i in range(3):
            await lh.append(b"%d" % i)
        reader = await bk2.open_ledger(lh.id, recovery=False)
        assert await reader.read_lac() == 1
        sim.bookies[lh.metadata.ensembles[0][1][2]].hang = True
        assert await asyncio.wait_for(reader.read_lac(wait_ms=100), 10) == 1


async def test_full_fragments_rotate_to_fresh_ensembles(sim: Sim) -> None:
    async with sim.client() as bk:
        lh = await bk.create_ledger(
            ensemble=2, write_quorum=2, ack_quorum=2, mode="unbounded", max_fragment_entries=5
        )
        for i in range(20):
            assert await lh.append(b"%d" % i) == i
        starts = [first for first, _ in lh.metadata.ensembles]
        assert starts == [0, 5, 10, 15]  # sequential appends: each rotation at LAC+1
        for first, bookies in lh.metadata.ensembles:
            for e in range(first, first + 5):
                assert sim.holders(e) == set(bookies)
        assert [p async for _, p in lh.read(0, 19)] == [b"%d" % i for i in range(20)]


@pytest.mark.parametrize("seed", range(8))
async def test_random_faults_never_lose_an_acknowledged_entry(sim: Sim, seed: int) -> None:
    """A seeded schedule of bookie crashes, hangs and lost adds while a writer pipelines
    appends, with a second client's recovery racing it half of the time. Whatever happens,
    every acknowledged entry is in the closed ledger at its id, and no append that failed
    saying it did not happen is."""
    rng = random.Random(seed)
    wq = rng.choice([2, 3])
    aq = rng.randint(2, wq) if wq > 2 else 2
    acked: dict[int, bytes] = {}
    failed: set[bytes] = set()  # appends that said they did not happen
    async with sim.client(add_timeout=0.1) as bk1, sim.client() as bk2:
        lh = await bk1.create_ledger(ensemble=3, write_quorum=wq, ack_quorum=aq)
        racing = rng.random() < 0.5

        async def append(payload: bytes) -> None:
            try:
                acked[await lh.append(payload)] = payload
            except BKError as exc:
                if not exc.may_have_happened:
                    failed.add(payload)

        appends = []
        for i in range(40):
            appends.append(asyncio.ensure_future(append(b"r%d-%d" % (seed, i))))
            if rng.random() < 0.15:
                victim = sim.bookies[rng.choice(sorted(sim.bookies))]
                fault = rng.choice(["down", "hang", "drop"])
                if fault == "drop":
                    victim.drop_adds.add(i + rng.randint(0, 3))
                else:
                    setattr(victim, fault, True)
            if rng.random() < 0.1:
                for bookie in sim.bookies.values():
                    bookie.down = bookie.hang = False
            if racing and i == 25:
                recovery = asyncio.ensure_future(bk2.open_ledger(lh.id, recovery=True))
            await asyncio.sleep(rng.choice([0, 0, 0.01]))
        await asyncio.gather(*appends)
        for bookie in sim.bookies.values():  # heal, as every chaos run's final phase does
            bookie.down = bookie.hang = False
            bookie.drop_adds.clear()
        if racing:
            with contextlib.suppress(BKError):
                await recovery
        rh = None
        for _ in range(5):  # a recovery may abort on unknown answers: retry, as users do
            with contextlib.suppress(LedgerRecoveryError):
                rh = await bk2.open_ledger(lh.id, recovery=True)
                break
        assert rh is not None and rh.metadata.closed
        content = dict([item async for item in rh.read(0, rh.last_add_confirmed)])
    assert sorted(content) == list(range(rh.last_add_confirmed + 1))
    for entry_id, payload in acked.items():
        assert content.get(entry_id) == payload, (entry_id, wq, aq, racing)
    assert not failed & set(content.values())  # a `fail` never becomes visible


async def _collect(items: AsyncIterator[tuple[int, bytes]]) -> list[bytes]:
    return [p async for _, p in items]


# -- seeded bugs in the client: each shows its wrong behaviour when on, the right one when off


def _switch(sim: Sim, bug: str, on: bool) -> None:
    sim.bugs = bugs.Bugs({bug} if on else ())


@pytest.mark.parametrize("on", [False, True])
async def test_bug_read_beyond_lac(sim: Sim, on: bool) -> None:
    """Entry 3 reached b1 only (not acknowledged). A tail reader must not see it: recovery
    can drop it, as it does here (b2, b3 say ENOENTRY, b1 does not answer reads)."""
    _switch(sim, "read-beyond-lac", on)
    async with sim.client() as bk1, sim.client() as bk2, sim.client() as bk3:
        lh = await bk1.create_ledger(ensemble=3, write_quorum=3, ack_quorum=2)
        for i in range(3):
            await lh.append(b"%d" % i)
        b1, b2, b3 = (sim.bookies[b] for b in lh.metadata.ensembles[0][1])
        b2.drop_adds.add(3)
        b3.drop_adds.add(3)
        unconfirmed = asyncio.ensure_future(lh.append(b"dirty"))
        await asyncio.sleep(0.05)
        tail = await bk2.open_ledger(lh.id, recovery=False)
        lac = await tail.read_lac()
        seen = [p async for _, p in tail.read(0, lac)]
        if not on:
            with pytest.raises(ValueError, match="beyond the last add confirmed"):
                [x async for x in tail.read(0, lac + 1)]
        b1.read_status = Status.EIO
        b2.drop_adds.clear()
        b3.drop_adds.clear()
        closed = await bk3.open_ledger(lh.id, recovery=True)
        assert closed.metadata.last_entry_id == 2
        if on:  # a dirty read: the reader saw an entry the closed ledger does not have
            assert lac == 3 and seen[-1] == b"dirty"
        else:
            assert lac == 2 and b"dirty" not in seen
        with contextlib.suppress(BKError):
            await unconfirmed


@pytest.mark.parametrize("on", [False, True])
async def test_bug_lac_before_ack_quorum(sim: Sim, on: bool) -> None:
    _switch(sim, "lac-before-ack-quorum", on)
    async with sim.client(add_timeout=30) as bk:
        lh = await bk.create_ledger(ensemble=3, write_quorum=3, ack_quorum=2)
        for bookie in lh.metadata.ensembles[0][1][1:]:
            sim.bookies[bookie].hang = True
        append = asyncio.ensure_future(lh.append(b"one copy"))
        done, _ = await asyncio.wait([append], timeout=0.5)
        assert bool(done) is on  # with the bug it is acknowledged with a single copy
        assert lh.last_add_confirmed == (0 if on else -1)
        append.cancel()


@pytest.mark.parametrize("on", [False, True])
async def test_bug_no_recovery_writeback(sim: Sim, on: bool) -> None:
    _switch(sim, "no-recovery-writeback", on)
    async with sim.client() as bk1, sim.client() as bk2:
        lh = await bk1.create_ledger(ensemble=3, write_quorum=3, ack_quorum=2)
        await lh.append(b"0")
        b1, b2, b3 = (sim.bookies[b] for b in lh.metadata.ensembles[0][1])
        b2.drop_adds.add(1)
        b3.drop_adds.add(1)
        pending = asyncio.ensure_future(lh.append(b"1"))  # reaches b1 only
        await asyncio.sleep(0.05)
        b2.drop_adds.clear()
        b3.drop_adds.clear()
        b3.read_status = Status.EIO  # so that b2's one negative is not enough to give up
        rh = await bk2.open_ledger(lh.id, recovery=True)
        assert rh.metadata.last_entry_id == 1
        # Without write-back the closed ledger's last entry lives on b1 alone.
        assert sim.holders(1) == ({b1.id} if on else {b1.id, b2.id, b3.id})
        with pytest.raises(LedgerFencedError):
            await pending
        # The audit of its copies says so: b2 has no entry 1, b3's EIO says nothing.
        kind, audit, error = await _auditor(bk2).run("audit", {"ledger": lh.id}, timeout=5)
        assert kind == "ok", error
        assert audit == {
            "ledger": lh.id,
            "last_entry": 1,
            "wq": 3,
            "aq": 2,
            "unbounded": False,
            "lacking": [[1, [b2.id], [b3.id]]] if on else [],
            "divergent": [],
        }


async def test_the_audit_names_copies_that_differ(sim: Sim) -> None:
    """A copy that verifies but holds another payload (what a bookie that kept an old
    term's tail holds): a reader would get one or the other, so the audit lists them."""
    async with sim.client() as bk:
        lh = await bk.create_ledger(ensemble=3, write_quorum=3, ack_quorum=2)
        for payload in (b"0", b"1"):
            await lh.append(payload)
        await lh.close()
        b1, b2, b3 = lh.metadata.ensembles[0][1]
        (ledger,) = sim.bookies[b2].ledgers.values()
        kept = decode_entry(ledger.entries[1], lh.metadata.digest, None).header
        ledger.entries[1] = encode_entry(
            kept.ledger, 1, kept.lac, kept.length, b"x", lh.metadata.digest, None
        )
        kind, audit, error = await _auditor(bk).run("audit", {"ledger": lh.id}, timeout=5)
        assert kind == "ok", error
        assert (audit["lacking"], audit["divergent"]) == ([], [[1, {b1: "1", b2: "x", b3: "1"}]])


def _auditor(bk: BookKeeper) -> Executor:
    """A client agent's op table over `bk`, for ledgers made with the client's default
    (empty) password."""
    return Executor(bk, LedgerOptions(password=""))


async def test_only_a_closed_ledger_is_audited(sim: Sim) -> None:
    """An open ledger's copies are still changing: its audit fails, nothing is judged."""
    async with sim.client() as bk:
        lh = await bk.create_ledger(ensemble=3, write_quorum=2, ack_quorum=2)
        await lh.append(b"0")
        assert await _auditor(bk).run("audit", {"ledger": lh.id}, timeout=5) == (
            "fail",
            None,
            "ENOTCLOSED",
        )
        await lh.close()
        kind, audit, _ = await _auditor(bk).run("audit", {"ledger": lh.id}, timeout=5)
        assert (kind, audit["lacking"]) == ("ok", [])


@pytest.mark.parametrize("on", [False, True])
async def test_bug_recovery_reads_no_fence(sim: Sim, on: bool) -> None:
    _switch(sim, "recovery-reads-no-fence", on)
    async with sim.client() as bk1, sim.client() as bk2:
        lh = await bk1.create_ledger(ensemble=3, write_quorum=3, ack_quorum=2)
        for i in range(3):
            await lh.append(b"%d" % i)
        await bk2.open_ledger(lh.id, recovery=True)
        reads = [
            r
            for b in lh.metadata.ensembles[0][1]
            for r in sim.bookies[b].seen
            if isinstance(r, ReadRequest) and r.entry_id >= 0
        ]
        assert reads and all(r.fence is not on for r in reads)


@pytest.mark.parametrize("on", [False, True])
async def test_bug_ensemble_change_drops_pending(sim: Sim, on: bool) -> None:
    """Entry 0 is acked by b1, which then fails on entry 1 before b2 answers; b3 never gets
    entry 0 and fails too. Done right, entry 0 is re-sent to both replacements and b1's ack
    is forgotten. With the bug b1's ack still counts and the replacements never get entry 0:
    it is acknowledged but stored, by the metadata's account, on b2 alone; a recovery while
    b2 is down truncates it."""
    _switch(sim, "ensemble-change-drops-pending", on)
    async with sim.client() as bk1, sim.client() as bk2:
        lh = await bk1.create_ledger(ensemble=3, write_quorum=3, ack_quorum=2)
        b1, b2, b3 = (sim.bookies[b] for b in lh.metadata.ensembles[0][1])
        b1.drop_adds.add(1)
        b2.slow_adds = 1.0
        b3.drop_adds.add(0)
        first = asyncio.ensure_future(lh.append(b"0"))
        await asyncio.sleep(0.01)
        second = asyncio.ensure_future(lh.append(b"1"))
        assert await first == 0
        await second
        # The bookies that replaced b1 and b3 in the fragment holding entry 0.
        replacements = set(lh.metadata.ensemble_at(0)[1]) - {b1.id, b2.id, b3.id}
        assert replacements
        b2.down = True
        if on:
            assert not any(sim.bookies[r].has(0) for r in replacements)
            rh = await bk2.open_ledger(lh.id, recovery=True)
            assert rh.metadata.last_entry_id == -1  # acknowledged entries 0 and 1 are gone
        else:
            assert all(sim.bookies[r].has(0) for r in replacements)
            rh = await bk2.open_ledger(lh.id, recovery=True)
            assert [p async for _, p in rh.read(0, rh.last_add_confirmed)] == [b"0", b"1"]
