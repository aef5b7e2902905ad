"""The ZooKeeper metadata store against a real ZooKeeper: layout, CAS with re-read-and-merge,
id allocation and bookie discovery."""

from collections.abc import AsyncIterator
from dataclasses import replace

import pytest
from kazoo.client import KazooClient

from bookie_image import bugs
from bookie_image.client.errors import LedgerExistsError, NoSuchLedgerError
from bookie_image.client.metadata import (
    LedgerMetadata,
    LedgerState,
    ZkMetadataStore,
    ledger_name,
)


@pytest.fixture
async def store(zookeeper: str, ledgers_root: str) -> AsyncIterator[ZkMetadataStore]:
    s = ZkMetadataStore(zookeeper, ledgers_root)
    await s.start()
    yield s
    await s.close()


def _metadata(ledger: int, scope: int = 0) -> LedgerMetadata:
    return LedgerMetadata(
        ledger=ledger,
        scope=scope,
        ensemble_size=3,
        write_quorum=2,
        ack_quorum=2,
        digest="CRC32C",
        password_hash="00",
        ensembles=((0, ("a:1", "b:1", "c:1")),),
        ctime_ms=1,
        custom={"app": b"\x00bin"},
    )


async def test_ids_are_unique_and_increasing(store: ZkMetadataStore) -> None:
    ids = [await store.new_ledger_id() for _ in range(5)]
    assert ids == sorted(set(ids))


async def test_create_read_roundtrip_and_layout(store: ZkMetadataStore, zookeeper: str) -> None:
    lid = await store.new_ledger_id()
    created = await store.create(_metadata(lid))
    assert (await store.read(lid)) == created
    with pytest.raises(LedgerExistsError):
        await store.create(_metadata(lid))
    zk = KazooClient(zookeeper)
    zk.start()
    try:
        assert str(lid) in zk.get_children(store.root)
    finally:
        zk.stop()


async def test_cas_rereads_and_merges(store: ZkMetadataStore) -> None:
    lid = await store.new_ledger_id()
    stale = await store.create(_metadata(lid))
    # Another client adds a fragment behind our back.
    await store.update(stale, lambda m: m.with_ensemble(5, ("a:1", "d:1", "c:1")))
    calls: list[LedgerMetadata] = []

    def close(m: LedgerMetadata) -> LedgerMetadata:
        calls.append(m)
        return replace(m, state=LedgerState.CLOSED, last_entry_id=9)

    result = await store.update(stale, close)
    assert len(calls) == 2  # once on the stale copy, once on the re-read one
    assert result.metadata.closed and len(result.metadata.ensembles) == 2
    assert (await store.read(lid)) == result


async def test_mutate_can_refuse_after_reread(store: ZkMetadataStore) -> None:
    lid = await store.new_ledger_id()
    stale = await store.create(_metadata(lid))
    await store.update(stale, lambda m: replace(m, state=LedgerState.IN_RECOVERY))

    def only_if_open(m: LedgerMetadata) -> LedgerMetadata:
        if m.state is not LedgerState.OPEN:
            raise RuntimeError("fenced")
        return replace(m, last_entry_id=3)

    with pytest.raises(RuntimeError, match="fenced"):
        await store.update(stale, only_if_open)


async def test_blind_write_bug_overwrites(
    store: ZkMetadataStore, zookeeper: str, ledgers_root: str
) -> None:
    lid = await store.new_ledger_id()
    stale = await store.create(_metadata(lid))
    await store.update(stale, lambda m: replace(m, state=LedgerState.IN_RECOVERY))
    blind = ZkMetadataStore(zookeeper, ledgers_root, bugs=bugs.Bugs({"metadata-blind-write"}))
    await blind.start()
    try:
        await blind.update(stale, lambda m: replace(m, last_entry_id=3))
    finally:
        await blind.close()
    assert (await store.read(lid)).metadata.state is LedgerState.OPEN  # recovery lost


async def test_delete(store: ZkMetadataStore) -> None:
    lid = await store.new_ledger_id()
    await store.create(_metadata(lid))
    await store.delete(lid)
    with pytest.raises(NoSuchLedgerError):
        await store.read(lid)
    with pytest.raises(NoSuchLedgerError):
        await store.delete(lid)
    assert await store.new_ledger_id() > lid  # ids are never reused


async def test_128_bit_names(store: ZkMetadataStore) -> None:
    name = ledger_name(0xABC, 7)
    assert name == "0000000000000abc0000000000000007"
    await store.create(_metadata(7, scope=0xABC))
    assert (await store.read(name)).metadata.scope == 0xABC
    assert store.path(5) == store.path("5") == store.path("0" * 31 + "5")
    assert await store.new_ledger_id(scope=0xABC) == 0  # each scope counts on its own


async def test_available_excludes_readonly(store: ZkMetadataStore, zookeeper: str) -> None:
    zk = KazooClient(zookeeper)
    zk.start()
    try:
        zk.create(f"{store.root}/available/h1:3181", ephemeral=True)
        zk.create(f"{store.root}/available/h2:3181", ephemeral=True)
        zk.create(f"{store.root}/available/readonly/h3:3181", ephemeral=True, makepath=True)
        assert await store.available_bookies() == ["h1:3181", "h2:3181"]
    finally:
        zk.stop()
