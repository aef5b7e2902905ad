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


def test_zookeeper_logs_into_a_capped_rolled_file(tmp_path: Path) -> None:
    """ZooKeeper's own log is written (Debian's jar alone logs nothing: no slf4j binding)
    and rolled at half its cap with one rolled file kept, so it never outgrows the cap.
    A small cap: its start alone logs more than that."""
    cap = 8192
    server = LocalZooKeeper(tmp_path / "zk", max_log_bytes=cap).start()
    try:
        for _ in range(10):  # each session logs its opening and closing
            zk = KazooClient(hosts=server.connect_string)
            zk.start(timeout=30)
            zk.stop()
            zk.close()
        rolled = server.log_path.with_name(server.log_path.name + ".1")
        assert rolled.exists(), server.log_path.read_text()[-500:]
        logs = sorted(server.log_path.parent.glob(server.log_path.name + "*"))
        assert logs == [server.log_path, rolled]  # one rolled file kept, no more
        line = 2048  # a file is rolled after the write that takes it past half the cap
        assert all(log.stat().st_size <= cap // 2 + line for log in logs)
        assert " INFO " in rolled.read_text()
    finally:
        server.stop()
