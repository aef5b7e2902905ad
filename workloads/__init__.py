"""The workloads, each declared once: its name and the factory that builds it from a
test's settings, plus those other packages add through the `bkchaos.workloads` entry
point. The CLI, the test spec, the runner and the simulation all read this map."""

from __future__ import annotations

from collections.abc import Callable

from core.generator import Workload
from core.plugins import load_plugins
from workloads.common import WorkloadSettings
from workloads.ledger import LedgerWorkload
from workloads.log import LogWorkload
from workloads.recovery_race import RecoveryRaceWorkload
from workloads.tail import TailWorkload
from workloads.takeover_race import TakeoverRaceWorkload
from workloads.unbounded import UnboundedWorkload

__all__ = ["WORKLOADS", "WorkloadSettings"]

WORKLOADS: dict[str, Callable[[WorkloadSettings], Workload]] = {
    "ledger": LedgerWorkload.from_spec,
    "log": LogWorkload.from_spec,
    "unbounded": UnboundedWorkload.from_spec,
    "tail": TailWorkload.from_spec,
    "recovery-race": RecoveryRaceWorkload.from_spec,
    "takeover-race": TakeoverRaceWorkload.from_spec,
}
"""Workload name -> its factory; the first is the default."""
WORKLOADS.update(load_plugins("bkchaos.workloads", WORKLOADS))
