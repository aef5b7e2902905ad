"""`python -m bookie_image.agent --zk HOST:PORT --port N`: run a client agent."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys

from bookie_image.agent.executor import Executor, LedgerOptions
from bookie_image.agent.server import serve
from bookie_image.bookie.events import EventLog
from bookie_image.bugs import Bugs, UnknownBugError
from bookie_image.client import BookKeeper
from bookie_image.probes import listening, logged


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="bookie_image.agent", description=__doc__)
    parser.add_argument("--zk", required=True, help="ZooKeeper connect string")
    parser.add_argument("--ledgers-root", default="/ledgers")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--ensemble", type=int, default=3)
    parser.add_argument("--write-quorum", type=int, default=2)
    parser.add_argument("--ack-quorum", type=int, default=2)
    parser.add_argument("--digest", default="crc32c")
    return parser.parse_args(argv)


async def _run(args: argparse.Namespace, seeded: Bugs) -> None:
    options = LedgerOptions(args.ensemble, args.write_quorum, args.ack_quorum, args.digest)
    async with BookKeeper(zk=args.zk, ledgers_root=args.ledgers_root, bugs=seeded) as bk:
        server = await serve(Executor(bk, options), args.host, args.port)
        print(json.dumps({"event": "ready", "host": args.host, "port": args.port}), flush=True)
        async with server:
            await server.serve_forever()


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    if not 1 <= args.ack_quorum <= args.write_quorum <= args.ensemble:
        print("error: need 1 <= --ack-quorum <= --write-quorum <= --ensemble", file=sys.stderr)
        return 254
    try:
        seeded = Bugs.from_env()  # the seeded bugs reach an agent through its environment
    except UnknownBugError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 254
    # Its stdout is the agent's log: probes reached are `probe` lines there (as a bookie's).
    with contextlib.suppress(KeyboardInterrupt), listening(logged(EventLog(sys.stdout).emit)):
        asyncio.run(_run(args, seeded))
    return 0


if __name__ == "__main__":
    sys.exit(main())
