"""The bkchaos ledger client (asyncio first, with a blocking facade).

    async with BookKeeper(zk="127.0.0.1:2181") as bk:
        lh = await bk.create_ledger(ensemble=3, write_quorum=2, ack_quorum=2, password=b"pw")
        eid = await lh.append(b"payload")      # pipelined; completes in entry order
        await lh.close()
        rh = await bk.open_ledger(lh.id, password=b"pw", recovery=True)  # fence, recover, close
        async for entry_id, data in rh.read(0, rh.last_add_confirmed): ...
        tail = await bk.open_ledger(lh.id, password=b"pw", recovery=False)
        lac = await tail.read_lac()              # or: async for e, d in tail.follow(): ...
        await bk.delete_ledger(lh.id)
    with BookKeeper.sync(zk="...") as bk: ...   # the same API, blocking

Variants: ``create_ledger(id_bits=128)`` (BP-35 ids, V2 entries), ``create_ledger(mode=
"unbounded")`` with ``bk.take_over_ledger(id)`` (terms instead of the once-only fence).
Errors are :class:`BKError` subclasses carrying the BookKeeper status name (``code``) and
``may_have_happened``. Modules: ``quorum`` (pure quorum logic), ``metadata`` (ZooKeeper),
``transport`` (TCP behind a small interface), ``ledger`` (handles and the writer),
``recovery``, ``bookkeeper`` (this entry point). This module only re-exports.
"""

from bookie_image.client.bookkeeper import BookKeeper, SyncBookKeeper
from bookie_image.client.errors import (
    BKError,
    BKTimeoutError,
    BookieError,
    ConcurrentModificationError,
    DigestMismatchError,
    LedgerClosedError,
    LedgerExistsError,
    LedgerFencedError,
    LedgerRecoveryError,
    MetadataError,
    NoSuchEntryError,
    NoSuchLedgerError,
    NotEnoughBookiesError,
    UnauthorizedError,
)
from bookie_image.client.ledger import LedgerHandle, ReadHandle
from bookie_image.client.metadata import LedgerMetadata, LedgerState

__all__ = [
    "BKError",
    "BKTimeoutError",
    "BookKeeper",
    "BookieError",
    "ConcurrentModificationError",
    "DigestMismatchError",
    "LedgerClosedError",
    "LedgerExistsError",
    "LedgerFencedError",
    "LedgerHandle",
    "LedgerMetadata",
    "LedgerRecoveryError",
    "LedgerState",
    "MetadataError",
    "NoSuchEntryError",
    "NoSuchLedgerError",
    "NotEnoughBookiesError",
    "ReadHandle",
    "SyncBookKeeper",
    "UnauthorizedError",
]
