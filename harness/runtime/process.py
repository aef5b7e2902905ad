"""Small helpers for the processes the local runtime starts: ports, liveness, stopping, logs."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import time
from pathlib import Path


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port the kernel considers free right now on `host`."""
    with socket.socket() as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def reap(pid: int) -> None:
    """Collect our own child's exit status so it does not linger as a zombie."""
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


def process_state(pid: int) -> str | None:
    """The kernel's one-letter state of `pid` (R, S, T stopped, Z zombie…), None if gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[0]


def pid_alive(pid: int) -> bool:
    """True if `pid` exists and is not a zombie (a dead, unreaped child still 'exists')."""
    reap(pid)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return process_state(pid) not in (None, "Z")


def wait_gone(pid: int, timeout: float) -> bool:
    """Poll until `pid` is gone; False if it is still alive after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while pid_alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def stop_pid(pid: int, timeout: float = 10.0) -> None:
    """SIGTERM, then SIGKILL after `timeout`; returns once the process is gone."""
    for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 5.0)):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            return
        if wait_gone(pid, wait):
            return


def tail(path: Path, lines: int = 20) -> str:
    """The last lines of a log file, for error messages."""
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"
