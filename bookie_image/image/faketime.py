"""How a process is put under libfaketime, so the clock nemesis can move its wall clock.

The bookie, the agent and the clock nemesis all need the same preload environment; it
lives with the image's launcher because the product's processes are what it wraps.
"""

from __future__ import annotations

LIBFAKETIME = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"
"""Debian's libfaketime (packages faketime + libfaketime), on the host and in the image."""


def faketime_env(offset_file: str) -> dict[str, str]:
    """The environment that makes a process take its wall-clock offset from `offset_file`.

    The file is re-read on every clock call (FAKETIME_NO_CACHE), so the clock nemesis moves
    a running process's clock by rewriting it. CLOCK_MONOTONIC is left alone, as real skew
    leaves it: faking it too would stall every asyncio timer by the size of a backward
    jump. The price (Debian's libfaketime 0.9.10): absolute monotonic sleeps fail with
    EINVAL, so `time.sleep` raises in a preloaded Python process unless it runs through
    `faketime_command` — and the image's supervisor, which sleeps, is never preloaded.
    """
    return {
        "LD_PRELOAD": LIBFAKETIME,
        "FAKETIME_TIMESTAMP_FILE": offset_file,
        "FAKETIME_NO_CACHE": "1",
        "FAKETIME_DONT_FAKE_MONOTONIC": "1",
    }


JVM_FAKETIME_ENV = {"FAKETIME_FORCE_MONOTONIC_FIX": "0"}
"""What a JVM (ZooKeeper) needs on top of `faketime_env`: with libfaketime's monotonic
fix on, the JVM's timed waits return at once and its timer threads spin (libfaketime
issue #425): ZooKeeper burned 65% of a core for as long as it ran. Measured here with a
JVM that waits 4 s under the preload: 1.5 CPU s with the fix, 0.09 s without it (0.06 s
unpreloaded), and the faked wall clock still moves (`+3600` read as an hour ahead)."""

FAKETIME_LAUNCHER = "bookie_image.image.faketime_launch"


def faketime_command(command: list[str]) -> list[str]:
    """`python -m MODULE ARGS…` as it must run under the preload: through the launcher
    that gives it a `time.sleep` libfaketime does not break (kazoo's back-off sleeps)."""
    if command[1:2] != ["-m"]:
        raise ValueError(f"only `python -m MODULE` commands can be preloaded, not {command}")
    return [command[0], "-m", FAKETIME_LAUNCHER, *command[2:]]
