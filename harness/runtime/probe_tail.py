"""Faults triggered by protocol events on the local runtime: the controller follows the
`probe` lines its nodes write and fires the armed steps (nemesis/triggers.py) on them.

Bookies and client agents write every probe they reach as a JSON line
``{"ts": wall clock, "event": "probe", "probe": name, ...fields}`` to their logs
(bookie_image/probes.py `logged`; the recovery and ensemble-change probes are the
agents'). One thread polls those files from where they ended when the run started, every
`POLL_S`, and hands each probe line an armed step may wait for to the controller's event
loop, where `TriggeredFaults.on_probe` wakes the nemesis worker.

Unlike the simulation's, such a fault does not land in the instant of the probe: the
line is read up to `POLL_S` after it was written, the loop and the nemesis worker take
their turns, then the nemesis signals the process — milliseconds on an idle machine, more
on a loaded one, while the product carries on. Each fired op records how long that was
(``probe_timing``: when the line was written and when it was read, on the run's clock; the
history's invoke and completion of the op say when the fault started and was proven). A
reach the worker picks up more than `LATE_S` after it was read (busy restarting a bookie)
re-arms its step instead of firing out of its window.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.coverage import probe_event
from harness.runtime.local import LocalCluster
from nemesis.schedule import TRIGGER, ScheduleReplay
from nemesis.triggers import TriggeredFaults, triggered_steps

__all__ = [
    "LATE_S",
    "POLL_S",
    "LocalTriggerView",
    "ProbeLine",
    "following_probes",
    "local_triggered_faults",
    "parse_probe",
]

POLL_S = 0.002
"""How often the logs are polled: a read of each node's log that usually returns nothing
(a few microseconds each), so a probe waits at most this long to be seen."""
LATE_S = 0.2
"""`TriggeredFaults.late_s` on the local runtime: a recovery's fencing and reads take tens
of milliseconds here, so a fault this long after its probe would miss the window."""
_NOT_PROBE_FIELDS = frozenset({"ts", "event", "probe"})


@dataclass(frozen=True)
class ProbeLine:
    """One probe a node reported: its name, its fields, and the node's wall clock then."""

    name: str
    fields: dict[str, Any]
    ts: float


def parse_probe(line: bytes | str) -> ProbeLine | None:
    """The probe a log line reports, or None for any other line (another event, a
    traceback, a line cut short) or a probe without its name and time."""
    event = probe_event(line)
    if event is None:
        return None
    name, ts = event.get("probe"), event.get("ts")
    if not isinstance(name, str) or not isinstance(ts, int | float):
        return None
    fields = {k: v for k, v in event.items() if k not in _NOT_PROBE_FIELDS}
    return ProbeLine(name, fields, float(ts))


@dataclass
class LocalTriggerView:
    """A local cluster as `TriggeredFaults` aims at it (nemesis.triggers.TriggerView)."""

    cluster: LocalCluster

    def bookie_names(self) -> dict[str, str]:
        return {bookie.id: bookie.name for bookie in self.cluster.bookies}

    def clients(self) -> list[str]:
        return [agent.name for agent in self.cluster.agents]

    def hittable(self, node: str) -> bool:
        pid, state = self.cluster.process_state(node)
        return pid is not None and state not in (None, "Z", "T")

    def startable(self, node: str) -> bool:
        return True  # a local bookie's disks are never pulled out from under a restart


def local_triggered_faults(
    schedule: tuple[dict[str, Any], ...], cluster: LocalCluster
) -> TriggeredFaults | None:
    """The nemesis generator of a local run whose schedule has triggered steps (the
    clock-driven ones replayed alongside), or None if it has none."""
    steps = triggered_steps(schedule)
    if not steps:
        return None
    replay = ScheduleReplay(schedule)  # it skips the triggered steps
    return TriggeredFaults(LocalTriggerView(cluster), steps, replay, late_s=LATE_S)


class LogFollower:
    """One log file read from its current end: the complete lines written since."""

    def __init__(self, path: Path) -> None:
        self.fd = os.open(path, os.O_RDONLY)
        os.lseek(self.fd, 0, os.SEEK_END)
        self.partial = b""

    def lines(self) -> list[bytes]:
        chunks = []
        while chunk := os.read(self.fd, 1 << 16):
            chunks.append(chunk)
        if not chunks:
            return []
        *complete, self.partial = (self.partial + b"".join(chunks)).split(b"\n")
        return complete

    def close(self) -> None:
        os.close(self.fd)


@contextlib.contextmanager
def following_probes(
    cluster: LocalCluster,
    faults: TriggeredFaults,
    clock: Callable[[], float],
    loop: asyncio.AbstractEventLoop,
) -> Iterator[None]:
    """While the block runs, each probe line a bookie or agent of `cluster` writes that
    one of `faults`' steps waits for reaches `faults.on_probe` on `loop`, with its
    timing on `clock` (the run's: `HistoryWriter.elapsed_s`)."""
    wanted = {step[TRIGGER] for step in faults.steps}
    needles = [f'"probe": "{name}"'.encode() for name in wanted]
    followers = {n.name: LogFollower(n.log_path) for n in [*cluster.bookies, *cluster.agents]}
    stop = threading.Event()

    def heard(node: str, line: bytes) -> None:
        probe = parse_probe(line)
        if probe is None or probe.name not in wanted:
            return
        read_s = clock()
        timing = {
            "node": node,
            "written_s": round(read_s - (time.time() - probe.ts), 4),
            "read_s": round(read_s, 4),
        }
        loop.call_soon_threadsafe(faults.on_probe, probe.name, probe.fields, node, timing)

    def poll() -> None:
        while not stop.wait(POLL_S):
            for node, follower in followers.items():
                for line in follower.lines():
                    if any(needle in line for needle in needles):
                        heard(node, line)

    thread = threading.Thread(target=poll, name="bkchaos-probe-tail", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
        for follower in followers.values():
            follower.close()
