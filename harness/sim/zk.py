"""The simulation's metadata service: an in-memory ZooKeeper behind kazoo's client API.

Only what the client and the bookie rely on, with ZooKeeper's semantics (pinned against
a real ZooKeeper by tests/integration/test_sim_zk.py): znode versions and compare-and-set
(`set`/`delete` with a version raise BadVersionError on a mismatch, -1 matches any),
sequential nodes numbered by how many children the parent ever had created (so numbers
are never reused after a delete), ephemeral nodes owned by a session and deleted when it
closes or expires, no children under ephemerals, `makepath`, `ensure_path`.

`SimZkClient` is a drop-in for the `KazooClient` methods the product calls, with no
thread: its calls return at once. Latency and partitions between a node and ZooKeeper are
added by `zk_call`, which the client's metadata store awaits instead of a thread hop.

A bookie's session lives as long as the bookie can heartbeat: paused, or partitioned from
ZooKeeper, for longer than the session timeout, it expires and the bookie's registration
goes with it; once it can reach ZooKeeper again its client hears LOST, opens a new session
and says CONNECTED, as kazoo does, and the bookie re-registers. The faults that cut a node
off tell the server (`reachability_changed`), and an expiry falls due at the next
operation anyone makes (`expire_due`): no heartbeat timer runs, so a run in which no
session expires steps through virtual time exactly as it did before. Clients' (agents')
sessions own no ephemeral node and are not watched.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kazoo.exceptions import (
    BadVersionError,
    ConnectionLoss,
    NoChildrenForEphemeralsError,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    SessionExpiredError,
)
from kazoo.protocol.states import KazooState, ZnodeStat

from bookie_image import buggify
from harness.sim.loop import CURRENT_NODE, SimLoop
from harness.sim.net import Network

ZK_NODE = "zk1"  # the name every runtime gives (the first) ZooKeeper server


@dataclass
class _Znode:
    data: bytes
    czxid: int
    mzxid: int
    owner: int = 0  # session id of an ephemeral node's owner
    version: int = 0
    cversion: int = 0
    created: int = 0  # children ever created: the next sequence number
    children: dict[str, None] = field(default_factory=dict)


def _parent(path: str) -> str:
    return path.rsplit("/", 1)[0] or "/"


class SimZooKeeper:
    """The znode tree and its sessions."""

    def __init__(self, loop: SimLoop, reachable: Callable[[str], bool] = lambda node: True) -> None:
        self._loop = loop
        self._reachable = reachable
        self._nodes: dict[str, _Znode] = {"/": _Znode(b"", 0, 0)}
        self._zxid = 0
        self._sessions = 0
        self.live: dict[int, None] = {}
        self._heartbeating: dict[int, SimZkClient] = {}
        """Sessions whose node heartbeats (bookies) -> their client."""
        self._cut_off: dict[int, float] = {}
        """Heartbeating sessions whose node cannot reach ZooKeeper -> since when."""

    def client(self, timeout: float = 10.0, node: str | None = None) -> SimZkClient:
        """A client; with `node`, one whose session expires when that node is cut off."""
        return SimZkClient(self, timeout, node)

    # -- sessions --------------------------------------------------------------------------

    def open_session(self) -> int:
        self._sessions += 1
        self.live[self._sessions] = None
        return self._sessions

    def close_session(self, session: int, *, client_lives: bool = False) -> None:
        """Close or expire: the session's ephemeral nodes go (deepest first). Unless its
        client lives on (an expiry it has not heard of yet), it no longer heartbeats."""
        if not client_lives:
            self._heartbeating.pop(session, None)
            self._cut_off.pop(session, None)
        if session not in self.live:
            return
        del self.live[session]
        owned = [path for path, node in self._nodes.items() if node.owner == session]
        for path in sorted(owned, key=len, reverse=True):
            self._remove(path)

    def expire_later(self, session: int, timeout: float) -> None:
        """The session's process died: ZooKeeper notices when the session times out."""
        self._heartbeating.pop(session, None)
        self._cut_off.pop(session, None)
        self._loop.call_later(timeout, self.close_session, session)

    def soon_as(self, node: str, fn: Callable[[], None]) -> None:
        """Run `fn` soon as `node`'s own work (held back while the node is paused)."""
        self._loop.call_soon(fn, context=self._loop.network.context(node))

    def heartbeat(self, session: int, client: SimZkClient) -> None:
        """Watch `session`: it lives only while `client.node` can reach ZooKeeper."""
        self._heartbeating[session] = client

    def reachability_changed(self) -> None:
        """A node was paused, resumed, partitioned or healed: a heartbeating session whose
        node is now cut off starts its timeout; one whose node is back stops it, and, if
        it expired meanwhile, its client reconnects with a new session."""
        now = self._loop.time()
        self.expire_due()
        for session, client in list(self._heartbeating.items()):
            assert client.node is not None
            if not self._reachable(client.node):
                self._cut_off.setdefault(session, now)
            elif self._cut_off.pop(session, None) is not None and session not in self.live:
                del self._heartbeating[session]
                client.reconnect()

    def expire_due(self) -> None:
        """Expire the sessions cut off for a timeout or longer. Done when anyone next asks
        (every operation does) rather than by a timer: an expiry can only be seen through
        an operation, and a timer of its own would move the virtual clock's steps, and with
        them every seeded run."""
        now = self._loop.time()
        for session, since in self._cut_off.items():
            if now - since >= self._heartbeating[session].timeout:
                self.close_session(session, client_lives=True)

    # -- operations ------------------------------------------------------------------------

    def _node(self, path: str) -> _Znode:
        node = self._nodes.get(path)
        if node is None:
            raise NoNodeError(path)
        return node

    def _stat(self, node: _Znode) -> ZnodeStat:
        return ZnodeStat(
            node.czxid,
            node.mzxid,
            0,
            0,
            node.version,
            node.cversion,
            0,
            node.owner,
            len(node.data),
            len(node.children),
            node.mzxid,
        )

    def create(
        self, session: int, path: str, value: bytes, ephemeral: bool, sequence: bool, makepath: bool
    ) -> str:
        self.expire_due()
        parent_path = _parent(path)
        if makepath and parent_path not in self._nodes:
            self.ensure_path(parent_path)
        parent = self._node(parent_path)
        if parent.owner:
            raise NoChildrenForEphemeralsError(parent_path)
        if sequence:
            path = f"{path}{parent.created:010d}"
        if path in self._nodes:
            raise NodeExistsError(path)
        self._zxid += 1
        self._nodes[path] = _Znode(
            bytes(value), self._zxid, self._zxid, session if ephemeral else 0
        )
        parent.children[path.rsplit("/", 1)[1]] = None
        parent.cversion += 1
        parent.created += 1
        return path

    def ensure_path(self, path: str) -> None:
        current = ""
        for part in path.strip("/").split("/"):
            current += "/" + part
            if current not in self._nodes:
                self.create(0, current, b"", False, False, False)

    def get(self, path: str) -> tuple[bytes, ZnodeStat]:
        self.expire_due()
        node = self._node(path)
        return node.data, self._stat(node)

    def set(self, path: str, value: bytes, version: int) -> ZnodeStat:
        self.expire_due()
        node = self._node(path)
        if version != -1 and version != node.version:
            raise BadVersionError(path)
        self._zxid += 1
        node.data, node.version, node.mzxid = bytes(value), node.version + 1, self._zxid
        return self._stat(node)

    def delete(self, path: str, version: int) -> None:
        self.expire_due()
        node = self._node(path)
        if version != -1 and version != node.version:
            raise BadVersionError(path)
        if node.children:
            raise NotEmptyError(path)
        self._remove(path)

    def _remove(self, path: str) -> None:
        del self._nodes[path]
        parent = self._nodes[_parent(path)]
        del parent.children[path.rsplit("/", 1)[1]]
        parent.cversion += 1

    def get_children(self, path: str) -> list[str]:
        self.expire_due()
        return sorted(self._node(path).children)

    def exists(self, path: str) -> ZnodeStat | None:
        self.expire_due()
        node = self._nodes.get(path)
        return None if node is None else self._stat(node)


