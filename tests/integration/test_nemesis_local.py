"""Disk and clock nemeses against real bookie processes (local runtime).

Each fault's effect is observed from outside the nemesis — by a client, by asking one
bookie directly, by the bookie's own log — its proof is checked, and the cluster serves
again afterwards. (Every fault of them in one whole `bkchaos test` run:
test_chaos_local.py.)
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from bookie_image.client import BookKeeper
from bookie_image.client.transport import TcpTransport, next_request_id
from bookie_image.protocol import LedgerId, ReadRequest, Status
from harness.runtime.local import LocalCluster
from nemesis.clock import ClockNemesis
from nemesis.disk import CorruptNemesis, PowerLossNemesis, WipeNemesis
from tests.helpers.bookies import wait_checkpointed


@pytest.fixture(scope="module")
def cluster(zookeeper: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """Three bookies with libfaketime preloaded (clock faults need it; others ignore it),
    shared by the tests of this module: each leaves it healed, and writes ledgers of its
    own."""
    c = LocalCluster(
        tmp_path_factory.mktemp("nemesis") / "cluster",
        bookie_count=3,
        zk=zookeeper,
        ledgers_root=f"/t-{uuid.uuid4().hex[:12]}/ledgers",
        faketime=True,
    )
    c.up()
    try:
        yield c
    finally:
        c.down()


def bk(cluster: LocalCluster) -> BookKeeper:
    return BookKeeper(zk=cluster.zk, ledgers_root=cluster.ledgers_root)


async def write(cluster: LocalCluster, n: int, ensemble: int = 3, wq: int = 3) -> int:
    """A closed ledger of `n` entries b"e<i>" on `ensemble` bookies; its id."""
    async with bk(cluster) as client:
        lh = await client.create_ledger(
            ensemble=ensemble, write_quorum=wq, ack_quorum=2, password=b"pw"
        )
        for i in range(n):
            await lh.append(b"e%d" % i)
        await lh.close()
        return lh.id


async def read_back(cluster: LocalCluster, ledger: int) -> list[bytes]:
    async with bk(cluster) as client:
        rh = await client.open_ledger(ledger, password=b"pw", recovery=True)
        return [p async for _, p in rh.read(0, rh.last_add_confirmed)]


async def ask(cluster: LocalCluster, node: str, ledger: int, entry: int) -> Status:
    """One bookie's own answer for one entry."""
    transport = TcpTransport()
    try:
        request = ReadRequest(next_request_id(), LedgerId(0, ledger), entry)
        response = await transport.request(cluster.node(node).id, request, 5.0)
    finally:
        await transport.close()
    return response.status


def registered(cluster: LocalCluster, node: str) -> bool:
    return next(b for b in cluster.status()["bookies"] if b["name"] == node)["registered"]


def events(cluster: LocalCluster, node: str) -> list[dict[str, Any]]:
    lines = cluster.node(node).log_path.read_text().splitlines()
    return [json.loads(line) for line in lines if line.startswith("{")]


def checkpointed(cluster: LocalCluster, ledger: int, entries: int) -> None:
    """Every bookie has moved `entries` entries of `ledger` into its entry logs and index."""
    wait_checkpointed((bookie.data_dirs[1] for bookie in cluster.bookies), ledger, entries)


async def test_wiped_bookie_is_refused_and_its_restored_disk_serves(cluster) -> None:
    ledger = await write(cluster, 20)
    wipe = WipeNemesis(cluster)
    done = await wipe.invoke({"f": "wipe", "value": {"nodes": ["b1"]}})
    proof = done["proof"]["b1"]
    assert proof["cookie_check"] == "refused" and not proof["running"]
    assert "no cookie" in proof["event"]["reason"]
    assert sum(d["bytes"] for d in proof["moved"].values()) > 0
    assert cluster.process_state("b1")[1] is None and not registered(cluster, "b1")
    [healed] = await wipe.heal()  # what the controller's final heal does
    assert healed["f"] == "restore" and healed["proof"]["b1"]["cookie_check"] == "ok"
    assert registered(cluster, "b1")
    assert await ask(cluster, "b1", ledger, 19) == Status.EOK  # its own data is back
    assert await read_back(cluster, ledger) == [b"e%d" % i for i in range(20)]


