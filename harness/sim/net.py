"""The simulated network: in-memory stream connections between simulated nodes.

The product's own TCP code runs on it unchanged: the loop's `create_connection` and
`create_server` (what `asyncio.open_connection` and the bookie's server call) land here
and hand out transports that behave like TCP sockets. So the model is TCP's:

- bytes on one connection arrive in order, each write after a seeded delay (uniform in
  `latency`); with probability `loss` a write is "lost" and retransmitted, i.e. arrives
  `rto` seconds later, holding back everything behind it;
- different connections are independent, so messages to different peers reorder freely;
- a node's egress may be shaped as `tc netem` would shape its interface (the `packet`
  fault), as TCP above netem lets it show: each write it sends waits `delay ± jitter` more
  (or, with probability `reorder`, skips that delay, as netem sends a reordered packet at
  once — still behind the bytes sent before it on its connection), with probability
  `loss` or `corrupt` is retransmitted (a corrupted segment fails TCP's checksum and is
  dropped), and queues behind the node's earlier writes for its size at `rate`; a
  duplicated segment is discarded by the receiving TCP, so `duplicate` costs nothing;
  a shaping with `to` acts only on the writes to those peers (one link's queue);
- a partition (a grudge: node -> the nodes whose traffic it drops) holds bytes in flight
  until it heals, and a connection attempt across it never completes (the caller's
  timeout decides); a process that dies resets its connections (the peer sees a reset);
  connecting to a port nobody listens on is refused.
"""

from __future__ import annotations

import asyncio
import contextvars
import random
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from harness.sim.loop import CURRENT_NODE, SimLoop


@dataclass(frozen=True)
class Shaping:
    """netem on one node's egress: extra delay uniform in `delay_s ± jitter_s`; the
    probabilities that a write is lost or corrupted (either way retransmitted), duplicated
    (no effect on a TCP stream) or reordered (sent without the delay); and the egress
    rate in bits per second (0: unlimited); `to`: the only peers whose packets it shapes
    (empty: every peer), as an htb filter on their addresses does."""

    delay_s: float
    jitter_s: float = 0.0
    loss: float = 0.0
    duplicate: float = 0.0
    reorder: float = 0.0
    corrupt: float = 0.0
    rate_bps: float = 0.0
    to: tuple[str, ...] = ()


_EOF = object()  # the peer closed its end
_RESET = object()  # the peer's process died (or aborted the connection)


class SimServer:
    """What `create_server` returns; `close` stops accepting connections."""

    def __init__(
        self, network: Network, node: str, factory: Callable[[], Any], address: Any
    ) -> None:
        self._network = network
        self.node = node
        self.factory = factory
        self.address = address

    def close(self) -> None:
        if self._network.servers.get(self.address) is self:
            del self._network.servers[self.address]

    async def wait_closed(self) -> None:
        pass

    def is_serving(self) -> bool:
        return self._network.servers.get(self.address) is self


class SimTransport(asyncio.Transport):
    """One end of a simulated connection, owned by `node`."""

    def __init__(self, network: Network, node: str, address: tuple[str, int]) -> None:
        super().__init__()
        self._network = network
        self.node = node
        self.address = address
        self.peer: SimTransport
        self.protocol: Any = None
        self.closing = False  # this end closed (or its process died): nothing more in or out
        self.paused = False
        self.inbox: list[Any] = []  # arrived while reading was paused
        self.held: list[Any] = []  # sent while a partition stood between the ends
        self.last_delivery = 0.0  # arrivals keep the order they were sent in

    # -- asyncio.Transport -----------------------------------------------------------------

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if not self.closing and data:
            self._network.send(self, bytes(data))

    def close(self) -> None:
        self._end(_EOF, None)

    def abort(self) -> None:
        self._end(_RESET, None)

    def is_closing(self) -> bool:
        return self.closing

    def pause_reading(self) -> None:
        self.paused = True

    def resume_reading(self) -> None:
        self.paused = False
        while self.inbox and not self.paused:
            self.arrive(self.inbox.pop(0))

    def is_reading(self) -> bool:
        return not self.paused

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        if name == "peername":
            return self.peer.address
        if name == "sockname":
            return self.address
        return default

    def get_write_buffer_size(self) -> int:
        return 0

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        pass

    def can_write_eof(self) -> bool:
        return False

    # -- simulation ------------------------------------------------------------------------

    def _end(self, signal: object, exc: Exception | None) -> None:
        if self.closing:
            return
        self.closing = True
        self._network.send(self, signal)
        self._network.forget(self)
        self._network.loop.call_soon(
            self.protocol.connection_lost, exc, context=self._network.context(self.node)
        )

    def die(self) -> None:
        """The owning process is gone: the peer sees a reset, this end hears nothing more."""
        if not self.closing:
            self.closing = True
            self._network.send(self, _RESET)

    def arrive(self, item: Any) -> None:
        """Something the peer sent reaches this end (in this end's node context)."""
        if self.closing:
            return
        if self.paused:
            self.inbox.append(item)
            return
        if item is _EOF or item is _RESET:
            self.closing = True
            self._network.forget(self)
            if item is _EOF:
                self.protocol.eof_received()
            error = ConnectionResetError("reset by peer") if item is _RESET else None
            self.protocol.connection_lost(error)
            return
        self.protocol.data_received(item)


