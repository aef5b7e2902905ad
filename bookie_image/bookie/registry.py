"""ZooKeeper: the bookie's cookie and its registration as an ephemeral znode.

``<root>/available/<bookie_id>`` while writable, ``<root>/available/readonly/<bookie_id>``
while read-only; the data is JSON: host, port, readonly, pid. kazoo is blocking and
threaded: the service calls these methods through its offload, never on the loop.
After a session expiry the ephemeral node is gone, so it is re-created on reconnection.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import NodeExistsError, NoNodeError

from .cookies import Cookie


class Registry:
    """``client`` replaces the kazoo client built from ``connect`` (a simulation's own)."""

    def __init__(
        self,
        connect: str,
        root: str,
        bookie_id: str,
        host: str,
        port: int,
        client: KazooClient | None = None,
    ) -> None:
        self._zk = client if client is not None else KazooClient(hosts=connect, timeout=10.0)
        self._root = root
        self._id = bookie_id
        self._host = host
        self._port = port
        self._readonly: bool | None = None  # None: not registered
        self._lock = threading.Lock()
        self._lost = False

    @property
    def cookie_path(self) -> str:
        return f"{self._root}/cookies/{self._id}"

    @property
    def node(self) -> str:
        """The znode this bookie is registered at (its writable path before registering)."""
        return self._node(bool(self._readonly))

    def _node(self, readonly: bool) -> str:
        base = f"{self._root}/available"
        return f"{base}/readonly/{self._id}" if readonly else f"{base}/{self._id}"

    def start(self, timeout: float) -> None:
        self._zk.start(timeout=timeout)
        self._zk.add_listener(self._on_state)
        self._zk.ensure_path(f"{self._root}/available/readonly")
        self._zk.ensure_path(f"{self._root}/cookies")

    def stop(self) -> None:
        self._zk.stop()
        self._zk.close()

    def read_cookie(self) -> Cookie | None:
        try:
            data, _ = self._zk.get(self.cookie_path)
        except NoNodeError:
            return None
        return Cookie.decode(data)

    def write_cookie(self, cookie: Cookie) -> None:
        self._zk.create(self.cookie_path, cookie.encode(), makepath=True)

    def register(self, readonly: bool) -> None:
        """Publish the ephemeral node for this mode (and remove the other one)."""
        with self._lock:
            # The pid lets a launcher tell this registration from the leftover ephemeral
            # node of a killed predecessor, which lives on until its session expires.
            data = json.dumps(
                {"host": self._host, "port": self._port, "readonly": readonly, "pid": os.getpid()}
            ).encode()
            with contextlib.suppress(NoNodeError):
                self._zk.delete(self._node(not readonly))
            try:
                self._zk.create(self._node(readonly), data, ephemeral=True, makepath=True)
            except NodeExistsError:
                # Ours from this session, or a leftover of a dead session about to expire
                # (which may expire before the delete reaches it).
                with contextlib.suppress(NoNodeError):
                    self._zk.delete(self._node(readonly))
                self._zk.create(self._node(readonly), data, ephemeral=True, makepath=True)
            self._readonly = readonly

    def unregister(self) -> None:
        """Remove the registration at once (a stopping bookie should not be chosen)."""
        with self._lock:
            if self._readonly is not None:
                with contextlib.suppress(NoNodeError):
                    self._zk.delete(self._node(self._readonly))
                self._readonly = None

    def _on_state(self, state: str) -> None:
        if state == KazooState.LOST:
            self._lost = True
        elif state == KazooState.CONNECTED and self._lost and self._readonly is not None:
            self._lost = False
            readonly = self._readonly
            # Listeners must not block the connection thread.
            self._zk.handler.spawn(self.register, readonly)
