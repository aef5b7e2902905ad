"""The workloads, each declared once: its name and the factory that builds it from a
test's settings, plus those other packages add through the `bkchaos.workloads` entry
point. The CLI, the test spec, the runner and the simulation all read this map."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from core.generator import Workload
from core.plugins import load_plugins
from workloads.common import Payloads, WorkloadSettings
from workloads.ledger import LedgerWorkload
from workloads.log import LogWorkload
from workloads.recovery_race import RecoveryRaceWorkload
from workloads.soak import Soak
from workloads.tail import TailWorkload
from workloads.takeover_race import TakeoverRaceWorkload
from workloads.unbounded import UnboundedWorkload

__all__ = ["WORKLOADS", "WorkloadSettings", "make_workload"]

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


def make_workload(spec: WorkloadSettings) -> Workload:
    """The workload a run drives: `spec.workload`, or for a soak (`soak_epoch` > 0)
    epochs of it (workloads/soak.py). A plugin workload soaks only if it has `rolled`."""
    factory = WORKLOADS[spec.workload]
    epoch_s = getattr(spec, "soak_epoch", 0.0)
    if not epoch_s:
        return factory(spec)
    payloads = Payloads()

    def make(epoch: int) -> Any:
        workload = factory(spec)
        if epoch == 0:
            payloads.size = getattr(workload, "payloads", payloads).size
        return workload.rolled(epoch, payloads)  # type: ignore[attr-defined]

    return Soak(make, epoch_s)