class Network:
    """Every connection and listener of one simulation, and the faults between nodes."""

    def __init__(
        self,
        loop: SimLoop,
        rng: random.Random,
        latency: tuple[float, float] = (0.0002, 0.002),
        loss: float = 0.0,
        rto: float = 0.2,
    ) -> None:
        self.loop = loop
        self.rng = rng
        self.latency = latency
        self.loss = loss
        self.rto = rto
        self.servers: dict[Any, SimServer] = {}
        self.grudge: dict[str, frozenset[str]] = {}  # node -> nodes whose traffic it drops
        self.shaped: dict[str, Shaping] = {}  # node -> how its egress is shaped
        self._egress_busy: dict[str, float] = {}  # rate-limited node -> when its queue drains
        self._ends: dict[str, dict[SimTransport, None]] = {}  # open ends per owning node
        self._stalled: dict[SimTransport, None] = {}  # ends holding bytes behind a partition
        self._contexts: dict[str, contextvars.Context] = {}
        self._ports = 40000

    def context(self, node: str) -> contextvars.Context:
        """The context callbacks of `node` run in (so they count as that node's work)."""
        context = self._contexts.get(node)
        if context is None:
            context = self._contexts[node] = contextvars.Context()
            context.run(CURRENT_NODE.set, node)
        return context

    def delay(self) -> float:
        """One seeded one-way delay (a lost packet costs a retransmission timeout)."""
        delay = self.rng.uniform(*self.latency)
        if self.loss and self.rng.random() < self.loss:
            delay += self.rto
        return delay

    def shaping_delay(self, node: str, peer: str, size: int = 0) -> float:
        """The extra one-way delay `node`'s egress shaping adds to one write of `size`
        bytes to `peer`. Drawn only while it is shaped, and a draw per parameter only when that
        parameter is set, so runs draw exactly what they drew before the parameter was."""
        shaping = self.shaped.get(node)
        if shaping is None or (shaping.to and peer not in shaping.to):
            return 0.0
        extra = max(0.0, self.rng.uniform(-shaping.jitter_s, shaping.jitter_s) + shaping.delay_s)
        if shaping.reorder and self.rng.random() < shaping.reorder:
            extra = 0.0
        if shaping.loss and self.rng.random() < shaping.loss:
            extra += self.rto
        if shaping.corrupt and self.rng.random() < shaping.corrupt:
            extra += self.rto
        if shaping.rate_bps:
            now = self.loop.time()
            sent = max(now, self._egress_busy.get(node, now)) + size * 8 / shaping.rate_bps
            self._egress_busy[node] = sent
            extra += sent - now
        return extra

    def shape(self, node: str, shaping: Shaping | None) -> None:
        """Shape `node`'s egress, or (None) stop: netem's queue goes with its qdisc."""
        self._egress_busy.pop(node, None)
        if shaping is None:
            self.shaped.pop(node, None)
        else:
            self.shaped[node] = shaping

    def blocked(self, a: str, b: str) -> bool:
        """Whether a partition stands between `a` and `b` (in either direction)."""
        return a in self.grudge.get(b, ()) or b in self.grudge.get(a, ())

    # -- faults ----------------------------------------------------------------------------

    def partition(self, grudge: dict[str, Iterable[str]]) -> None:
        """Replace the grudge; bytes held by a partition that no longer stands move on."""
        self.grudge = {node: frozenset(others) for node, others in grudge.items() if others}
        for end in list(self._stalled):
            if not self.blocked(end.node, end.peer.node):
                del self._stalled[end]
                held, end.held = end.held, []
                for item in held:
                    self._deliver(end, item)

    def kill(self, node: str) -> None:
        """`node`'s process died: its listeners vanish and its connections reset."""
        for address in [a for a, s in self.servers.items() if s.node == node]:
            del self.servers[address]
        for end in list(self._ends.pop(node, {})):
            end.die()

    # -- transport plumbing ------------------------------------------------------------------

    def forget(self, end: SimTransport) -> None:
        self._ends.get(end.node, {}).pop(end, None)

    def send(self, end: SimTransport, item: Any) -> None:
        if end.held or self.blocked(end.node, end.peer.node):
            end.held.append(item)
            self._stalled[end] = None
        else:
            self._deliver(end, item)

    def _deliver(self, end: SimTransport, item: Any) -> None:
        delay = self.delay()
        size = len(item) if isinstance(item, bytes) else 0
        delay += self.shaping_delay(end.node, end.peer.node, size)
        at = max(self.loop.time() + delay, end.last_delivery)
        end.last_delivery = at
        peer = end.peer
        self.loop.call_at(at, peer.arrive, item, context=self.context(peer.node))

    def listen(self, factory: Callable[[], Any], host: str, port: int) -> SimServer:
        node = CURRENT_NODE.get()
        if (host, port) in self.servers:
            raise OSError(98, f"address {host}:{port} already in use")
        server = self.servers[(host, port)] = SimServer(self, node, factory, (host, port))
        return server

    async def connect(
        self, factory: Callable[[], Any], host: str, port: int
    ) -> tuple[SimTransport, Any]:
        node = CURRENT_NODE.get()
        server = self.servers.get((host, port))
        if server is not None and self.blocked(node, server.node):
            await self.loop.create_future()  # the SYN is dropped: hang until the caller gives up
        peer = server.node if server else ""
        shaped = self.shaping_delay(node, peer) + (
            self.shaping_delay(server.node, node) if server else 0.0
        )
        await asyncio.sleep(2 * self.delay() + shaped)
        server = self.servers.get((host, port))
        if server is None:
            raise ConnectionRefusedError(111, f"connection to {host}:{port} refused")
        self._ports += 1
        mine = SimTransport(self, node, (node, self._ports))
        theirs = SimTransport(self, server.node, (host, port))
        mine.peer, theirs.peer = theirs, mine
        self._ends.setdefault(node, {})[mine] = None
        self._ends.setdefault(server.node, {})[theirs] = None
        theirs.protocol = self.context(server.node).run(server.factory)
        self.context(server.node).run(theirs.protocol.connection_made, theirs)
        mine.protocol = factory()
        mine.protocol.connection_made(mine)
        return mine, mine.protocol
