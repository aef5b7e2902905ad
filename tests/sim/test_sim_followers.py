"""The tail workload's followers (`follow` reads through `ReadHandle.follow`): a follower
that holds the newest entry back — delivering each entry only once the next one arrives —
loses the last one when its ledger closes, and `incomplete-read` says so; the client's own
follower does not."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from bookie_image.client.ledger import ReadHandle
from harness.runtime.sim import SimSpec, run_sim

pytestmark = pytest.mark.sim

SPEC = SimSpec(seed=1, workload="tail", time_limit=3.0)
"""Writers close their ledgers now and then while followers tail them (no fault needed)."""


def test_a_follower_that_holds_the_newest_entry_back_is_an_incomplete_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    follow = ReadHandle.follow

    async def holding_back(
        self: ReadHandle, first: int = 0, wait_ms: int = 1000
    ) -> AsyncIterator[tuple[int, bytes]]:
        held = None
        async for item in follow(self, first, wait_ms):
            if held is not None:
                yield held
            held = item

    monkeypatch.setattr(ReadHandle, "follow", holding_back)
    run = run_sim(SPEC, tmp_path)
    assert run.results["anomaly_types"] == ["incomplete-read"]
    assert all(
        "follow read" in c["explanation"] for c in run.results["anomalies"]["incomplete-read"]
    )


def test_the_clients_follower_delivers_every_entry(tmp_path: Path) -> None:
    run = run_sim(SPEC, tmp_path)
    assert run.results["valid"] is True, run.results["anomaly_types"]
    assert run.results["coverage"]["client-follow-closed"] > 0  # it did see a close
