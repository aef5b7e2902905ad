"""A run that ends while a fault is being injected still leaves a well-formed history."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import checkers
from core.history import HistoryWriter
from tests.helpers.controller import nemesis_only


class StuckNemesis:
    """A fault that never completes (a restart on a host that does not come back)."""

    fs = frozenset({"kill", "restart"})

    async def invoke(self, op: dict[str, Any]) -> dict[str, Any]:
        await asyncio.Event().wait()
        raise AssertionError("never reached")

    async def heal(self) -> list[dict[str, Any]]:
        return []


def test_a_fault_cut_short_is_recorded_unproven_before_the_heal(tmp_path: Path) -> None:
    with HistoryWriter(tmp_path / "history.jsonl") as history:
        controller = nemesis_only(history, StuckNemesis())

        async def cut_short() -> None:
            fault = asyncio.create_task(
                controller._fault({"f": "kill", "value": {"nodes": ["b1"]}})
            )
            await asyncio.sleep(0)
            fault.cancel()
            await asyncio.gather(fault, return_exceptions=True)
            await controller.heal()

        asyncio.run(cut_short())
    result = checkers.check(tmp_path / "history.jsonl")  # raised HistoryError before
    assert result["checkers"]["nemesis"]["valid"] == "unknown"
    assert any("interrupted" in e for e in controller.counters.fault_errors)
