"""How the client reaches bookies: a small interface plus its TCP implementation.

The ledger logic only calls :meth:`BookieTransport.request`, so a deterministic simulation
can replace TCP by implementing that one method (and run the client on its own event
loop, which also virtualises every timeout the client takes through asyncio).

Failures are reported uniformly as :class:`BookieUnavailableError` (could not connect, or
the connection broke before the answer) or :class:`TimeoutError`; both mean *unknown*:
the request may or may not have been applied.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from typing import Any, Protocol

from bookie_image import buggify
from bookie_image.protocol import NEED_DATA, Connection, Role

__all__ = ["BookieTransport", "BookieUnavailableError", "TcpTransport", "next_request_id"]

_request_ids = itertools.count(1)


def next_request_id() -> int:
    """Request ids are unique per process, so responses can never be mismatched."""
    return next(_request_ids)


class BookieUnavailableError(ConnectionError):
    """The bookie could not be reached, or the connection broke mid-request."""


class BookieTransport(Protocol):
    async def request(self, bookie: str, request: Any, timeout: float) -> Any:
        """Send one request to ``bookie`` ("host:port") and return its response."""
        ...

    async def close(self) -> None: ...


class _BookieConnection:
    """One TCP connection to one bookie, multiplexing requests by request id."""

    def __init__(self, bookie: str) -> None:
        self.bookie = bookie
        self._codec = Connection(Role.CLIENT)
        self._writer: asyncio.StreamWriter | None = None
        self._reader_task: asyncio.Task[None] | None = None
        self._waiting: dict[int, asyncio.Future[Any]] = {}
        self._connecting = asyncio.Lock()

    @property
    def alive(self) -> bool:
        return self._reader_task is not None and not self._reader_task.done()

    async def connect(self, timeout: float) -> None:
        async with self._connecting:
            if self.alive:
                return
            host, _, port = self.bookie.rpartition(":")
            try:
                reader, writer = await asyncio.wait_for(
                    asyncio.open_connection(host, int(port)), timeout
                )
            except (OSError, TimeoutError) as exc:
                raise BookieUnavailableError(f"cannot connect to {self.bookie}: {exc!r}") from exc
            self._codec = Connection(Role.CLIENT)
            self._writer = writer
            self._reader_task = asyncio.create_task(self._read_loop(reader))

    async def request(self, request: Any, timeout: float) -> Any:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        await self.connect(timeout)
        if self._writer is None:
            raise BookieUnavailableError(f"connection to {self.bookie} closed")
        future: asyncio.Future[Any] = loop.create_future()
        self._waiting[request.request_id] = future
        try:
            if buggify.fires("client-request-lost"):
                del self._waiting[request.request_id]  # nobody awaits its future: not failed
                self.abort(BookieUnavailableError(f"connection to {self.bookie} lost"))
                raise BookieUnavailableError(f"connection to {self.bookie} lost")
            self._writer.write(self._codec.send(request))
            if buggify.fires("client-drop-connection"):
                self.abort(BookieUnavailableError(f"connection to {self.bookie} dropped"))
            return await asyncio.wait_for(future, max(0.0, deadline - loop.time()))
        finally:
            self._waiting.pop(request.request_id, None)

    async def _read_loop(self, reader: asyncio.StreamReader) -> None:
        error: Exception = BookieUnavailableError(f"connection to {self.bookie} closed")
        try:
            while data := await reader.read(65536):
                self._codec.receive_data(data)
                while (event := self._codec.next_event()) is not NEED_DATA:
                    future = self._waiting.get(event.request_id)
                    if future is not None and not future.done():
                        future.set_result(event)
        except Exception as exc:  # a broken stream or a protocol error: drop the connection
            error = BookieUnavailableError(f"connection to {self.bookie} failed: {exc!r}")
        finally:
            self.abort(error)

    def abort(self, error: Exception) -> None:
        """Close the socket and fail every request still waiting on it."""
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        for future in self._waiting.values():
            if not future.done():
                future.set_exception(error)
        self._waiting.clear()

    async def close(self) -> None:
        task = self._reader_task
        self.abort(BookieUnavailableError(f"connection to {self.bookie} closed by client"))
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


class TcpTransport:
    """One connection per bookie, opened on first use and re-opened after a failure."""

    def __init__(self) -> None:
        self._connections: dict[str, _BookieConnection] = {}

    async def request(self, bookie: str, request: Any, timeout: float) -> Any:
        connection = self._connections.get(bookie)
        if connection is None:
            connection = self._connections[bookie] = _BookieConnection(bookie)
        return await connection.request(request, timeout)

    async def close(self) -> None:
        for connection in self._connections.values():
            await connection.close()
        self._connections.clear()
