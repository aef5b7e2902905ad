"""A controller with no workload or agents: for tests of how it drives a nemesis."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from core.history import HistoryWriter
from harness.controller import Controller


def nemesis_only(
    history: HistoryWriter, nemesis: Any, wait_for_cluster: Callable[[], None] | None = None
) -> Controller:
    return Controller(
        history=history,
        workload=None,  # type: ignore[arg-type]
        agents=[],
        nemesis=nemesis,
        fault_schedule=None,
        seed=0,
        concurrency=1,
        time_limit=0,
        op_timeout=1,
        rate=1,
        wait_for_cluster=wait_for_cluster,
    )
