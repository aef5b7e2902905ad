"""The controller's side of the client agent's JSON-lines RPC (bookie_image/agent/server.py).

The agent enforces each op's timeout; the controller enforces it too (plus a margin), so
a hung agent, a dropped connection or a paused container still yields a completion:
`info` for an op that changes state, `fail` for a read (which changes nothing) or for an
op that could not even be sent. After
such a failure the connection's state is unknown (a late reply could still arrive), so
it is closed and the next call opens a fresh one.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from bookie_image.agent.executor import READ_ONLY_OPS

CONTROLLER_MARGIN_S = 5.0
CONNECT_TIMEOUT_S = 5.0


def agent_lost(f: str, exc: type[BaseException]) -> tuple[str, None, str]:
    """The completion of op `f` whose agent stopped answering (`exc`): it may have
    happened, unless it only read."""
    return ("fail" if f in READ_ONLY_OPS else "info"), None, f"agent-lost: {exc.__name__}"


class AgentConnection:
    """One worker's connection to one agent; calls run one at a time."""

    def __init__(self, name: str, host: str, port: int) -> None:
        self.name, self.host, self.port = name, host, port
        self._streams: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None
        self._next_id = 0

    async def call(
        self, f: str, value: dict[str, Any], timeout: float
    ) -> tuple[str, Any, str | None]:
        """Run op `f` on the agent: (type, value, error), never raising for I/O trouble."""
        self._next_id += 1
        request = {"id": self._next_id, "f": f, "value": value, "timeout": timeout}
        try:
            reader, writer = await self._connect()
        except (OSError, TimeoutError) as exc:  # nothing was sent: it definitely did not happen
            return "fail", None, f"agent-unreachable: {type(exc).__name__}"
        try:
            writer.write(json.dumps(request).encode() + b"\n")
            await writer.drain()
            line = await asyncio.wait_for(reader.readline(), timeout + CONTROLLER_MARGIN_S)
            if not line:
                raise ConnectionError(f"agent {self.name} closed the connection")
            reply = json.loads(line)
            if reply.get("id") != self._next_id:
                raise ConnectionError(f"agent {self.name} answered request {reply.get('id')}")
        except (OSError, TimeoutError, ValueError) as exc:
            self.close()
            return agent_lost(f, type(exc))
        return reply["type"], reply.get("value"), reply.get("error")

    async def _connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        if self._streams is None:
            self._streams = await asyncio.wait_for(
                asyncio.open_connection(self.host, self.port, limit=16 << 20), CONNECT_TIMEOUT_S
            )
        return self._streams

    def close(self) -> None:
        if self._streams is not None:
            self._streams[1].close()
            self._streams = None
