"""Faults triggered by protocol events in the simulation: the cluster as a triggered
step sees it (nemesis/triggers.py holds the arming and aiming every runtime shares).

Every probe the product reaches is heard in-process, at the very moment it is reached
(harness/runtime/sim.py's listener), so an idle nemesis worker hands the fault to the
nemesis in the same virtual instant — before any message the product sends after the
probe can arrive (the simulated network has no zero latency). A worker busy with another
fault (a restart waiting for its bookie to register) starts it right after: the history
records when. Everything is a function of the schedule and the seed: the same test fires
the same faults at the same points.
"""

from __future__ import annotations

from dataclasses import dataclass

from harness.sim.cluster import SimCluster

__all__ = ["SimTriggerView"]


@dataclass
class SimTriggerView:
    """A simulated cluster as `TriggeredFaults` aims at it (nemesis.triggers.TriggerView)."""

    cluster: SimCluster

    def bookie_names(self) -> dict[str, str]:
        return {bookie.id: name for name, bookie in self.cluster.bookies.items()}

    def clients(self) -> list[str]:
        return list(self.cluster.agents)

    def hittable(self, node: str) -> bool:
        return self.cluster.runs(node) and node not in self.cluster.loop.paused

    def startable(self, node: str) -> bool:
        """A bookie whose disks a clock fault pulled meanwhile waits for their restore."""
        return not self.cluster.bookies[node].pulled
