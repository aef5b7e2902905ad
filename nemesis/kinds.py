"""Every fault kind, declared once: its start and stop ops, where it can be injected, which
nodes it may hit, and its place in the simulated search.

The test spec, the CLI's help, the seeded schedules, the Hypothesis strategies and the
simulation read these declarations; adding a fault kind is one entry here, its nemesis
(nemesis/*.py and harness/sim/nemesis.py) and its tests. docs/nemeses.md describes each.
Other packages add kinds through the `bkchaos.nemeses` entry point: a FaultKind that
brings its own nemeses (docs/extending.md).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from core.plugins import PluginError, load_plugins
from nemesis.base import Nemesis

__all__ = [
    "KINDS",
    "NEMESES",
    "NETWORK_NEMESES",
    "OPT_IN_NEMESES",
    "PLUGIN_KINDS",
    "ROLE_TARGET_KINDS",
    "RUNTIME_NEMESES",
    "SIM_CLIENT_TARGET_KINDS",
    "SIM_NEMESES",
    "START_STOP",
    "STEP_KIND",
    "TRIGGERED_KINDS",
    "FaultKind",
]

REAL_RUNTIMES = ("local", "docker", "ssh")
CONTAINER_RUNTIMES = ("docker", "ssh")
"""iptables and tc act inside the nodes: network faults need containers or hosts."""


@dataclass(frozen=True)
class FaultKind:
    name: str
    start: str
    stop: str
    summary: str
    """What it does, in a few words (`bkchaos test --help`)."""
    runtimes: tuple[str, ...] = (*REAL_RUNTIMES, "sim")
    survivable: bool = True
    """A correct build survives it without anomalies; False for operator errors that lose
    acknowledged data (opt-in, never drawn by default)."""
    roles: tuple[str, ...] = ("bookie",)
    """The nodes it may hit on docker and ssh (`--targets zk|client` take the others)."""
    sim_roles: tuple[str, ...] = ("bookie",)
    search_rank: int | None = None
    """Its place in the simulated search's order: Hypothesis shrinks toward the first."""
    triggerable: bool = False
    """A schedule step triggered by a protocol probe may start it (nemesis/schedule.py)."""
    restarts: bool = False
    """Its stop starts a process again, which must reach ZooKeeper to serve: a bookie cut
    off from it gives up after 30 s, as Apache BookKeeper's does, so drawn schedules stop a
    partition before such a stop (nemesis/combined.py)."""
    nemesis: Callable[[Any, int], Nemesis] | None = None
    """A plugin kind's nemesis on real runtimes, from (cluster, seed); the built-in kinds'
    are wired in harness/runner.py."""
    sim_nemesis: Callable[[Any, random.Random], Nemesis] | None = None
    """A plugin kind's nemesis in the simulation, from (SimCluster, rng); the built-in
    kinds' is harness/sim/nemesis.py."""

    @property
    def network(self) -> bool:
        """It needs containers or hosts (iptables, tc): not the local runtime."""
        return "local" not in self.runtimes and bool(set(self.runtimes) & {*CONTAINER_RUNTIMES})


_ANY_ROLE = ("bookie", "zk", "client")

KINDS: dict[str, FaultKind] = {
    kind.name: kind
    for kind in (
        FaultKind("kill", "kill", "restart", "SIGKILL, then restart", roles=_ANY_ROLE,
                  search_rank=1, triggerable=True, restarts=True),
        FaultKind("pause", "pause", "resume", "SIGSTOP, then SIGCONT", roles=_ANY_ROLE,
                  sim_roles=("bookie", "client"), search_rank=2, triggerable=True),
        FaultKind("wipe", "wipe", "restore", "delete the data dirs; the cookie must refuse",
                  search_rank=6, restarts=True),
        FaultKind("power-loss", "power-loss", "power-on",
                  "SIGKILL and drop every unsynced byte", search_rank=0, triggerable=True,
                  restarts=True),
        FaultKind("corrupt", "corrupt", "corrupt-restart", "flip or cut bytes of data files",
                  search_rank=5, restarts=True),
        FaultKind("clock", "clock-bump", "clock-reset", "jump the wall clock",
                  roles=_ANY_ROLE, search_rank=4),
        FaultKind("clock-strobe", "clock-strobe", "clock-strobe-stop",
                  "flip the wall clock back and forth", roles=_ANY_ROLE, search_rank=8),
        FaultKind("disk-full", "fill-disk", "free-disk",
                  "fill a ledger disk past the read-only threshold, then free it",
                  runtimes=("local", "sim"), search_rank=9),
        FaultKind("wipe-reset", "wipe-reset", "rejoin",
                  "wipe data and cookie: loses acknowledged data, opt-in", runtimes=REAL_RUNTIMES,
                  survivable=False, restarts=True),
        FaultKind("partition", "start-partition", "stop-partition",
                  "iptables grudges between nodes",
                  runtimes=(*CONTAINER_RUNTIMES, "sim"), roles=_ANY_ROLE, search_rank=3,
                  triggerable=True),
        FaultKind("packet", "start-packet", "stop-packet",
                  "slow, lossy or shaped links: tc, iptables",
                  runtimes=(*CONTAINER_RUNTIMES, "sim"), roles=_ANY_ROLE,
                  sim_roles=("bookie", "client"), search_rank=7),
    )
}  # fmt: skip
"""Fault kind name -> its declaration, in the order `--help` lists them."""


