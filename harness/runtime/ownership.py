"""Which run, and which controller, owns a node: so that nothing outlives its controller.

Every node process the local runtime starts carries RUN_ENV (its run id) and OWNER_ENV
(the controller that owns it) in its environment; every docker container, network and
volume carries them as labels. A controller is named by boot id, pid and start time, so a
pid reused after the controller died (or a reboot) never passes for it; `DETACHED` is the
owner of a cluster started by `bkchaos cluster up`, which is meant to outlive the command.
`bkchaos gc` reaps what belongs to a run whose controller is gone; `cluster down` signals
a recorded pid only if that process still carries the run's id.

Stdlib only: the watchdog (harness/runtime/watchdog.py) imports it in a bare interpreter.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path

RUN_ENV = "BKCHAOS_RUN"
OWNER_ENV = "BKCHAOS_OWNER"
OWNER_LABEL = "bkchaos.owner"
DETACHED = "detached"
STOP_GRACE_S = 10.0
"""How long a node gets to exit after SIGTERM before SIGKILL."""


def _boot_id() -> str:
    with contextlib.suppress(OSError):
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    return "unknown-boot"


def process_start(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (/proc/PID/stat field 22), or
    None if there is no such process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rpartition(")")[2].split()  # the command name may hold spaces and ")"
    return int(fields[19])  # field 22 counted from the pid, 20 after the name


def controller_id(pid: int | None = None) -> str:
    """`<boot id>:<pid>:<start ticks>` of this process (or `pid`)."""
    pid = os.getpid() if pid is None else pid
    return f"{_boot_id()}:{pid}:{process_start(pid)}"


def owner_alive(owner: str) -> bool:
    """Whether the controller `owner` names still runs (a detached cluster counts as
    alive: its user stops it). An owner from another boot or an unreadable one is gone."""
    if owner == DETACHED:
        return True
    boot, _, rest = owner.partition(":")
    pid, _, start = rest.partition(":")
    if boot != _boot_id() or not pid.isdigit():
        return False
    return str(process_start(int(pid))) == start


def process_environment(pid: int) -> dict[str, str]:
    """A process's environment as it was started ({} if unreadable or gone)."""
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return {}
    pairs = (item.partition(b"=") for item in raw.split(b"\0") if item)
    return {key.decode(errors="replace"): value.decode(errors="replace") for key, _, value in pairs}


def run_processes() -> dict[str, dict[int, str]]:
    """Every live process that carries a run id: {run id: {pid: owner}}."""
    runs: dict[str, dict[int, str]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        env = process_environment(int(entry.name))
        if RUN_ENV in env and _state(int(entry.name)) not in (None, "Z"):
            runs.setdefault(env[RUN_ENV], {})[int(entry.name)] = env.get(OWNER_ENV, "")
    return runs


def _state(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except (OSError, IndexError):
        return None


def belongs_to(pid: int, run_id: str) -> bool:
    """Whether `pid` is still a node of run `run_id` (not a reused pid)."""
    return process_environment(pid).get(RUN_ENV) == run_id


def stop_run(
    run_id: str, last: frozenset[int] = frozenset(), grace: float = STOP_GRACE_S
) -> list[int]:
    """Stop every process of run `run_id`: SIGTERM (paused ones are continued so they can
    exit), SIGKILL what is left after `grace` seconds. The pids in `last` (ZooKeeper: a
    bookie told to stop deregisters from it) are stopped only once the others are gone.
    Returns the pids that were signalled."""
    first = sorted(set(run_processes().get(run_id, {})) - last)
    return _stop(run_id, first, grace) + _stop(run_id, sorted(last), grace)


def _stop(run_id: str, pids: list[int], grace: float) -> list[int]:
    """SIGTERM and SIGCONT the run's `pids`, SIGKILL those still there after `grace`."""
    pids = [pid for pid in pids if belongs_to(pid, run_id)]
    for pid in pids:
        for sig in (signal.SIGTERM, signal.SIGCONT):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)
    deadline = time.monotonic() + grace

    def left() -> list[int]:
        for pid in pids:  # our own children (the local runtime's nodes): no zombies left
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)
        return [pid for pid in pids if _state(pid) not in (None, "Z") and belongs_to(pid, run_id)]

    while time.monotonic() < deadline and left():
        time.sleep(0.1)
    for pid in left():
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    return pids
