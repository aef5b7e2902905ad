"""A takeover that fails after some bookies stored its truncating no-op must not let a
reader learn a LAC that the ledger's recorded bookies cannot back (docs/bugs.md, "Defects
the harness found in the product itself").

Found by the no-hint `bkchaos search --runtime sim` on the clean build, shrunk to this
test: b3 wiped (down) and b1's disk filled (read-only) under a `takeover-race` ledger on
b2, b3, b1. A takeover wrote entry 38 back to b2 and to b4, its local replacement for b3
(no metadata records it until the takeover reopens the ledger), then its no-op at 39 to b2
and b4; b1 refused it, and the takeover failed. The no-op carried LAC 38, so a tail
reader asking b2 read entry 38, and the final recovery, hearing "no such entry" for 38
from b3 and b1, closed the ledger at 37: `dirty-read` and `lac-beyond-end`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bookie_image.client.ledger import ClientContext, Writer
from bookie_image.client.metadata import LedgerMetadata, Versioned
from bookie_image.client.recovery import _truncating_noop
from bookie_image.protocol import AddRequest, AddResponse, Status, master_key_for
from harness.runtime.sim import SimSpec, run_sim

SHRUNK = {
    "workload": "takeover-race",
    "bookies": 4,
    "concurrency": 4,
    "id_bits": 64,
    "pipeline": 1,
    "write_quorum": 3,
    "ack_quorum": 2,
    "takeovers": None,
    "writer_crashes": 0.0,
    "buggify": True,
    "seed": 27349,
    "time_limit": 1.2,
    "schedule": (
        {"at": 0.6, "f": "wipe", "value": {"nodes": ["b3"]}},
        {"at": 0.8, "f": "fill-disk", "value": {"nodes": ["b1"]}},
        {"at": 1.5, "f": "restore", "value": {"nodes": ["b3"]}},
        {"at": 1.9, "f": "free-disk", "value": {"nodes": ["b1"]}},
    ),
}
"""The minimal.json the search stored (2026-11-27), as `bkchaos search --replay` runs it."""


def test_the_shrunk_wipe_and_full_disk_under_racing_takeovers_stay_valid(tmp_path: Path) -> None:
    run = run_sim(SimSpec(name="search-replay", **SHRUNK), tmp_path)  # type: ignore[arg-type]
    assert run.results["valid"] is True, run.results["anomaly_types"]


LEFTOVER_THEN_RECORDED = {
    "workload": "unbounded",
    "bookies": 4,
    "concurrency": 16,
    "id_bits": 64,
    "pipeline": 1,
    "write_quorum": 3,
    "ack_quorum": 2,
    "takeovers": 0.5,
    "writer_crashes": 0.0,
    "buggify": True,
    "seed": 22963,
    "time_limit": 2.5,
    "schedule": (
        {
            "at": 0.5,
            "f": "start-packet",
            "value": {"nodes": ["b3"], "to": ["b1", "b2"], "delay_ms": 200},
        },
        {"at": 0.9, "f": "start-packet", "value": {"nodes": ["b2"], "to": ["b3"], "delay_ms": 100}},
        {"at": 1.3, "f": "stop-packet", "value": {"nodes": ["b2"]}},
        {"at": 1.4, "f": "stop-packet", "value": {"nodes": ["b3"]}},
    ),
}
"""What `bkchaos search --workload unbounded --bug unbounded-no-truncate --nemesis packet`
shrank (2026-11-27) once the no-op carried the frozen LAC alone, here without the bug: a
failed takeover left a no-op at 9 that a later takeover completed before recording its
own at 10; with no LAC of 9 on the no-op at 10, the next recovery started at 8, stopped at
the leftover no-op and truncated the recorded one, which a reader had seen under LAC 10
(`lac-beyond-end`). Recovery now starts no lower than the last recorded no-op."""


def test_a_recovery_never_starts_before_the_last_recorded_noop(tmp_path: Path) -> None:
    spec = SimSpec(name="search-replay", **LEFTOVER_THEN_RECORDED)  # type: ignore[arg-type]
    run = run_sim(spec, tmp_path)
    assert run.results["valid"] is True, run.results["anomaly_types"]


class _Bookies:
    """Every bookie stores every add; the requests are kept."""

    def __init__(self) -> None:
        self.adds: dict[str, AddRequest] = {}

    async def request(self, bookie: str, request: Any, timeout: float) -> Any:
        assert isinstance(request, AddRequest)
        self.adds[bookie] = request
        header = request.header
        return AddResponse(request.request_id, Status.EOK, header.ledger, header.entry_id)

    async def close(self) -> None:
        pass


async def test_a_truncating_noop_carries_the_lac_recovery_froze_not_the_entry_before_it() -> None:
    """Recovery froze LAC 4 at fencing and wrote 5 and 6 back (to an ensemble it keeps to
    itself): the no-op at 7 says 4, as the write-back did, not 6."""
    metadata = LedgerMetadata(
        ledger=3,
        ensemble_size=3,
        write_quorum=3,
        ack_quorum=2,
        digest="CRC32C",
        password_hash="",
        ensembles=((0, ("b1:3181", "b2:3181", "b3:3181")),),
        unbounded=True,
        term=2,
    )
    bookies = _Bookies()
    ctx = ClientContext(None, bookies)  # type: ignore[arg-type]
    writer = Writer(
        ctx, Versioned(metadata, 0), master_key_for(b"pw"), lac=4, length=0, recovery=True
    )
    await _truncating_noop(ctx, writer, 7, 42)
    assert sorted(bookies.adds) == ["b1:3181", "b2:3181", "b3:3181"]
    for add in bookies.adds.values():
        assert add.truncate and add.term == 2
        assert (add.header.entry_id, add.header.lac) == (7, 4)
