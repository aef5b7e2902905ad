"""A simulated cluster: the real bookie and client code on simulated network, disk, clock.

Nodes: ZooKeeper (`zk`, the in-memory `SimZooKeeper`), bookies `b1…bN` (each a real
`BookieService` with its data dirs on `SimDisk`s, its kazoo client on a `SimZkClient`
session and its clock a `SimClock`) and client agents `c1…cM` (each a real `BookKeeper`
whose TCP transport runs over the simulated network, driven by the real agent
`Executor`, so ops are classified ok / fail / info exactly as on real hosts). Every
bookie and client is built with the run's seeded bugs; the clients pick bookies from the
one seeded random stream they share.
"""

from __future__ import annotations

import io
import random
from pathlib import Path
from typing import Any

from bookie_image.agent.executor import Executor
from bookie_image.bookie.config import BookieConfig
from bookie_image.bookie.env import InlineOffload
from bookie_image.bookie.events import EventLog
from bookie_image.bookie.service import BookieService
from bookie_image.bugs import Bugs
from bookie_image.client import BookKeeper
from bookie_image.client.metadata import ZkMetadataStore
from harness.sim.disk import SimDisk, SimFileLayer
from harness.sim.loop import SimLoop
from harness.sim.zk import ZK_NODE, SimZkClient, SimZooKeeper, zk_call

BOOKIE_PORT = 3181
EPOCH_S = 1_700_000_000.0  # what the wall clocks read at simulated time 0
ZK_SESSION_S = 10.0


class SimClock:
    """One node's clock: virtual time, the wall clock shifted by the node's skew (clock
    faults move wall time only, as libfaketime does for the real nemesis)."""

    def __init__(self, loop: SimLoop, skews: dict[str, float], node: str) -> None:
        self._loop = loop
        self._skews = skews
        self._node = node

    def time(self) -> float:
        return EPOCH_S + self._loop.time() + self._skews.get(self._node, 0.0)

    def monotonic(self) -> float:
        return self._loop.time()

    def millis(self) -> int:
        return int(self.time() * 1000)


class SimBookie:
    """One bookie node: its disks survive its process; `start` / `crash` run the process."""

    def __init__(self, cluster: SimCluster, name: str, scratch: Path, log: io.TextIOBase) -> None:
        self.cluster = cluster
        self.name = name
        self.id = f"{name}:{BOOKIE_PORT}"
        journal, ledgers = scratch / name / "journal", scratch / name / "ledgers"
        self.disks = {journal: SimDisk(journal), ledgers: SimDisk(ledgers)}
        self.cfg = BookieConfig(
            port=BOOKIE_PORT,
            zk=ZK_NODE,
            journal_dir=journal,
            ledger_dirs=(ledgers,),
            host=name,
            bookie_id=self.id,
            checkpoint_interval_ms=cluster.checkpoint_interval * 1000,
        )
        self.clock = SimClock(cluster.loop, cluster.skews, name)
        self.log = log
        self.service: BookieService | None = None
        self.zk: SimZkClient | None = None

    @property
    def running(self) -> bool:
        return self.service is not None

    @property
    def pulled(self) -> bool:
        """Its disks are pulled out (`wipe`), waiting to be put back (`restore`)."""
        return any(disk.pulled for disk in self.disks.values())

    def _files(self, root: Path, fsync: bool = True) -> SimFileLayer:
        return SimFileLayer(self.disks[root], fsync)

    async def start(self) -> None:
        """Start the bookie process (replaying its journal); raises if it refuses to start."""
        loop = self.cluster.loop
        loop.dead.discard(self.name)
        self.zk = self.cluster.zk.client(ZK_SESSION_S, node=self.name)
        service = BookieService(
            self.cfg,
            EventLog(self.log, self.clock, node=self.name),
            self.clock,
            InlineOffload(),
            files=self._files,
            zk_client=self.zk,
            bugs=self.cluster.bugs,
        )
        try:
            await loop.spawn(self.name, service.start())
        except BaseException:
            self.service = service
            self.crash()
            raise
        self.service = service

    def crash(self) -> None:
        """SIGKILL: tasks, connections and ZooKeeper session die; the disks keep all bytes."""
        service, self.service = self.service, None
        if service is None:
            return
        loop = self.cluster.loop
        loop.kill_node(self.name)
        for disk in self.disks.values():
            disk.crash()
        if self.zk is not None:
            self.zk.crash()
        store = getattr(service, "store", None)
        if store is not None:
            store.close()


