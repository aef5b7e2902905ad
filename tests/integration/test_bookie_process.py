"""The bookie as a real process against a real ZooKeeper, spoken to over TCP with the codec.

Acceptance for issue 3's bookie: acknowledged adds survive SIGKILL; fence bit and master
key survive restart; a wiped data dir makes the bookie refuse to start; corrupt entry
bytes answer EIO; garbage on a socket does not take the bookie down.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from kazoo.client import KazooClient

from bookie_image.protocol import (
    NEED_DATA,
    AddRequest,
    BookieInfoRequest,
    Connection,
    DigestType,
    LedgerId,
    ReadRequest,
    Role,
    Status,
    encode_entry,
    master_key_for,
)
from harness.runtime.process import free_port
from tests.helpers.bookies import wait_checkpointed

KEY = master_key_for(b"secret")
L1 = LedgerId(0, 1)
READY_TIMEOUT_S = 20.0


def entry(ledger: LedgerId, eid: int, payload: bytes) -> bytes:
    return encode_entry(ledger, eid, eid - 1, eid + 1, payload, DigestType.CRC32, KEY)


class Client:
    """A blocking client: one request at a time is plenty for these tests."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.codec = Connection(Role.CLIENT)

    def call(self, request: Any) -> Any:
        self.sock.sendall(self.codec.send(request))
        return self.receive()

    def receive(self) -> Any:
        while True:
            event = self.codec.next_event()
            if event is not NEED_DATA:
                return event
            data = self.sock.recv(65536)
            if not data:
                raise ConnectionError("bookie closed the connection")
            self.codec.receive_data(data)

    def close(self) -> None:
        self.sock.close()


class BookieProcess:
    """Config, data dirs and process of one bookie under `root`."""

    def __init__(
        self, root: Path, zk: str, ledgers_root: str, bugs: str = "", **extra: Any
    ) -> None:
        self.root = root
        self.env = {**os.environ, "BKCHAOS_BUGS": bugs}
        self.port = free_port()
        self.zk = zk
        self.ledgers_root = ledgers_root
        self.bookie_id = f"127.0.0.1:{self.port}"
        self.journal = root / "journal"
        self.ledgers = root / "ledgers"
        self.log = root / "bookie.log"
        self.config = root / "bookie.toml"
        lines = [
            f"port = {self.port}",
            f'zk = "{zk}"',
            f'zk_ledgers_root = "{ledgers_root}"',
            f'journal_dir = "{self.journal}"',
            f'ledger_dirs = ["{self.ledgers}"]',
        ] + [f"{k} = {json.dumps(v)}" for k, v in extra.items()]
        root.mkdir(parents=True, exist_ok=True)
        self.config.write_text("\n".join(lines) + "\n")
        self.proc: subprocess.Popen[bytes] | None = None

    def spawn(self) -> subprocess.Popen[bytes]:
        self.log.write_text("")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "bookie_image.bookie", "--config", str(self.config)],
            stderr=self.log.open("ab"),
            stdout=subprocess.DEVNULL,
            env=self.env,
        )
        return self.proc

    def start(self) -> BookieProcess:
        proc = self.spawn()
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            if any(e["event"] == "ready" for e in self.events()):
                return self
            if proc.poll() is not None:
                raise AssertionError(f"bookie exited {proc.returncode}:\n{self.log.read_text()}")
            time.sleep(0.05)
        raise AssertionError(f"bookie not ready:\n{self.log.read_text()}")

    def events(self) -> list[dict[str, Any]]:
        out = []
        for line in self.log.read_text().splitlines():
            if line.startswith("{"):
                out.append(json.loads(line))
        return out

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> int:
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(15)

    def client(self) -> Client:
        return Client(self.port)


@pytest.fixture
def make_bookie(zookeeper: str, ledgers_root: str, tmp_path: Path):
    made: list[BookieProcess] = []

    def make(**extra: Any) -> BookieProcess:
        bookie = BookieProcess(tmp_path / f"b{len(made)}", zookeeper, ledgers_root, **extra)
        made.append(bookie)
        return bookie

    yield make
    for bookie in made:
        if bookie.proc is not None and bookie.proc.poll() is None:
            bookie.kill()


def add(client: Client, eid: int, payload: bytes, **kw: Any) -> Status:
    return client.call(AddRequest(eid, KEY, entry(L1, eid, payload), **kw)).status


