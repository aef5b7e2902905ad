"""Hostile peers cost a bounded amount of memory: a bookie client that sends reads of a
1 MiB entry and never reads the replies, and agent requests nested too deep to parse."""

from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path

import pytest

from bookie_image.bookie.server import MAX_UNSENT_BYTES
from bookie_image.protocol import NEED_DATA, Connection, ReadRequest, Role, Status
from harness.runtime.local import LocalCluster
from tests.integration.test_bookie_process import L1, add, make_bookie

pytestmark = pytest.mark.integration
__all__ = ["make_bookie"]  # the fixture, shared

ENTRY_BYTES = 1 << 20
READS = 150
RSS_GROWTH_BOUND = 48 << 20
"""What one never-reading connection may add to the bookie's memory: MAX_UNSENT_BYTES (4
MiB) queued, the same again joined into one write and again in the transport's buffer, a
1 MiB entry being read and framed, and as much again for the allocator's free lists (CPython
keeps freed arenas): about 24 MiB, doubled for headroom. Unbounded, 150 replies of 1 MiB
grow it by about 150 MiB (the defect this guards against)."""


def rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS for {pid}")


def settled_rss(pid: int) -> int:
    """The process's RSS once it has stopped changing for 3 s (at most 90 s)."""
    samples: list[int] = []
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        samples.append(rss(pid))
        recent = samples[-12:]
        if len(recent) == 12 and max(recent) - min(recent) < 256 << 10:
            break
        time.sleep(0.25)
    return max(samples)


def test_a_client_that_never_reads_costs_the_bookie_one_bound(make_bookie) -> None:
    assert MAX_UNSENT_BYTES * 12 <= RSS_GROWTH_BOUND
    bookie = make_bookie().start()
    client = bookie.client()
    assert add(client, 0, os.urandom(ENTRY_BYTES)) == Status.EOK
    assert client.call(ReadRequest(1, L1, 0)).status == Status.EOK  # caches warmed
    before = rss(bookie.proc.pid)
    hostile = socket.create_connection(("127.0.0.1", bookie.port), timeout=30)
    hostile.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 << 10)
    codec = Connection(Role.CLIENT)
    hostile.sendall(b"".join(codec.send(ReadRequest(100 + i, L1, 0)) for i in range(READS)))
    grown = settled_rss(bookie.proc.pid) - before
    assert grown < RSS_GROWTH_BOUND, f"the bookie grew by {grown >> 20} MiB"
    answered = 0  # now read: every request is answered, none was dropped
    while answered < READS:
        event = codec.next_event()
        if event is NEED_DATA:
            data = hostile.recv(1 << 20)
            assert data, f"the bookie closed the connection after {answered} replies"
            codec.receive_data(data)
            continue
        assert event.status == Status.EOK and len(event.entry) > ENTRY_BYTES
        answered += 1
    assert client.call(ReadRequest(2, L1, 0)).status == Status.EOK  # still serving


def test_an_agent_answers_json_nested_too_deep_with_fail(tmp_path: Path, zookeeper: str) -> None:
    cluster = LocalCluster(tmp_path / "c", bookie_count=1, zk=zookeeper, client_count=1).up()
    try:
        agent = cluster.agents[0]
        with socket.create_connection((agent.host, agent.port), timeout=30) as sock:
            replies = sock.makefile("rb")
            sock.sendall(b"[" * 100_000 + b"]" * 100_000 + b"\n")
            reply = json.loads(replies.readline())
            assert reply["type"] == "fail" and "nested" in reply["error"], reply
            sock.sendall(b'{"id": 7, "f": "ping"}\n')  # the connection is still served
            assert json.loads(replies.readline())["type"] == "ok"
        assert "Traceback" not in agent.log_path.read_text()
    finally:
        cluster.down()
