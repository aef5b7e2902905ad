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

import asyncio
import io
import random
from dataclasses import dataclass
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
from harness.agent_client import CONTROLLER_MARGIN_S, agent_lost
from harness.sim.disk import SimDisk, SimFileLayer
from harness.sim.loop import SimLoop
from harness.sim.zk import ZK_NODE, SimZkClient, SimZooKeeper, zk_call

BOOKIE_PORT = 3181
JOURNAL_FILE_BYTES = 1024
ENTRY_LOG_BYTES = 2048
"""A simulated bookie's journal files and entry logs roll at these sizes, not at the real
64 and 256 MiB, which no simulated run comes near: a bookie of one journals about 6 KB and
flushes about 3 KB to entry logs per second (records of ~100 bytes, 100 ops/s over three
bookies). A 1-KiB journal file lasts about 0.15 s, so the 1-s checkpoint interval spans
several files, as BookKeeper's 60-s flush interval spans a few of its 2-GB journal files
at 100 MB/s: a restart replays from a checkpoint inside an earlier file, or (a crash soon
after a checkpoint) inside the file being written. A 2-KiB entry log takes one or two
checkpoints' flushes. Within a file, nothing differs from the real sizes' regime."""
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
            journal_file_bytes=JOURNAL_FILE_BYTES,
            entry_log_bytes=ENTRY_LOG_BYTES,
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


@dataclass(frozen=True)
class LateCall:
    """An op its agent answered `ETIMEOUT` and let run on (`Executor.run`'s `run_on`):
    the simulation judges, after the run, whether it ever ended (the `hang` anomaly)."""

    agent: str
    f: str
    value: dict[str, Any]
    invoked_s: float
    """The simulated time the controller invoked it: its history invoke's time."""
    task: asyncio.Task[Any]


class SimAgent:
    """One client agent node: a real `BookKeeper` behind the real agent `Executor`. An op
    that outlives its timeout runs on (kept in `late` until it ends): a real agent cancels
    it, which would hide a call that never ends."""

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
        self.late: dict[asyncio.Task[Any], LateCall] = {}
        self.waiting: dict[asyncio.Future[Any], tuple[float, Any]] = {}
        """Replies the controller waits for -> (when it gives up, its answer then)."""
        self.ran_on = 0  # ops that outlived their timeout, ended since or not

    async def start(self) -> None:
        await self.cluster.loop.spawn(self.name, self.bk.__aenter__())

    async def call(self, f: str, value: dict[str, Any], timeout: float) -> Any:
        """Run one op on this agent's node, as the controller's AgentConnection would: an
        agent paused (its own timeout waits with it) that does not answer within `timeout`
        plus the controller's margin gets the completion AgentConnection gives it, and
        its op goes on when it resumes (one that then outlives the agent's timeout is
        kept in `late`, like any other)."""
        loop = self.cluster.loop
        invoked, asked = loop.time(), dict(value)

        def run_on(task: asyncio.Task[Any]) -> None:
            self.late[task] = LateCall(self.name, f, asked, invoked, task)
            self.ran_on += 1
            task.add_done_callback(self.late.pop)

        reply: asyncio.Future[Any] = loop.create_future()

        async def answer() -> None:
            """The agent's side: its outcome handed straight to the waiting worker (an
            awaited task would wake it one callback later than a plain `await`)."""
            try:
                outcome = await self.executor.run(f, value, timeout, run_on)
            except BaseException:
                reply.cancel()  # the agent died: so does what waits for it
                raise
            if not reply.done():
                reply.set_result(outcome)

        lost = agent_lost(f, TimeoutError)
        self.waiting[reply] = (invoked + timeout + CONTROLLER_MARGIN_S, lost)
        if self.name in loop.paused:
            self._give_up_at(reply)
        loop.spawn(self.name, answer())
        try:
            return await reply
        finally:
            self.waiting.pop(reply)

    def paused(self) -> None:
        """SIGSTOP: the controller stops waiting for what it asked of this agent when
        AgentConnection would (the agent's timeouts wait with the agent). Armed only now,
        so an unpaused run's timers, and so its interleaving, stay as they were."""
        for reply in self.waiting:
            self._give_up_at(reply)

    def _give_up_at(self, reply: asyncio.Future[Any]) -> None:
        """At `reply`'s deadline, the controller's answer for it (a timer of the
        controller's, which runs while the agent is paused; called in its context)."""
        deadline, lost = self.waiting[reply]

        def give_up() -> None:
            if not reply.done():
                reply.set_result(lost)

        self.cluster.loop.call_at(deadline, give_up)


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

    def runs(self, node: str) -> bool:
        """Whether `node`'s process is up: a bookie's may be down; a client agent's is up
        until the run stops (no fault kills one)."""
        bookie = self.bookies.get(node)
        return bookie.running if bookie is not None else node not in self.loop.dead

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

    @property
    def ran_on(self) -> int:
        """Ops the agents let run on past their timeout in this run."""
        return sum(agent.ran_on for agent in self.agents.values())

    def late_calls(self) -> list[LateCall]:
        """Every agent's ops still running past their timeout, in the order invoked."""
        calls = [call for agent in self.agents.values() for call in agent.late.values()]
        return sorted(calls, key=lambda call: (call.invoked_s, call.agent))

    def stop(self) -> None:
        """End every process (the run is over; nothing needs a clean shutdown)."""
        for bookie in self.bookies.values():
            bookie.crash()
        for agent in self.agents:
            self.loop.kill_node(agent)
        for log in self._logs:
            log.close()