class SimZkClient:
    """The subset of `KazooClient` that the product uses, on a `SimZooKeeper` session."""

    def __init__(self, server: SimZooKeeper, timeout: float, node: str | None = None) -> None:
        self._server = server
        self.timeout = timeout
        self.node = node
        self.session = 0
        self.crashed = False
        self._listeners: list[Callable[[str], Any]] = []
        self.handler = _InlineHandler()

    def _live(self) -> int:
        self._server.expire_due()
        if self.crashed:
            raise ConnectionLoss("the process owning this client is dead (simulation)")
        if self.session not in self._server.live:
            raise SessionExpiredError("session closed or expired (simulation)")
        return self.session

    def start(self, timeout: float = 15.0) -> None:
        if self.session not in self._server.live:
            self._open()

    def _open(self) -> None:
        self.session = self._server.open_session()
        if self.node is not None:
            self._server.heartbeat(self.session, self)

    def reconnect(self) -> None:
        """Back in touch after the session expired: LOST, a new session, CONNECTED — run
        as the node's own work, so a node still paused hears it when it resumes."""

        def reconnect() -> None:
            if self.crashed:
                return
            self._notify(KazooState.LOST)
            self._open()
            self._notify(KazooState.CONNECTED)

        assert self.node is not None
        self._server.soon_as(self.node, reconnect)

    def _notify(self, state: str) -> None:
        for listener in list(self._listeners):
            listener(state)

    def stop(self) -> None:
        self._server.close_session(self.session)

    def close(self) -> None:
        pass

    def crash(self) -> None:
        """The owning process died without closing the session: it expires later."""
        self.crashed = True
        if self.session in self._server.live:
            self._server.expire_later(self.session, self.timeout)

    def add_listener(self, listener: Callable[[str], Any]) -> None:
        self._listeners.append(listener)

    def create(
        self,
        path: str,
        value: bytes = b"",
        acl: Any = None,
        ephemeral: bool = False,
        sequence: bool = False,
        makepath: bool = False,
    ) -> str:
        return self._server.create(self._live(), path, value, ephemeral, sequence, makepath)

    def ensure_path(self, path: str, acl: Any = None) -> bool:
        self._live()
        self._server.ensure_path(path)
        return True

    def get(self, path: str, watch: Any = None) -> tuple[bytes, ZnodeStat]:
        self._live()
        return self._server.get(path)

    def set(self, path: str, value: bytes, version: int = -1) -> ZnodeStat:
        self._live()
        return self._server.set(path, value, version)

    def delete(self, path: str, version: int = -1, recursive: bool = False) -> bool:
        self._live()
        self._server.delete(path, version)
        return True

    def get_children(self, path: str, watch: Any = None) -> list[str]:
        self._live()
        return self._server.get_children(path)

    def exists(self, path: str, watch: Any = None) -> ZnodeStat | None:
        self._live()
        return self._server.exists(path)


class _InlineHandler:
    """kazoo's handler, as far as listeners use it: `spawn` runs the work soon, on the
    loop, as the node's own (kazoo would use a thread)."""

    def spawn(self, fn: Callable[..., Any], *args: Any) -> None:
        asyncio.get_running_loop().call_soon(fn, *args)


def zk_call(network: Network, timeout: float = 10.0) -> Callable[..., Any]:
    """How a node awaits a ZooKeeper call: a network round trip, or, across a partition,
    a connection loss once the call times out (the request never reached ZooKeeper)."""

    async def call(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        node = CURRENT_NODE.get()
        if network.blocked(node, ZK_NODE):
            await asyncio.sleep(timeout)
            raise ConnectionLoss(f"{node} cannot reach ZooKeeper (simulated partition)")
        await asyncio.sleep(network.delay() + buggify.delay("zk-delay"))
        result = fn(*args, **kwargs)
        await asyncio.sleep(network.delay())
        if buggify.fires("zk-lost-reply"):
            raise ConnectionLoss(f"{node} lost ZooKeeper's reply (buggify)")
        return result

    return call
