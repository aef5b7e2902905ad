"""Network helpers for integration tests: a lossy transport between client and bookies,
and a direct read of one entry from one bookie (what it stores, bypassing the client)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from bookie_image.client.transport import TcpTransport, next_request_id
from bookie_image.protocol import LedgerId, ReadRequest, ReadResponse


class DroppingTransport(TcpTransport):
    """TCP, except that requests ``drop(bookie, request)`` selects are never sent and end
    as if they had timed out (after ``delay`` seconds): an unknown outcome, as a lossy
    network or a bookie that stopped answering gives."""

    def __init__(self, drop: Callable[[str, Any], bool], delay: float = 0.0) -> None:
        super().__init__()
        self._drop = drop
        self._delay = delay

    async def request(self, bookie: str, request: Any, timeout: float) -> Any:
        if self._drop(bookie, request):
            await asyncio.sleep(self._delay)
            raise TimeoutError
        return await super().request(bookie, request, timeout)


async def read_from_bookie(bookie: str, ledger: int, entry_id: int) -> ReadResponse:
    """Ask one bookie directly for one entry of a 64-bit ledger."""
    transport = TcpTransport()
    try:
        request = ReadRequest(next_request_id(), LedgerId(0, ledger), entry_id)
        return await transport.request(bookie, request, 5.0)
    finally:
        await transport.close()
