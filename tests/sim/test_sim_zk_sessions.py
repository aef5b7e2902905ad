"""The simulation's ZooKeeper sessions: bookies cut off by a simulated fault lose their
registration exactly when a real session would expire (tests/integration/test_sim_zk.py
pins the rest of its semantics to a real ZooKeeper)."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

from bookie_image.bugs import NO_BUGS
from harness.sim.cluster import ZK_SESSION_S, SimCluster
from harness.sim.loop import SimLoop
from harness.sim.nemesis import SimNemesis
from harness.sim.net import Network


def test_a_bookie_cut_off_longer_than_its_session_timeout_is_unregistered_until_it_is_back(
    tmp_path: Path,
) -> None:
    """A pause or a partition from ZooKeeper shorter than the session timeout keeps a
    bookie's session (pauses do not add up); a longer one expires it, and the bookie's
    registration with it; once back in touch it re-registers on a new session, as a real
    bookie does when kazoo says LOST then CONNECTED."""
    loop = SimLoop()
    loop.network = Network(loop, random.Random(0))
    cluster = SimCluster(
        loop, tmp_path / "disks", tmp_path / "logs", NO_BUGS, random.Random(0), bookies=3, clients=1
    )
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