def _checked_plugin(name: str, kind: Any) -> FaultKind:
    """A `bkchaos.nemeses` entry point's kind, with a nemesis for every runtime it claims."""
    if not isinstance(kind, FaultKind) or kind.name != name:
        raise PluginError(f"bkchaos.nemeses plugin {name!r} must be a FaultKind named {name!r}")
    real = set(kind.runtimes) - {"sim"}
    if (real and kind.nemesis is None) or ("sim" in kind.runtimes and kind.sim_nemesis is None):
        raise PluginError(
            f"bkchaos.nemeses plugin {name!r} runs on {kind.runtimes} but lacks the nemesis "
            "for some of them: give `nemesis` for real runtimes, `sim_nemesis` for sim"
        )
    return kind


KINDS.update(
    (name, _checked_plugin(name, kind))
    for name, kind in load_plugins("bkchaos.nemeses", KINDS).items()
)
PLUGIN_KINDS = tuple(k for k in KINDS.values() if k.nemesis or k.sim_nemesis)
"""The kinds other packages added: they bring their own nemeses."""

START_STOP = {name: (kind.start, kind.stop) for name, kind in KINDS.items()}
"""Each fault kind's start and stop op."""
STEP_KIND = {f: kind for kind, pair in START_STOP.items() for f in pair}
"""Each fault op (a start or a stop), mapped to the nemesis kind that performs it."""
NEMESES = tuple(k.name for k in KINDS.values() if k.survivable and "local" in k.runtimes)
"""Faults a correct build survives without anomalies: the pool schedules are drawn from."""
OPT_IN_NEMESES = tuple(k.name for k in KINDS.values() if not k.survivable)
"""Operator errors that really lose acknowledged data: expected to cause anomalies."""
NETWORK_NEMESES = tuple(k.name for k in KINDS.values() if k.network)
"""iptables / tc inside the nodes: they need containers (docs/nemeses.md)."""
SIM_NEMESES = tuple(
    sorted((k.name for k in KINDS.values() if "sim" in k.runtimes),
           key=lambda name: len(KINDS) if KINDS[name].search_rank is None
           else KINDS[name].search_rank)
)  # fmt: skip
"""What the simulation performs (harness/sim/nemesis.py), and what its seeded schedules
and its search draw from, in the order the search shrinks toward."""
RUNTIME_NEMESES = {
    runtime: SIM_NEMESES
    if runtime == "sim"
    else tuple(k.name for k in KINDS.values() if runtime in k.runtimes)
    for runtime in (*REAL_RUNTIMES, "sim")
}
"""What each runtime can inject; anything else is refused before the run starts."""
ROLE_TARGET_KINDS = tuple(k.name for k in KINDS.values() if len(k.roles) > 1)
"""The faults that apply to ZooKeeper and client agents (the rest act on bookie disks)."""
SIM_CLIENT_TARGET_KINDS = tuple(k.name for k in KINDS.values() if "client" in k.sim_roles)
"""What the simulation does to a client agent: shape its egress, or pause it (a writer
frozen in a GC pause while another client takes its ledger over)."""
TRIGGERED_KINDS = tuple(k.name for k in KINDS.values() if k.triggerable and "sim" in k.runtimes)
"""The fault kinds a step triggered by a protocol probe may start (in the simulation)."""
