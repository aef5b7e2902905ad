"""Run a Python module under libfaketime's preload with a `time.sleep` that survives it.

    python -m bookie_image.image.faketime_launch MODULE [ARGS...]

The clock nemesis preloads Debian's libfaketime with FAKETIME_DONT_FAKE_MONOTONIC=1 (real
skew moves the wall clock, never the monotonic one). Its 0.9.10 release then fails every
*absolute* CLOCK_MONOTONIC `clock_nanosleep` with EINVAL — and that is how CPython 3.11's
`time.sleep` sleeps. A bookie would lose kazoo's connection thread at its first
reconnect back-off (a partition, a ZooKeeper restart) and silently drop out of
ZooKeeper. So before MODULE (and kazoo) is imported, `time.sleep` becomes a wait on
`select()`'s relative timeout, which the preload passes through; everything else runs
unchanged.
"""

from __future__ import annotations

import runpy
import select
import sys
import time


def relative_sleep(seconds: float) -> None:
    """`time.sleep` without an absolute monotonic deadline in the kernel call."""
    if seconds < 0:
        raise ValueError("sleep length must be non-negative")
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        select.select([], [], [], left)


def main() -> None:
    if len(sys.argv) < 2:
        sys.exit("usage: python -m bookie_image.image.faketime_launch MODULE [ARGS...]")
    time.sleep = relative_sleep
    module, sys.argv = sys.argv[1], sys.argv[1:]
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