async def test_wipe_with_reset_cookie_rejoins_empty(cluster) -> None:
    """The operator error: the bookie comes back without the entries it acknowledged."""
    ledger = await write(cluster, 5)
    wipe = WipeNemesis(cluster)
    done = await wipe.invoke({"f": "wipe-reset", "value": {"nodes": ["b2"]}})
    proof = done["proof"]["b2"]
    assert proof["cookie_check"] == "refused"
    assert proof["zk_cookie_deleted"] == f"{cluster.ledgers_root}/cookies/{cluster.node('b2').id}"
    rejoined = await wipe.invoke({"f": "rejoin", "value": {}})
    assert rejoined["proof"]["b2"]["cookie_check"] == "new" and registered(cluster, "b2")
    assert await ask(cluster, "b2", ledger, 0) == Status.ENOLEDGER  # the danger, shown


async def test_power_loss_drops_unsynced_bytes_and_keeps_acknowledged_entries(cluster) -> None:
    async with bk(cluster) as client:
        lh = await client.create_ledger(ensemble=3, write_quorum=3, ack_quorum=2, password=b"pw")
        acked = [await lh.append(b"a%d" % i) for i in range(30)]
        checkpointed(cluster, lh.id, 30)  # entry logs, index and WAL hold them too
        pending = [asyncio.ensure_future(lh.append(b"b%d" % i)) for i in range(200)]
        nemesis = PowerLossNemesis(cluster)
        done = await nemesis.invoke({"f": "power-loss", "value": {"nodes": ["b3"]}})
        acked += [await p for p in pending]  # AQ=2: b1 and b2 still acknowledge
        await lh.close()
    proof = done["proof"]["b3"]
    assert proof["killed_pid"] and proof["bytes_dropped"] > 0
    assert all(f["dropped"] == f["size"] - f["synced"] > 0 for f in proof["files"].values())
    on = await nemesis.invoke({"f": "power-on", "value": {}})
    assert on["proof"]["b3"]["registered"] and registered(cluster, "b3")
    assert [await ask(cluster, "b3", lh.id, e) for e in range(30)] == [Status.EOK] * 30
    assert await read_back(cluster, lh.id) == [b"a%d" % i for i in range(30)] + [
        b"b%d" % i for i in range(200)
    ]
    assert acked == list(range(230))


async def test_corrupt_entry_log_answers_eio_never_no_entry(cluster) -> None:
    ledger = await write(cluster, 40)
    checkpointed(cluster, ledger, 40)  # into b1's entry log
    nemesis = CorruptNemesis(cluster, seed=7)
    op = {"f": "corrupt", "value": {"nodes": ["b1"], "count": 40}}
    done = await nemesis.invoke(op)
    changes = done["proof"]["b1"]["changes"]
    assert done["seed"] is not None and len(changes) == 40
    assert all(c["before"] != c["after"] and "entrylog-" in c["file"] for c in changes)
    answers = [await ask(cluster, "b1", ledger, e) for e in range(40)]
    assert set(answers) <= {Status.EOK, Status.EIO} and Status.EIO in answers
    assert await read_back(cluster, ledger) == [b"e%d" % i for i in range(40)]  # replicas
    restarted = await nemesis.invoke({"f": "corrupt-restart", "value": {}})
    assert restarted["proof"]["b1"]["registered"]
    assert [await ask(cluster, "b1", ledger, e) for e in range(40)] == answers