def test_acknowledged_adds_survive_sigkill(make_bookie) -> None:
    bookie = make_bookie().start()
    client = bookie.client()
    for eid in range(20):
        assert add(client, eid, b"payload-%d" % eid) == Status.EOK
    bookie.kill()  # right after the acks: no checkpoint ran, only the journal has them
    bookie.start()
    assert [e["count"] for e in bookie.events() if e["event"] == "journal-replayed"] == [20]
    client = bookie.client()
    for eid in range(20):
        response = client.call(ReadRequest(100 + eid, L1, eid))
        assert response.status == Status.EOK
        assert response.entry == entry(L1, eid, b"payload-%d" % eid)
    assert client.call(ReadRequest(1, L1, -1)).entry_id == 19

    # Restarts with nothing to replay (every journal file checkpointed and deleted) must
    # not reuse journal sequence numbers, or the next crash would lose new adds.
    bookie.kill()
    bookie.start()
    bookie.kill()
    bookie.start()
    client = bookie.client()
    for eid in range(20, 30):
        assert add(client, eid, b"payload-%d" % eid) == Status.EOK
    bookie.kill()
    bookie.start()
    client = bookie.client()
    for eid in range(30):
        response = client.call(ReadRequest(200 + eid, L1, eid))
        assert response.entry == entry(L1, eid, b"payload-%d" % eid)
    assert bookie.stop() == 0


def test_fence_and_master_key_survive_restart(make_bookie) -> None:
    bookie = make_bookie().start()
    client = bookie.client()
    assert add(client, 0, b"a") == Status.EOK
    fenced = client.call(ReadRequest(1, L1, -1, fence=True, master_key=KEY))
    assert (fenced.status, fenced.entry_id) == (Status.EOK, 0)
    assert add(client, 1, b"b") == Status.EFENCED
    assert any(e["event"] == "fenced" for e in bookie.events())
    bookie.kill()
    bookie.start()
    client = bookie.client()
    assert add(client, 1, b"b") == Status.EFENCED
    assert add(client, 1, b"b", recovery=True) == Status.EOK
    wrong = AddRequest(2, master_key_for(b"wrong"), entry(L1, 2, b"c"), recovery=True)
    assert client.call(wrong).status == Status.EUA
    assert bookie.stop() == 0


def test_wiped_data_dir_refuses_to_start(make_bookie, zookeeper: str, ledgers_root: str) -> None:
    bookie = make_bookie().start()
    assert add(bookie.client(), 0, b"a") == Status.EOK
    assert bookie.stop() == 0
    shutil.rmtree(bookie.ledgers)
    bookie.ledgers.mkdir()
    assert bookie.spawn().wait(20) == 3
    text = bookie.log.read_text()
    assert str(bookie.ledgers) in text
    assert "wiped" in text and "delete the ZooKeeper cookie" in text
    (refused,) = [e for e in bookie.events() if e["event"] == "cookie-refused"]
    assert refused["dir"] == str(bookie.ledgers)

    # The operator, knowingly, deletes the ZooKeeper cookie and empties every data dir.
    zk = KazooClient(hosts=zookeeper)
    zk.start()
    try:
        zk.delete(f"{ledgers_root}/cookies/{bookie.bookie_id}")
    finally:
        zk.stop()
        zk.close()
    shutil.rmtree(bookie.journal)
    bookie.start()
    (checked,) = [e for e in bookie.events() if e["event"] == "cookie-checked"]
    assert checked["action"] == "new"
    assert bookie.client().call(ReadRequest(1, L1, 0)).status == Status.ENOLEDGER
    assert bookie.stop() == 0


def test_corrupt_entry_bytes_answer_eio(make_bookie) -> None:
    bookie = make_bookie().start()
    client = bookie.client()
    assert add(client, 0, b"good" * 64) == Status.EOK
    assert add(client, 1, b"evil" * 64) == Status.EOK
    assert bookie.stop() == 0  # a clean stop checkpoints: the entries are in the entry log
    (log,) = (bookie.ledgers / "current").glob("entrylog-*.log")
    data = bytearray(log.read_bytes())
    data[data.index(b"evil" * 64) + 17] ^= 0x40
    log.write_bytes(bytes(data))
    bookie.start()
    client = bookie.client()
    assert client.call(ReadRequest(1, L1, 0)).status == Status.EOK
    assert client.call(ReadRequest(2, L1, 1)).status == Status.EIO
    assert any(e["event"] == "corrupt-entry" for e in bookie.events())
    assert bookie.stop() == 0


def test_garbage_on_a_socket_does_not_take_the_bookie_down(make_bookie) -> None:
    bookie = make_bookie().start()
    healthy = bookie.client()
    assert add(healthy, 0, b"a") == Status.EOK

    # A frame with a readable header but a bad body: answered EBADREQ, connection usable.
    bad_body = bookie.client()
    frame = bytearray(bad_body.codec.send(ReadRequest(77, L1, 0)))
    frame[3] -= 1  # one byte shorter than a READ body must be
    bad_body.sock.sendall(bytes(frame[:-1]))
    response = bad_body.receive()
    assert (response.request_id, response.status) == (77, Status.EBADREQ)
    assert bad_body.call(ReadRequest(78, L1, 0)).status == Status.EOK

    # Pure garbage (an impossible length): that connection is closed, nobody else's.
    garbage = socket.create_connection(("127.0.0.1", bookie.port), timeout=10)
    garbage.sendall(b"\xff\xff\xff\xff" + os.urandom(256))  # length prefix first
    garbage.settimeout(10)
    while garbage.recv(4096):
        pass
    garbage.close()

    assert healthy.call(ReadRequest(2, L1, 0)).status == Status.EOK
    assert add(healthy, 1, b"b") == Status.EOK
    assert healthy.call(BookieInfoRequest(3)).total_bytes > 0
    errors = [e for e in bookie.events() if e["event"] == "protocol-error"]
    assert {e["action"] for e in errors} == {"answered", "closed"}
    assert bookie.proc is not None and bookie.proc.poll() is None
    assert bookie.stop() == 0


