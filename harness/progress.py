"""What a run says while it goes: one line of figures (ops, ok/fail/info, faults in
force), shown live on a terminal, printed with a timestamp every few seconds elsewhere (CI,
systemd, `| tee`), and written to the run's own log, `bkchaos.log`, as Jepsen writes
`jepsen.log`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TextIO

from harness.controller import RunCounters

PLAIN_EVERY_S = 5.0
"""How often a plain progress line is printed (and logged) outside a terminal."""
RUN_LOG = "bkchaos.log"
LOG_FORMAT = "%(asctime)s.%(msecs)03d %(levelname)-7s %(name)s: %(message)s"
LOG_DATE = "%Y-%m-%dT%H:%M:%S"
log = logging.getLogger("bkchaos.progress")


def progress_line(counters: RunCounters, elapsed: float) -> str:
    """`running   12.5s  ops 1203  ok 1180  fail 3  info 20  faults in force: kill b1`."""
    in_force = "; ".join(
        f"{kind} {','.join(sorted(nodes))}".strip()
        for kind, nodes in sorted(counters.in_force.items())
    )
    unproven = f"  unproven {len(counters.fault_errors)}" if counters.fault_errors else ""
    return (
        f"{counters.phase:12} {elapsed:6.1f}s  ops {counters.ok + counters.fail + counters.info}"
        f"  ok {counters.ok}  fail {counters.fail}  info {counters.info}"
        f"  faults in force: {in_force or 'none'}{unproven}"
    )


class ThrottledProgress:
    """An on_progress callback that hands `write` a progress line at most every `every_s`
    seconds of wall time, and whenever the phase changes."""

    def __init__(self, write: Callable[[str], None], every_s: float = PLAIN_EVERY_S) -> None:
        self.write = write
        self.every_s = every_s
        self._last = float("-inf")
        self._phase = ""

    def __call__(self, counters: RunCounters, elapsed: float) -> None:
        now = time.monotonic()
        if now - self._last < self.every_s and counters.phase == self._phase:
            return
        self._last, self._phase = now, counters.phase
        self.write(progress_line(counters, elapsed))


def plain_progress(stream: TextIO) -> ThrottledProgress:
    """Timestamped lines on `stream`: the progress view where there is no terminal."""

    def write(line: str) -> None:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        print(f"{stamp} {line}", file=stream, flush=True)

    return ThrottledProgress(write)


@contextmanager
def run_log(run_dir: Path, level: int = logging.INFO) -> Iterator[None]:
    """Everything the controller logs (harness, nemesis, report), at `level`, goes to
    `run_dir/bkchaos.log` while the block runs."""
    handler = logging.FileHandler(run_dir / RUN_LOG)
    handler.setFormatter(logging.Formatter(LOG_FORMAT, LOG_DATE))
    handler.setLevel(level)
    root = logging.getLogger()
    previous = root.level
    root.setLevel(min(previous, level) if previous else level)
    root.addHandler(handler)
    try:
        yield
    finally:
        root.removeHandler(handler)
        root.setLevel(previous)
        handler.close()


def both(
    *callbacks: Callable[[RunCounters, float], None] | None,
) -> Callable[[RunCounters, float], None]:
    """One on_progress callback calling each of `callbacks` given."""
    given = [c for c in callbacks if c is not None]

    def call(counters: RunCounters, elapsed: float) -> None:
        for callback in given:
            callback(counters, elapsed)

    return call
