"""Small helpers for the processes the local runtime starts: ports, liveness, stopping, logs."""

from __future__ import annotations

import contextlib
import os
import random
import signal
import socket
import time
from pathlib import Path

from bookie_image.image.supervisor import process_state

LOWEST_LISTEN_PORT = 10000
_handed_out: set[int] = set()


def ephemeral_port_range() -> tuple[int, int]:
    """The range the kernel takes outgoing connections' local ports from."""
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that is free on `host` now and stays free until our server binds it.

    A port from the kernel's ephemeral range (what binding port 0 returns) can be taken
    by any outgoing connection — a ZooKeeper session, a bookie-to-bookie add — between
    this call and the server's bind, and again while a killed bookie is down; so listen
    ports are drawn below that range, and never twice from one controller.
    """
    low, high = ephemeral_port_range()
    if low - 1 > LOWEST_LISTEN_PORT:
        candidates = range(LOWEST_LISTEN_PORT, low)
    else:  # an unusual kernel setting: use the ports above the ephemeral range instead
        candidates = range(high + 1, 65536)
    if len(_handed_out) > len(candidates) // 2:  # a very long controller: start over
        _handed_out.clear()
    chooser = random.SystemRandom()
    for _ in range(200):
        port = chooser.choice(candidates)
        if port in _handed_out:
            continue
        with socket.socket() as sock:
            try:
                sock.bind((host, port))
            except OSError:
                continue
        _handed_out.add(port)
        return port
    raise OSError(f"no free TCP port found on {host} in {candidates.start}-{candidates.stop - 1}")


def reap(pid: int) -> None:
    """Collect our own child's exit status so it does not linger as a zombie."""
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


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