class SimAgent:
    """One client agent node: a real `BookKeeper` behind the real agent `Executor`."""

    def __init__(self, cluster: SimCluster, name: str, add_timeout: float) -> None:
        self.cluster = cluster
        self.name = name
        network = cluster.loop.network
        store = ZkMetadataStore(
            ZK_NODE,
            client=cluster.zk.client(ZK_SESSION_S),
            call=zk_call(network, ZK_SESSION_S),
            timeout=ZK_SESSION_S,
            bugs=cluster.bugs,
        )
        clock = SimClock(cluster.loop, cluster.skews, name)
        self.bk = BookKeeper(
            ZK_NODE,
            metadata=store,
            clock=clock.millis,
            add_timeout=add_timeout,
            read_timeout=add_timeout,
            bugs=cluster.bugs,
            rng=cluster.clients_rng,
        )
        self.executor = Executor(self.bk)

    async def start(self) -> None:
        await self.cluster.loop.spawn(self.name, self.bk.__aenter__())

    async def call(self, f: str, value: dict[str, Any], timeout: float) -> Any:
        """Run one op on this agent's node, as the controller's AgentConnection would."""
        return await self.cluster.loop.spawn(self.name, self.executor.run(f, value, timeout))


class SimAgentConnection:
    """What the controller's workers hold: the in-process twin of `AgentConnection`."""

    def __init__(self, agent: SimAgent) -> None:
        self.name = agent.name
        self.call = agent.call

    def close(self) -> None:
        pass


class SimCluster:
    def __init__(
        self,
        loop: SimLoop,
        scratch: Path,
        logs: Path,
        bugs: Bugs,
        clients_rng: random.Random,
        bookies: int = 3,
        clients: int = 2,
        add_timeout: float = 2.0,
        checkpoint_interval: float = 1.0,
    ) -> None:
        """`checkpoint_interval`: seconds between the bookies' checkpoints."""
        self.loop = loop
        self.bugs = bugs
        self.checkpoint_interval = checkpoint_interval
        self.clients_rng = clients_rng
        self.zk = SimZooKeeper(loop, self._reaches_zookeeper)
        self.skews: dict[str, float] = {}
        self._logs: list[io.TextIOBase] = []
        self.bookies: dict[str, SimBookie] = {}
        for i in range(1, bookies + 1):
            name = f"b{i}"
            (logs / name).mkdir(parents=True, exist_ok=True)
            log = open(logs / name / "bookie.log", "w", encoding="utf-8")  # noqa: SIM115
            self._logs.append(log)
            self.bookies[name] = SimBookie(self, name, scratch, log)
        self.agents = {f"c{i}": SimAgent(self, f"c{i}", add_timeout) for i in range(1, clients + 1)}

    def _reaches_zookeeper(self, node: str) -> bool:
        """Whether `node` can heartbeat: not paused, and no partition between it and ZK."""
        return node not in self.loop.paused and not self.loop.network.blocked(node, ZK_NODE)

    @property
    def nodes(self) -> list[str]:
        return [ZK_NODE, *self.bookies, *self.agents]

    async def start(self) -> None:
        for bookie in self.bookies.values():
            await bookie.start()
        for agent in self.agents.values():
            await agent.start()

    def connect(self, name: str, host: str, port: int) -> SimAgentConnection:
        """The controller's `connect` seam: a connection to agent `name`."""
        return SimAgentConnection(self.agents[name])

    def stop(self) -> None:
        """End every process (the run is over; nothing needs a clean shutdown)."""
        for bookie in self.bookies.values():
            bookie.crash()
        for agent in self.agents:
            self.loop.kill_node(agent)
        for log in self._logs:
            log.close()
