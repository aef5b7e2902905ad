"""The network side: one asyncio Protocol per connection, over the sans-IO codec.

The transport is an interface (:class:`Transport`, which asyncio's transports satisfy), so
a simulation can feed `data_received` and collect writes without sockets. Replies produced
in one loop step are coalesced into one write.

Memory per connection is bounded: once its unsent replies (queued here and in the
transport's buffer) exceed MAX_UNSENT_BYTES, the connection stops decoding requests and
stops reading from the socket — the kernel's buffers fill and TCP pushes back on the
client — until the replies drain below a quarter of that (asyncio's pause_writing /
resume_writing). A client that never reads its replies costs one bound, not one reply
per request.

A malformed frame is answered with EBADREQ (or EBADVERSION) when its request id and
opcode are readable, otherwise the connection is closed; either way it is logged as
`protocol-error` and every other connection keeps being served.
"""

from __future__ import annotations

import asyncio
from typing import Any, Protocol

from bookie_image import buggify
from bookie_image.protocol import (
    NEED_DATA,
    AddResponse,
    BookieInfoResponse,
    Connection,
    LedgerId,
    ReadLacResponse,
    ReadResponse,
    RemoteProtocolError,
    Role,
    WriteLacResponse,
)

from .bookie import Bookie
from .events import EventLog

_NOWHERE = LedgerId(0, 0)
MAX_UNSENT_BYTES = 4 << 20
"""Replies a connection may hold unsent before it stops reading requests: a few of the
largest entries (1 MiB in the workloads), far more than a reading client ever lets pile
up. A reply already being made when the bound is crossed is still sent, so the bound is
this plus the replies of requests in flight (reads answer at once; adds are small)."""

# opcode -> the error response for a request we could not decode (docs/protocol.md)
_ERROR_RESPONSES = {
    1: lambda rid, status: AddResponse(rid, status, _NOWHERE, -1),
    2: lambda rid, status: ReadResponse(rid, status, _NOWHERE, -1),
    3: lambda rid, status: ReadLacResponse(rid, status, _NOWHERE, -1),
    4: lambda rid, status: WriteLacResponse(rid, status, _NOWHERE),
    5: lambda rid, status: BookieInfoResponse(rid, status, 0, 0),
}


class Transport(Protocol):
    def write(self, data: bytes) -> None: ...

    def close(self) -> None: ...

    def is_closing(self) -> bool: ...

    def pause_reading(self) -> None: ...

    def resume_reading(self) -> None: ...

    def get_write_buffer_size(self) -> int: ...

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None: ...

    def get_extra_info(self, name: str, default: Any = None) -> Any: ...


class BookieConnection(asyncio.Protocol):
    def __init__(self, bookie: Bookie, events: EventLog, live: set[BookieConnection]) -> None:
        self._bookie = bookie
        self._events = events
        self._live = live  # every open connection, so a shutdown can close them
        self._codec = Connection(Role.SERVER)
        self._transport: Transport | None = None
        self._peer = "?"
        self._out: list[bytes] = []
        self._out_bytes = 0
        self._held = False  # not decoding or reading: too many replies unsent
        self._stopping = False  # shutdown: reading stays paused

    def connection_made(self, transport: Any) -> None:
        self._transport = transport
        transport.set_write_buffer_limits(high=MAX_UNSENT_BYTES, low=MAX_UNSENT_BYTES // 4)
        self._live.add(self)
        peer = transport.get_extra_info("peername")
        if peer:
            self._peer = f"{peer[0]}:{peer[1]}"

    def connection_lost(self, exc: Exception | None) -> None:
        self._live.discard(self)
        self._transport = None
        self._out.clear()
        self._out_bytes = 0

    def pause(self) -> None:
        """Stop reading requests (shutdown); answers still go out."""
        self._stopping = True
        if self._transport is not None:
            self._transport.pause_reading()

    def pause_writing(self) -> None:
        """asyncio: the transport's buffer is over MAX_UNSENT_BYTES; stop reading."""
        self._hold()

    def resume_writing(self) -> None:
        """asyncio: the buffer drained below a quarter of the bound; read again."""
        self._release()

    def _unsent(self) -> int:
        buffered = self._transport.get_write_buffer_size() if self._transport else 0
        return self._out_bytes + buffered

    def _hold(self) -> None:
        if not self._held and self._transport is not None:
            self._held = True
            self._transport.pause_reading()

    def _release(self) -> None:
        """Decode what was received meanwhile, then read again (unless shutting down)."""
        if not self._held or self._transport is None or self._unsent() > MAX_UNSENT_BYTES:
            return
        if self._stopping:  # shutting down or closing: no more requests
            return
        self._held = False
        self._handle_requests()
        if not self._held and not self._stopping and self._transport is not None:
            self._transport.resume_reading()

    def close(self) -> None:
        """Send what is already answered, then close."""
        self._stopping = True
        if self._transport is not None:
            self._flush()
            self._transport.close()
            self._transport = None

    def data_received(self, data: bytes) -> None:
        self._codec.receive_data(data)
        self._handle_requests()

    def _handle_requests(self) -> None:
        """Hand every complete request to the bookie, until too many replies are unsent."""
        while self._transport is not None:
            if self._unsent() > MAX_UNSENT_BYTES:
                self._hold()
                return
            try:
                request = self._codec.next_event()
            except RemoteProtocolError as exc:
                self._protocol_error(exc)
                continue
            if request is NEED_DATA:
                return
            self._bookie.handle(request, self._reply)

    def _protocol_error(self, exc: RemoteProtocolError) -> None:
        make = _ERROR_RESPONSES.get(exc.opcode) if exc.opcode is not None else None
        answered = exc.request_id is not None and make is not None
        self._events.emit(
            "protocol-error",
            peer=self._peer,
            error=str(exc),
            request_id=exc.request_id,
            action="answered" if answered else "closed",
        )
        if answered:
            assert make is not None and exc.request_id is not None
            self._reply(make(exc.request_id, exc.status))
        else:
            self.close()

    def _reply(self, response: Any) -> None:
        if pause := buggify.delay("bookie-reply-delay"):
            asyncio.get_running_loop().call_later(pause, self._send, response)
        else:
            self._send(response)

    def _send(self, response: Any) -> None:
        if self._transport is None or self._transport.is_closing():
            return
        if not self._out:
            asyncio.get_running_loop().call_soon(self._flush)
        frame = self._codec.send(response)
        self._out.append(frame)
        self._out_bytes += len(frame)

    def _flush(self) -> None:
        if self._out and self._transport is not None and not self._transport.is_closing():
            self._transport.write(b"".join(self._out))
        self._out.clear()
        self._out_bytes = 0
        if self._held and self._transport is not None:
            self._release()  # the socket took it all: no resume_writing will come
