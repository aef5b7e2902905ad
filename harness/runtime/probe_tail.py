"""Faults triggered by protocol events on real processes: the controller follows the
`probe` lines its nodes write and fires the armed steps (nemesis/triggers.py) on them.

Bookies and client agents write every probe they reach as a JSON line
``{"ts": wall clock, "event": "probe", "probe": name, ...fields}`` to their logs
(bookie_image/probes.py `logged`; the recovery and ensemble-change probes are the
agents'). Each probe line an armed step may wait for is handed to the controller's event
loop, where `TriggeredFaults.on_probe` wakes the nemesis worker. How the lines are read
is the runtime's:

- local: the logs are files on the controller's host; one thread reads each from where
  it ended when the run started, every `POLL_S`.
- docker and ssh: the logs are on the nodes. One follower per bookie and agent
  (bookie_image/image/follow.py, in a `docker exec` or an ssh channel) prints the wanted
  probe lines of its log as they are written, woken by inotify; one thread waits on all
  their streams at once. Closing a stream ends its follower (its standard input ends), so
  none outlives the run, even a controller killed outright.

Unlike the simulation's, such a fault does not land in the instant of the probe: the
line is read a millisecond or more after it was written, the loop and the nemesis worker
take their turns, then the nemesis signals the process (on docker and ssh through a
command on the node) — milliseconds on an idle machine, more on a loaded one, while the
product carries on. Each fired op records how long that was (``probe_timing``: when the
line was written and when it was read, on the run's clock; the history's invoke and
completion of the op say when the fault started and was proven). `written_s` is read
off the node's wall clock: on ssh it includes that host's clock offset to the
controller's. A reach the worker picks up more than `LATE_S` after it was read (busy
restarting a bookie) re-arms its step instead of firing out of its window.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import select
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from bookie_image.image.follow import POLL_S, READY, LineSplitter, LogFollower
from harness.coverage import probe_event
from harness.runtime.local import LocalCluster
from harness.runtime.supervised import NodeStream, SupervisedCluster
from nemesis.schedule import TRIGGER, ScheduleReplay
from nemesis.triggers import TriggeredFaults, triggered_steps

__all__ = [
    "FOLLOW_START_S",
    "LATE_S",
    "ClusterTriggerView",
    "ProbeLine",
    "cluster_triggered_faults",
    "following_probes",
    "parse_probe",
]

log = logging.getLogger("bkchaos.triggers")

LATE_S = 0.2
"""`TriggeredFaults.late_s` on real processes: a recovery's fencing and reads take tens
of milliseconds, so a fault this long after its probe would miss the window."""
FOLLOW_START_S = 30.0
"""How long the followers on docker and ssh nodes may take to start (a Python start on
each node, at once) before the run is refused."""
_NOT_PROBE_FIELDS = frozenset({"ts", "event", "probe"})
_FOLLOW = "bookie_image.image.follow"

Cluster = LocalCluster | SupervisedCluster


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
class ClusterTriggerView:
    """A real cluster as `TriggeredFaults` aims at it (nemesis.triggers.TriggerView)."""

    cluster: Cluster

    def bookie_names(self) -> dict[str, str]:
        return {bookie.id: bookie.name for bookie in self.cluster.bookies}

    def clients(self) -> list[str]:
        return [agent.name for agent in self.cluster.agents]

    def hittable(self, node: str) -> bool:
        return self.cluster.runs_unstopped(node)

    def startable(self, node: str) -> bool:
        return True  # a real bookie's disks are never pulled out from under a restart


def cluster_triggered_faults(
    schedule: tuple[dict[str, Any], ...], cluster: Cluster
) -> TriggeredFaults | None:
    """The nemesis generator of a real run whose schedule has triggered steps (the
    clock-driven ones replayed alongside), or None if it has none."""
    steps = triggered_steps(schedule)
    if not steps:
        return None
    replay = ScheduleReplay(schedule)  # it skips the triggered steps
    return TriggeredFaults(ClusterTriggerView(cluster), steps, replay, late_s=LATE_S)


@dataclass
class _Ears:
    """Hands each line holding a probe one of `faults`' steps waits for to
    `faults.on_probe` on `loop`, with its timing on `clock` (the run's)."""

    faults: TriggeredFaults
    clock: Callable[[], float]
    loop: asyncio.AbstractEventLoop
    wanted: set[str] = field(init=False)
    needles: list[str] = field(init=False)
    """What a wanted probe's line holds (a follower on a node is handed them)."""
    _needles: list[bytes] = field(init=False)

    def __post_init__(self) -> None:
        self.wanted = {step[TRIGGER] for step in self.faults.steps}
        self.needles = sorted(f'"probe": "{name}"' for name in self.wanted)
        self._needles = [needle.encode() for needle in self.needles]

    def hear(self, node: str, line: bytes) -> None:
        if not any(needle in line for needle in self._needles):
            return
        probe = parse_probe(line)
        if probe is None or probe.name not in self.wanted:
            return
        read_s = self.clock()
        timing = {
            "node": node,
            "written_s": round(read_s - (time.time() - probe.ts), 4),
            "read_s": round(read_s, 4),
        }
        on_probe = self.faults.on_probe
        self.loop.call_soon_threadsafe(on_probe, probe.name, probe.fields, node, timing)


@contextlib.contextmanager
def following_probes(
    cluster: Cluster,
    faults: TriggeredFaults,
    clock: Callable[[], float],
    loop: asyncio.AbstractEventLoop,
) -> Iterator[None]:
    """While the block runs, each probe line a bookie or agent of `cluster` writes that
    one of `faults`' steps waits for reaches `faults.on_probe` on `loop`, with its
    timing on `clock` (the run's: `HistoryWriter.elapsed_s`)."""
    ears = _Ears(faults, clock, loop)
    following = _polling if isinstance(cluster, LocalCluster) else _streaming
    with following(cluster, ears):  # type: ignore[arg-type]
        yield


@contextlib.contextmanager
def _polling(cluster: LocalCluster, ears: _Ears) -> Iterator[None]:
    """The local runtime's logs, read on this host every POLL_S by one thread."""
    followers = {n.name: LogFollower(n.log_path) for n in [*cluster.bookies, *cluster.agents]}
    stop = threading.Event()

    def poll() -> None:
        while not stop.wait(POLL_S):
            for node, follower in followers.items():
                for line in follower.lines():
                    ears.hear(node, line)

    thread = threading.Thread(target=poll, name="bkchaos-probe-tail", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
        for follower in followers.values():
            follower.close()


@dataclass
class _Followed:
    """One node's follower stream and what of its output is not yet a whole line."""

    node: str
    stream: NodeStream
    splitter: LineSplitter = field(default_factory=LineSplitter)
    ready: bool = False
    said: list[bytes] = field(default_factory=list)
    """Its lines before READY (an error, if it never comes), the last few kept."""

    def lines(self) -> list[bytes] | None:
        """The whole lines it printed since, after READY; None once its stream ended."""
        chunk = self.stream.recv()
        if chunk is None:
            return None
        lines = self.splitter.feed(chunk)
        if not self.ready:
            while lines and not self.ready:
                line = lines.pop(0)
                self.ready = line == READY.rstrip()
                if not self.ready:
                    self.said = [*self.said[-9:], line]
        return lines


@contextlib.contextmanager
def _streaming(cluster: SupervisedCluster, ears: _Ears) -> Iterator[None]:
    """A docker or ssh run's logs, printed by a follower on each node (FOLLOW_START_S to
    start) and read by one thread as they come."""
    followed: list[_Followed] = []
    wake_r, wake_w = os.pipe()
    thread = threading.Thread(
        target=_read_streams,
        args=(followed, ears, wake_r),
        name="bkchaos-probe-streams",
        daemon=True,
    )
    try:
        for node in [*cluster.with_role("bookie"), *cluster.with_role("client")]:
            argv = [cluster.python, "-m", _FOLLOW, node.log_path, *ears.needles]
            followed.append(_Followed(node.name, cluster.stream(node.name, argv)))
        _until_ready(followed, ears)
        thread.start()
        yield
    finally:
        os.write(wake_w, b"x")
        if thread.is_alive():
            thread.join()
        for one in followed:
            one.stream.close()
        os.close(wake_r)
        os.close(wake_w)


def _until_ready(followed: list[_Followed], ears: _Ears) -> None:
    """Wait until every follower prints READY (what follows it is heard already), or
    raise RuntimeError naming a node whose follower ended or is late, with its output."""
    deadline = time.monotonic() + FOLLOW_START_S
    waiting = {one.stream.fileno(): one for one in followed}
    while waiting:
        left = deadline - time.monotonic()
        readable, _, _ = select.select(list(waiting), [], [], max(0.0, left))
        if not readable:
            late = ", ".join(sorted(one.node for one in waiting.values()))
            raise RuntimeError(
                f"the probe followers of {late} did not start in {FOLLOW_START_S:.0f} s"
            )
        for fd in readable:
            one = waiting[fd]
            lines = one.lines()
            if lines is None:
                said = b"\n".join(one.said).decode(errors="replace")
                raise RuntimeError(f"the probe follower of {one.node} ended at its start: {said}")
            for line in lines:
                ears.hear(one.node, line)
            if one.ready:
                del waiting[fd]


def _read_streams(followed: list[_Followed], ears: _Ears, wake: int) -> None:
    """Hear every follower's lines until `wake` turns readable. A stream that ends
    early (its node's container gone) is logged and left."""
    streams = {one.stream.fileno(): one for one in followed}
    while True:
        readable, _, _ = select.select([wake, *streams], [], [])
        if wake in readable:
            return
        for fd in readable:
            one = streams[fd]
            lines = one.lines()
            if lines is None:
                log.warning(
                    "the probe follower of %s ended: its probes are no longer heard", one.node
                )
                del streams[fd]
                continue
            for line in lines:
                ears.hear(one.node, line)
