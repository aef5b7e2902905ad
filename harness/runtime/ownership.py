"""Which run, and which controller, owns a node: so that nothing outlives its controller.

Every node process the local runtime starts carries RUN_ENV (its run id) and OWNER_ENV
(the controller that owns it) in its environment; every docker container, network and
volume carries them as labels, and every ssh host a marker file. A controller is named by
host, boot id, pid namespace, pid and start time, so a pid reused after the controller
died (or a reboot), or the same pid in another container, never passes for it;
`DETACHED` is the owner of a cluster started by `bkchaos cluster up`, which is meant to
outlive the command. `bkchaos gc` reaps what belongs to a run whose controller is proven
gone (`owner_state`); `cluster down` signals a recorded pid only if that process still
carries the run's id.

Stdlib only: the watchdog (harness/runtime/watchdog.py) imports it in a bare interpreter.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import time
from dataclasses import dataclass
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


def _pid_namespace(pid: int | str = "self") -> str:
    """The inode number of the process's pid namespace ("" if unreadable)."""
    try:
        return os.readlink(f"/proc/{pid}/ns/pid").partition("[")[2].rstrip("]")
    except OSError:
        return ""


def controller_id(pid: int | None = None) -> str:
    """`<host>:<boot id>:<pid namespace>:<pid>:<start ticks>` of this process (or `pid`):
    on a docker engine shared by several containers or machines, a pid alone names no
    process, nor does a pid with the boot id (containers share the kernel's)."""
    pid = os.getpid() if pid is None else pid
    host = socket.gethostname().replace(":", "-")
    return f"{host}:{_boot_id()}:{_pid_namespace(pid)}:{pid}:{process_start(pid)}"


@dataclass(frozen=True)
class OwnerState:
    """What can be told of a run's controller from here: `state` is "running", "detached"
    (`bkchaos cluster up`: its user stops it), "gone", or "unknown" (it ran where this
    process cannot look); `why` says so in words."""

    state: str
    why: str


def owner_state(owner: str) -> OwnerState:
    """Whether the controller `owner` (a `controller_id`) still runs. Gone only when
    proven: the same kernel boot, a pid namespace this process sees into, and no process
    there with that pid and start time. Another machine or boot, a namespace no longer
    visible, or an owner recorded by an older bkchaos (no namespace) is unknown."""
    if owner == DETACHED:
        return OwnerState("detached", "started by `bkchaos cluster up` (`cluster down` stops it)")
    parts = owner.split(":")
    if len(parts) == 3:  # boot:pid:start, before owners named their pid namespace
        parts = ["", parts[0], "", parts[1], parts[2]]
    if len(parts) != 5 or not parts[3].isdigit():
        return OwnerState("unknown", "no owner recorded (by an older bkchaos)")
    host, boot, namespace, pid, start = parts
    where = f" on {host}" if host else ""
    if boot != _boot_id():
        return OwnerState(
            "unknown", f"its controller ran{where} under another kernel boot (another machine?)"
        )
    if namespace in ("", _pid_namespace()):
        if str(process_start(int(pid))) == start:
            return OwnerState("running", f"its controller{where} (pid {pid}) is running")
        if not namespace:
            return OwnerState(
                "unknown", f"pid {pid} is gone here, but the owner names no pid namespace"
            )
        return OwnerState("gone", f"its controller{where} (pid {pid}) is gone")
    seen = _namespace_pids(namespace)
    if seen is None:
        return OwnerState(
            "unknown", f"its controller{where} ran in a pid namespace this process cannot see"
        )
    if str(seen.get(int(pid))) == start:
        return OwnerState(
            "running", f"its controller{where} (pid {pid} of its namespace) is running"
        )
    return OwnerState("gone", f"its controller{where} (pid {pid} of its namespace) is gone")


def _namespace_pids(namespace: str) -> dict[int, int] | None:
    """{pid inside `namespace`: start ticks} of the processes of that pid namespace this
    process can see (it does when it runs in an ancestor namespace), or None if it sees
    none (a sibling namespace, or one whose processes have all exited)."""
    found: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or _pid_namespace(entry.name) != namespace:
            continue
        with contextlib.suppress(OSError, ValueError, IndexError, StopIteration):
            status = (entry / "status").read_text()  # NSpid: Linux 4.1 and later
            inner = next(line for line in status.splitlines() if line.startswith("NSpid:"))
            started = process_start(int(entry.name))
            if started is not None:
                found[int(inner.split()[-1])] = started
    return found or None


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
