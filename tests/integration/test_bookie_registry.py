"""Registration survives a ZooKeeper session expiry (a paused or partitioned bookie)."""

from __future__ import annotations

import json
import time

from kazoo.client import KazooClient

from bookie_image.bookie.registry import Registry


def _wait_for(predicate, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError("condition not reached")


def test_ephemeral_registration_comes_back_after_session_expiry(
    zookeeper: str, ledgers_root: str
) -> None:
    registry = Registry(zookeeper, ledgers_root, "127.0.0.1:3181", "127.0.0.1", 3181)
    registry.start(timeout=15)
    observer = KazooClient(hosts=zookeeper)
    observer.start()
    try:
        registry.register(readonly=False)
        node = f"{ledgers_root}/available/127.0.0.1:3181"
        assert json.loads(observer.get(node)[0])["readonly"] is False

        # Expire the registry's session the standard way: a second client joins the
        # same session and closes it.
        session_id, password = registry._zk.client_id
        thief = KazooClient(hosts=zookeeper, client_id=(session_id, password))
        thief.start()
        thief.stop()
        thief.close()
        _wait_for(lambda: observer.exists(node) is None or registry._lost)
        _wait_for(lambda: observer.exists(node) is not None)
        assert registry._zk.client_id[0] != session_id  # a new session owns it

        registry.register(readonly=True)
        assert observer.exists(node) is None
        assert observer.exists(f"{ledgers_root}/available/readonly/127.0.0.1:3181")
        registry.unregister()
        assert observer.exists(f"{ledgers_root}/available/readonly/127.0.0.1:3181") is None
    finally:
        registry.stop()
        observer.stop()
        observer.close()
