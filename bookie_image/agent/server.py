"""The client agent's RPC server: JSON lines over TCP.

One request per line, `{"id": n, "f": "append", "value": {...}, "timeout": seconds}`, and
one reply per line, `{"id": n, "type": "ok"|"fail"|"info", "value": {...}|null,
"error": str|null}`. `{"id": n, "f": "ping"}` answers `ok` once the client is connected
to ZooKeeper, which is how a controller knows the agent is ready. A line that is not a
valid request is answered with `fail` and an error that says what is wrong — one nested
deeper than the interpreter's recursion limit (about 1000) too — and the connection stays
open. Each connection is one worker: its requests run one at a time.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from bookie_image.agent.executor import Executor

DEFAULT_TIMEOUT_S = 10.0
MAX_LINE = 16 << 20


def _reply(request_id: Any, kind: str, value: Any = None, error: str | None = None) -> bytes:
    return (
        json.dumps({"id": request_id, "type": kind, "value": value, "error": error}).encode()
        + b"\n"
    )


async def _answer(executor: Executor, line: bytes) -> bytes:
    try:
        try:
            request = json.loads(line)
        except RecursionError:
            raise ValueError("JSON nested too deeply (a request is a flat object)") from None
        if not isinstance(request, dict) or not isinstance(request.get("f"), str):
            raise ValueError('a request is a JSON object with a string "f"')
        timeout = float(request.get("timeout", DEFAULT_TIMEOUT_S))
        value = request.get("value") or {}
        if not isinstance(value, dict):
            raise ValueError('"value" must be a JSON object')
    except ValueError as exc:
        return _reply(None, "fail", error=f"bad request: {exc}")
    request_id = request.get("id")
    if request["f"] == "ping":
        return _reply(request_id, "ok", {"pong": True})
    kind, result, error = await executor.run(request["f"], value, timeout)
    return _reply(request_id, kind, result, error)


async def serve(executor: Executor, host: str, port: int) -> asyncio.Server:
    """Start serving; the returned server is already listening."""

    async def connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while line := await reader.readline():
                writer.write(await _answer(executor, line))
                await writer.drain()
        except (ConnectionError, asyncio.LimitOverrunError, ValueError):
            pass
        finally:
            writer.close()

    return await asyncio.start_server(connection, host, port, limit=MAX_LINE)
