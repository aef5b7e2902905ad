"""The connection protocol without sockets: a fake transport, as a simulation would use."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from bookie_image.bookie.server import BookieConnection
from bookie_image.protocol import (
    NEED_DATA,
    AddRequest,
    Connection,
    ReadRequest,
    Role,
    Status,
)

from .test_bookie_storage import KEY, L1, Node, entry


class FakeTransport:
    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.closed = False
        self.paused = False

    def write(self, data: bytes) -> None:
        self.writes.append(data)

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed

    def pause_reading(self) -> None:
        self.paused = True

    def resume_reading(self) -> None:
        self.paused = False

    def get_write_buffer_size(self) -> int:
        return 0

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        pass

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return ("10.0.0.1", 4242) if name == "peername" else default


def responses(transport: FakeTransport) -> list[Any]:
    codec = Connection(Role.CLIENT)
    codec.receive_data(b"".join(transport.writes))
    out = []
    while (event := codec.next_event()) is not NEED_DATA:
        out.append(event)
    return out


async def test_pipelined_adds_are_answered_in_one_write(tmp_path: Path) -> None:
    node = await Node.open(tmp_path)
    live: set[BookieConnection] = set()
    connection = BookieConnection(node.bookie, node.events, live)
    transport = FakeTransport()
    connection.connection_made(transport)
    client = Connection(Role.CLIENT)
    frames = b"".join(client.send(AddRequest(i, KEY, entry(L1, i))) for i in range(10))
    connection.data_received(frames[:7])  # frames may arrive in any pieces
    connection.data_received(frames[7:])
    for _ in range(20):
        await asyncio.sleep(0.01)
        if transport.writes:
            break
    await asyncio.sleep(0.01)
    assert len(transport.writes) == 1  # one batch, one fsync, one write
    assert [(r.request_id, r.status) for r in responses(transport)] == [
        (i, Status.EOK) for i in range(10)
    ]
    assert live == {connection}
    connection.connection_lost(None)
    assert not live
    await node.crash()


async def test_bad_frames_answer_ebadreq_or_close(tmp_path: Path) -> None:
    node = await Node.open(tmp_path)
    connection = BookieConnection(node.bookie, node.events, set())
    transport = FakeTransport()
    connection.connection_made(transport)
    frame = bytearray(Connection(Role.CLIENT).send(ReadRequest(9, L1, 0)))
    frame[3] -= 1  # the READ body one byte short
    connection.data_received(bytes(frame[:-1]))
    await asyncio.sleep(0.01)
    assert [(r.request_id, r.status) for r in responses(transport)] == [(9, Status.EBADREQ)]
    assert not transport.closed
    connection.data_received(b"\xff\xff\xff\xff garbage")  # impossible length
    assert transport.closed
    actions = [e["action"] for e in node.events_named("protocol-error")]
    assert actions == ["answered", "closed"]
    assert node.events_named("protocol-error")[0]["peer"] == "10.0.0.1:4242"
    await node.crash()
