"""A recovery that fails half-way must not leave metadata that makes the next one truncate.

Found by the combined local fault run (tests/integration/test_nemesis_local.py, seed 42): a
recovery's write-back replaced an unreachable bookie and wrote that ensemble change to
ZooKeeper at once, from the first entry it was writing back; the recovery then failed, so
the replacement never got the entry, and the next recovery read "no such entry" from it —
one explicit negative, enough with WQ=2, AQ=2 — and closed the ledger before an
acknowledged entry.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from bookie_image.client import BookKeeper, LedgerRecoveryError
from bookie_image.protocol import AddRequest, ReadRequest
from harness.runtime.local import LocalCluster
from tests.helpers.transports import DroppingTransport


async def test_a_failed_recovery_leaves_no_bookie_named_that_lacks_the_entries(
    zookeeper: str, ledgers_root: str, tmp_path: Path
) -> None:
    cluster = LocalCluster(
        tmp_path / "cluster", bookie_count=4, zk=zookeeper, ledgers_root=ledgers_root
    ).up()
    try:
        options = {"zk": zookeeper, "ledgers_root": ledgers_root}
        async with BookKeeper(**options) as writer:
            lh = await writer.create_ledger(
                ensemble=3, write_quorum=2, ack_quorum=2, password=b"pw"
            )
            assert await lh.append(b"acknowledged") == 0  # on ensemble[0] and ensemble[1]
        ensemble = lh.metadata.ensembles[0][1]
        spare = next(b.id for b in cluster.bookies if b.id not in ensemble)

        def write_back_fails(bookie: str, request: Any) -> bool:
            # ensemble[0] cannot take the write-back, nor can the spare that replaces it
            return isinstance(request, AddRequest) and bookie in (ensemble[0], spare)

        async with BookKeeper(**options, transport=DroppingTransport(write_back_fails)) as bk:
            with pytest.raises(LedgerRecoveryError, match="write-back"):
                await bk.open_ledger(lh.id, password=b"pw", recovery=True)

        def cannot_hear_ensemble_1(bookie: str, request: Any) -> bool:
            return (
                bookie == ensemble[1] and isinstance(request, ReadRequest) and request.entry_id == 0
            )

        async with BookKeeper(**options, transport=DroppingTransport(cannot_hear_ensemble_1)) as bk:
            rh = await bk.open_ledger(lh.id, password=b"pw", recovery=True)
            assert rh.metadata.last_entry_id == 0
            assert spare not in rh.metadata.ensembles[-1][1]
            assert [p async for _, p in rh.read(0, 0)] == [b"acknowledged"]
    finally:
        cluster.down()
