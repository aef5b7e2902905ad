"""The bookie benchmark's baseline: an asyncio server that only frames and echoes.

It decodes each request with the same sans-IO codec the bookie uses and answers an ADD at
once with EOK — no journal, no fsync, no storage — so `bookie adds/s ÷ echo requests/s`
says how much of the ceiling set by Python, asyncio and the codec the bookie reaches.
Run as `python -m harness.bench.echo PORT`; it prints "ready" once listening.
"""

from __future__ import annotations

import asyncio
import sys

from bookie_image.protocol import (
    NEED_DATA,
    AddRequest,
    AddResponse,
    Connection,
    Role,
    Status,
    peek_entry_header,
)


async def _serve_connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    conn = Connection(Role.SERVER)
    while data := await reader.read(1 << 16):
        conn.receive_data(data)
        out = []
        while (event := conn.next_event()) is not NEED_DATA:
            if isinstance(event, AddRequest):
                header = peek_entry_header(event.entry)
                reply = AddResponse(event.request_id, Status.EOK, header.ledger, header.entry_id)
                out.append(conn.send(reply))
        if out:
            writer.write(b"".join(out))
            await writer.drain()
    writer.close()


async def _main(port: int) -> None:
    server = await asyncio.start_server(_serve_connection, "127.0.0.1", port)
    print("ready", flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(_main(int(sys.argv[1])))
