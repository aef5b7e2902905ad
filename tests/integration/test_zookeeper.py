"""The ZooKeeper launcher starts Debian's real ZooKeeper and stops it without a trace."""

from pathlib import Path

from kazoo.client import KazooClient

from harness.runtime.process import pid_alive
from harness.runtime.zookeeper import LocalZooKeeper


def test_zookeeper_serves_and_stops(tmp_path: Path) -> None:
    server = LocalZooKeeper(tmp_path / "zk").start()
    pid = server.pid
    assert pid is not None and pid_alive(pid)
    client = KazooClient(hosts=server.connect_string)
    client.start(timeout=10)
    try:
        client.create("/probe", b"v0")
        _, stat = client.get("/probe")
        client.set("/probe", b"v1", version=stat.version)
        assert client.get("/probe")[0] == b"v1"
    finally:
        client.stop()
    server.stop()
    assert not pid_alive(pid)
    assert not server.is_serving()
