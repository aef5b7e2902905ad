"""The simulation's ZooKeeper against a real one: the same script, the same outcomes.

The client's correctness rests on these semantics (compare-and-set on znode versions,
sequence numbers that are never reused, ephemeral nodes that die with their session), so
the in-memory service is pinned to what ZooKeeper itself answers, not to our reading of it.
The last test is the simulation's alone: sessions of bookies cut off by a simulated fault.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from kazoo.client import KazooClient

from harness.sim.cluster import ZK_SESSION_S, SimCluster
from harness.sim.loop import SimLoop
from harness.sim.nemesis import SimNemesis
from harness.sim.net import Network
from harness.sim.zk import SimZooKeeper

pytestmark = [pytest.mark.sim, pytest.mark.integration]


def _outcome(call: Callable[[], Any], root: str) -> Any:
    """A comparable record of one call: its result (paths relative to the root, stats as
    the fields the product reads) or the name of the error it raised."""
    try:
        result = call()
    except Exception as exc:
        return type(exc).__name__
    if isinstance(result, str):
        return result.removeprefix(root)
    if isinstance(result, tuple) and len(result) == 2:  # get(): (data, stat)
        data, stat = result
        return data, stat.version, stat.numChildren, bool(stat.ephemeralOwner)
    if hasattr(result, "version"):  # a stat
        return result.version, result.numChildren
    return result


def _script(first: Any, second: Any, root: str) -> list[Any]:
    """Operations the product performs, plus their edge cases, on two sessions."""
    steps: list[Callable[[], Any]] = [
        lambda: first.ensure_path(root) and None,  # kazoo returns True or the path
        lambda: first.create(f"{root}/a", b"x"),
        lambda: first.create(f"{root}/a", b"again"),
        lambda: first.get(f"{root}/a"),
        lambda: first.set(f"{root}/a", b"y", 0),
        lambda: first.set(f"{root}/a", b"z", 0),
        lambda: first.set(f"{root}/a", b"z", -1),
        lambda: first.delete(f"{root}/a", version=1),
        lambda: first.get(f"{root}/a"),
        lambda: first.create(f"{root}/idgen/ID-", b"", sequence=True, makepath=True),
        lambda: first.delete(f"{root}/idgen/ID-0000000000"),
        lambda: first.create(f"{root}/idgen/ID-", b"", sequence=True),
        lambda: first.create(f"{root}/idgen/plain", b""),
        lambda: first.create(f"{root}/idgen/ID-", b"", sequence=True),
        lambda: first.delete(f"{root}/idgen"),
        lambda: first.create(f"{root}/no/parent", b""),
        lambda: first.create(f"{root}/available/b1:3181", b"r", ephemeral=True, makepath=True),
        lambda: first.create(f"{root}/available/b1:3181/child", b""),
        lambda: second.get(f"{root}/available/b1:3181"),
        lambda: second.create(f"{root}/available/b1:3181", b"r", ephemeral=True),
        lambda: sorted(second.get_children(f"{root}/available")),
        lambda: sorted(second.get_children(root)),
        lambda: second.delete(f"{root}/a", version=2),
        lambda: second.get(f"{root}/a"),
        lambda: second.delete(f"{root}/missing"),
        first.stop,
        lambda: second.get_children(f"{root}/available"),
        lambda: second.exists(f"{root}/available/b1:3181"),
    ]
    return [_outcome(step, root) for step in steps]


def test_same_outcomes_as_real_zookeeper(zookeeper: str, ledgers_root: str) -> None:
    real = [KazooClient(zookeeper), KazooClient(zookeeper)]
    for client in real:
        client.start()
    try:
        expected = _script(*real, root=ledgers_root)
    finally:
        for client in real:
            client.stop()
            client.close()
    server = SimZooKeeper(SimLoop())
    simulated = [server.client(), server.client()]
    for client in simulated:
        client.start()
    got = _script(*simulated, root=ledgers_root)
    assert [(i, g, e) for i, (g, e) in enumerate(zip(got, expected, strict=True)) if g != e] == []
    assert "NoChildrenForEphemeralsError" in expected and "BadVersionError" in expected


def test_a_bookie_cut_off_longer_than_its_session_timeout_is_unregistered_until_it_is_back(
    tmp_path: Path,
) -> None:
    """A pause or a partition from ZooKeeper shorter than the session timeout keeps a
    bookie's session (pauses do not add up); a longer one expires it, and the bookie's
    registration with it; once back in touch it re-registers on a new session, as a real
    bookie does when kazoo says LOST then CONNECTED."""
    loop = SimLoop()
    loop.network = Network(loop, random.Random(0))
    cluster = SimCluster(loop, tmp_path / "disks", tmp_path / "logs", bookies=3, clients=1)
    nemesis = SimNemesis(cluster, random.Random(0))
    seen: dict[str, list[str]] = {}

    def look(moment: str) -> None:
        children = cluster.zk.get_children("/ledgers/available")
        seen[moment] = sorted(c.split(":")[0] for c in children if c != "readonly")

    async def fault(f: str, node: str) -> None:
        await nemesis.invoke({"f": f, "value": {"nodes": [node]}})

    async def scenario() -> None:
        await cluster.start()
        look("started")
        for _ in range(2):  # two pauses of 0.6 timeouts each: 1.2 timeouts, not in a row
            await fault("pause", "b1")
            await asyncio.sleep(0.6 * ZK_SESSION_S)
            await fault("resume", "b1")
        look("after two short pauses")
        await fault("pause", "b1")
        await asyncio.sleep(ZK_SESSION_S - 0.1)
        look("paused almost a timeout")
        await asyncio.sleep(0.2)
        look("paused past the timeout")
        await fault("resume", "b1")
        await asyncio.sleep(0.1)
        look("resumed")
        await fault("start-partition", "b2")  # isolates b2, from ZooKeeper too
        await asyncio.sleep(ZK_SESSION_S + 0.1)
        look("partitioned past the timeout")
        await fault("stop-partition", "b2")
        await asyncio.sleep(0.1)
        look("healed")

    try:
        loop.run_until_complete(scenario())
    finally:
        cluster.stop()
        loop.run_until_complete(asyncio.sleep(1))
        loop.close()
    every = ["b1", "b2", "b3"]
    assert seen == {
        "started": every,
        "after two short pauses": every,
        "paused almost a timeout": every,
        "paused past the timeout": ["b2", "b3"],
        "resumed": every,
        "partitioned past the timeout": ["b1", "b3"],
        "healed": every,
    }