async def test_a_lost_last_write_cuts_the_newest_flush_only_and_reads_as_eio(cluster) -> None:
    """`corrupt` mode `tail`: the bookie crashes and its entry log loses part of the last
    write it fsynced; entries of earlier writes stay, lost ones answer EIO, and the other
    replicas still serve every entry."""
    first = await write(cluster, 20)
    checkpointed(cluster, first, 20)  # one flush
    second = await write(cluster, 20)
    checkpointed(cluster, second, 20)  # the last flush holds the second ledger alone
    nemesis = CorruptNemesis(cluster, seed=3)
    done = await nemesis.invoke({"f": "corrupt", "value": {"nodes": ["b1"], "mode": "tail"}})
    proof = done["proof"]["b1"]
    assert proof["killed_pid"] and proof["bytes_changed"] > 0
    assert cluster.process_state("b1")[0] is None  # down until corrupt-restart
    restarted = await nemesis.invoke({"f": "corrupt-restart", "value": {}})
    assert restarted["proof"]["b1"]["registered"]
    assert {await ask(cluster, "b1", first, e) for e in range(20)} == {Status.EOK}
    cut = [await ask(cluster, "b1", second, e) for e in range(20)]
    assert set(cut) <= {Status.EOK, Status.EIO} and cut[-1] is Status.EIO, cut
    assert await read_back(cluster, second) == [b"e%d" % i for i in range(20)]


async def test_heal_starts_a_bookie_a_lost_last_write_left_down(cluster) -> None:
    checkpointed(cluster, await write(cluster, 5), 5)
    nemesis = CorruptNemesis(cluster, seed=5)
    await nemesis.invoke({"f": "corrupt", "value": {"nodes": ["b2"], "mode": "tail"}})
    assert cluster.process_state("b2")[0] is None
    healed = await nemesis.heal()
    assert healed[0]["f"] == "corrupt-restart" and healed[0]["proof"]["b2"]["registered"]
    assert await nemesis.heal() == []


def _wall_clock_lag(cluster: LocalCluster, node: str, after: float) -> float:
    """How far the bookie's own clock (its log timestamps) is ahead of the real one: the
    `journal-stats` line it writes within 0.5 s of an add, against when we saw it."""
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        seen = time.time()
        stats = [e for e in events(cluster, node) if e["event"] == "journal-stats"]
        if len(stats) > after:
            return stats[-1]["ts"] - seen
        time.sleep(0.05)
    raise AssertionError(f"{node} wrote no journal-stats line")


async def test_clock_bump_strobe_and_reset_move_the_bookies_own_clock(cluster) -> None:
    nemesis = ClockNemesis(cluster, seed=1)
    done = await nemesis.invoke({"f": "clock-bump", "value": {"nodes": ["b1"], "delta_s": 3600}})
    proof = done["proof"]["b1"]
    assert abs(proof["observed_offset_s"] - 3600) < 1 and proof["libfaketime_mapped"]
    before = len([e for e in events(cluster, "b1") if e["event"] == "journal-stats"])
    await write(cluster, 3)  # makes every bookie log journal-stats with its own clock
    assert abs(_wall_clock_lag(cluster, "b1", before) - 3600) < 2
    strobe = {"f": "clock-strobe", "value": {"nodes": ["b2"], "delta_s": -30, "period_s": 0.2}}
    done = await nemesis.invoke(strobe)
    assert abs(done["proof"]["b2"]["observed_offset_s"] + 30) < 1
    await asyncio.sleep(1)
    assert await read_back(cluster, await write(cluster, 10)) == [b"e%d" % i for i in range(10)]
    healed = await nemesis.heal()
    offsets = {n: p["observed_offset_s"] for n, p in healed[0]["proof"].items()}
    assert set(offsets) == {"b1", "b2"} and all(abs(o) < 1 for o in offsets.values())
    before = len([e for e in events(cluster, "b1") if e["event"] == "journal-stats"])
    await write(cluster, 3)
    assert abs(_wall_clock_lag(cluster, "b1", before)) < 2