def test_registration_and_readonly_mode(make_bookie, zookeeper: str, ledgers_root: str) -> None:
    bookie = make_bookie(readonly_threshold=0.0001).start()  # any disk is "full"
    zk = KazooClient(hosts=zookeeper)
    zk.start()
    try:
        data, _ = zk.get(f"{ledgers_root}/available/readonly/{bookie.bookie_id}")
        assert json.loads(data) == {
            "host": "127.0.0.1",
            "port": bookie.port,
            "readonly": True,
            "pid": bookie.proc.pid,
        }
        assert zk.exists(f"{ledgers_root}/available/{bookie.bookie_id}") is None
        assert add(bookie.client(), 0, b"a") == Status.EREADONLY
        assert any(e["event"] == "readonly" for e in bookie.events())
        assert bookie.stop() == 0
        assert zk.exists(f"{ledgers_root}/available/readonly/{bookie.bookie_id}") is None
    finally:
        zk.stop()
        zk.close()


def test_bad_config_exits_254_naming_the_key(tmp_path: Path) -> None:
    config = tmp_path / "bad.toml"
    config.write_text('port = 3181\nzk = "127.0.0.1:1"\njournal_dir = "j"\n')
    proc = subprocess.run(
        [sys.executable, "-m", "bookie_image.bookie", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 254
    assert "'ledger_dirs'" in proc.stderr and "Traceback" not in proc.stderr


def _power_loss(data_dirs: list[Path]) -> None:
    """What the power-loss nemesis does: every file back to its last fsynced length, as
    recorded in the dir's manifest; files the manifest does not list were never fsynced."""
    for data_dir in data_dirs:
        synced = json.loads((data_dir / ".fsynced.json").read_text())["files"]
        for path in data_dir.rglob("*"):
            rel = str(path.relative_to(data_dir))
            if path.is_file() and rel != ".fsynced.json":
                with path.open("r+b") as f:
                    f.truncate(synced.get(rel, 0))


def test_acknowledged_adds_survive_power_loss(make_bookie) -> None:
    bookie = make_bookie().start()
    client = bookie.client()
    for eid in range(30):
        assert add(client, eid, b"before-%d" % eid) == Status.EOK
    wait_checkpointed([bookie.ledgers], L1.id, 30)  # into the entry log and the index
    for eid in range(30, 60):
        assert add(client, eid, b"after-%d" % eid) == Status.EOK
    bookie.kill()
    _power_loss([bookie.journal, bookie.ledgers])
    bookie.start()
    client = bookie.client()
    for eid in range(60):
        payload = b"before-%d" % eid if eid < 30 else b"after-%d" % eid
        response = client.call(ReadRequest(eid, L1, eid))
        assert (response.status, response.entry) == (Status.EOK, entry(L1, eid, payload))
    assert bookie.stop() == 0


def journal_stats_counting_writes(bookie: BookieProcess) -> dict[str, Any]:
    """The bookie's first `journal-stats` line that counts a journal write (it logs one
    within half a second of a write), polled for."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        stats = [e for e in bookie.events() if e["event"] == "journal-stats"]
        if stats and stats[-1]["batches"] >= 1:
            return stats[-1]
        time.sleep(0.05)
    raise AssertionError(f"no journal-stats line counts a write:\n{bookie.log.read_text()}")


def test_seeded_bugs_no_cookie_and_no_journal_fsync(make_bookie) -> None:
    bookie = make_bookie(bugs="no-cookie,no-journal-fsync").start()
    client = bookie.client()
    for eid in range(5):
        assert add(client, eid, b"x") == Status.EOK  # acknowledged without any fsync
    assert journal_stats_counting_writes(bookie)["fsyncs"] == 0
    # Nothing was ever fsynced (not even a cookie), so there is no manifest at all: a
    # power loss drops every journal byte.
    assert not (bookie.journal / ".fsynced.json").exists()
    bookie.kill()
    shutil.rmtree(bookie.ledgers)
    bookie.start()  # a wiped disk is accepted: the bug the cookie check exists for
    assert bookie.client().call(ReadRequest(1, L1, 0)).status in (Status.EOK, Status.ENOLEDGER)
    assert bookie.stop() == 0
