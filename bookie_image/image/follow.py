"""Follow a node's log from its end and print the lines that hold one of some strings.

    python -m bookie_image.image.follow LOG NEEDLE...

The controller runs it on every bookie and agent of a docker or ssh run whose faults wait
for protocol probes (harness/runtime/probe_tail.py), one `docker exec` or ssh channel
each, and reads its output as a stream: it prints `READY` once it reads from the log's
end, then each new whole line holding a NEEDLE (the probes some step waits for), as soon
as it is written. It wakes on inotify where the log's file system reports writes (a
container's overlay does, for writes made in the container) and polls every `POLL_S`
otherwise. It exits when its standard input ends — the controller closing the stream, or
dying — so no follower outlives the run that started it.

`LogFollower` is also how the local runtime reads its nodes' logs on the controller's host.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import select
import sys
from collections.abc import Iterator
from pathlib import Path

READY = b"READY\n"
POLL_S = 0.002
"""How often a log whose writes inotify cannot report is read: a probe waits at most this
long to be seen."""
MAX_LINE = 1 << 20
"""A line longer than this (no probe is) is dropped, so a reader's buffer stays bounded."""
_IN_MODIFY = 0x2


class LineSplitter:
    """Whole lines out of a byte stream fed in pieces, at most MAX_LINE bytes each (a
    longer one is dropped whole): what is kept between pieces stays bounded."""

    def __init__(self) -> None:
        self.partial = b""
        self.overlong = False  # the line being read went past MAX_LINE: drop its rest

    def feed(self, chunk: bytes) -> list[bytes]:
        *complete, self.partial = (self.partial + chunk).split(b"\n")
        if self.overlong and complete:
            complete.pop(0)
            self.overlong = False
        if len(self.partial) > MAX_LINE:
            self.partial, self.overlong = b"", True
        return complete


class LogFollower:
    """One log file read from its current end: the whole lines written since."""

    def __init__(self, path: Path | str) -> None:
        self.fd = os.open(path, os.O_RDONLY)
        os.lseek(self.fd, 0, os.SEEK_END)
        self.splitter = LineSplitter()

    def lines(self) -> Iterator[bytes]:
        while chunk := os.read(self.fd, 1 << 16):
            yield from self.splitter.feed(chunk)

    def close(self) -> None:
        os.close(self.fd)


def _inotify(path: str) -> int | None:
    """A descriptor that turns readable when `path` is written, or None where inotify is
    not to be had (then the follower polls)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        fd = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
    except (OSError, AttributeError):
        return None
    if fd < 0:
        return None
    if libc.inotify_add_watch(fd, os.fsencode(path), _IN_MODIFY) < 0:
        os.close(fd)
        return None
    return fd


def follow(path: str, needles: list[bytes], stdin: int, stdout: int) -> None:
    """Write READY, then every new line of `path` holding a needle, to `stdout`, until
    `stdin` ends. The watch is set before the log is opened at its end, so that no write
    after READY goes unnoticed."""
    notify = _inotify(path)
    follower = LogFollower(path)
    _write(stdout, READY)
    watched = [stdin] if notify is None else [stdin, notify]
    timeout = POLL_S if notify is None else None
    while True:
        readable, _, _ = select.select(watched, [], [], timeout)
        if stdin in readable and not os.read(stdin, 1 << 12):
            return
        if notify in readable:
            os.read(notify, 1 << 12)  # the events themselves say nothing more
        wanted = [line + b"\n" for line in follower.lines() if any(n in line for n in needles)]
        if wanted:
            _write(stdout, b"".join(wanted))


def _write(fd: int, data: bytes) -> None:
    while data:
        data = data[os.write(fd, data) :]


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) < 2:
        print("usage: python -m bookie_image.image.follow LOG NEEDLE...", file=sys.stderr)
        return 2
    with contextlib.suppress(BrokenPipeError):  # the controller went away between two lines
        follow(args[0], [n.encode() for n in args[1:]], sys.stdin.fileno(), sys.stdout.fileno())
    return 0


if __name__ == "__main__":
    sys.exit(main())
