"""`python -m bookie_image.bookie --config FILE.toml`: run one bookie in the foreground.

Exit codes:
  0    stopped by SIGTERM or SIGINT
  1    crashed (a bookie bug; Python prints the traceback)
  3    cookie refused: a data dir's cookie is missing or does not match ZooKeeper's (a
       wiped or swapped disk, or changed dirs); the message names the dir and what to do
  254  bad config or environment (unknown/invalid key, unreachable ZooKeeper, port in use,
       unwritable dir, unreadable index, unknown seeded bug); the message names the key or
       the path; no traceback

Readiness: the bookie logs a `ready` line once its znode ``<root>/available/<bookie_id>``
(or ``.../available/readonly/<bookie_id>``) is written, after replay and after it listens.
The znode's JSON data holds the bookie's pid: after a SIGKILL the predecessor's ephemeral
node survives until its session expires, so a launcher that polls ZooKeeper should check
the pid (or wait for the `ready` line).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path
from typing import NoReturn

from bookie_image import bugs
from bookie_image.probes import listening, logged

from .config import BookieConfig, ConfigError, load_config
from .cookies import CookieRefused
from .env import SystemClock
from .events import EventLog
from .service import BookieService, StartupError

EXIT_OK = 0
EXIT_COOKIE_REFUSED = 3
EXIT_BAD_CONFIG = 254


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise ConfigError(f"{message}; usage: python -m bookie_image.bookie --config FILE.toml")


async def _serve(cfg: BookieConfig, events: EventLog, seeded: bugs.Bugs) -> int:
    service = BookieService(cfg, events, SystemClock(), bugs=seeded)
    try:
        try:
            await service.start()
        except CookieRefused as exc:
            events.emit(
                "cookie-refused",
                dir=None if exc.dir is None else str(exc.dir),
                reason=exc.reason,
                advice=exc.advice,
            )
            print(f"bookie {cfg.bookie_id}: cookie refused: {exc}", file=sys.stderr)
            return EXIT_COOKIE_REFUSED
        except (StartupError, OSError) as exc:  # OSError: e.g. an unwritable data dir
            print(f"bookie {cfg.bookie_id}: error: {exc}", file=sys.stderr)
            return EXIT_BAD_CONFIG
        await service.run_until_stopped()
        return EXIT_OK
    finally:
        await service.stop()


def main(argv: list[str] | None = None) -> int:
    """Run a bookie until SIGTERM/SIGINT; returns the exit code (see the module docstring)."""
    parser = _Parser(prog="python -m bookie_image.bookie", description="Run one bookie.")
    parser.add_argument("--config", required=True, type=Path, help="the bookie's TOML file")
    try:
        args = parser.parse_args(argv)
        cfg = load_config(args.config)
        seeded = bugs.Bugs.from_env()  # an unknown name is a bad environment, not a crash
    except (ConfigError, bugs.UnknownBugError) as exc:
        print(f"bookie: error: {exc}", file=sys.stderr)
        return EXIT_BAD_CONFIG
    try:
        stream = open(cfg.log_file, "a") if cfg.log_file else sys.stderr  # noqa: SIM115
    except OSError as exc:
        print(
            f"bookie: error: cannot open config key 'log_file' {cfg.log_file}: {exc.strerror}",
            file=sys.stderr,
        )
        return EXIT_BAD_CONFIG
    events = EventLog(stream, SystemClock(), bookie=cfg.bookie_id)
    with listening(logged(events.emit)):
        return asyncio.run(_serve(cfg, events, seeded))


if __name__ == "__main__":
    sys.exit(main())
