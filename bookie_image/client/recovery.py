"""Ledger recovery: close another client's ledger without truncating it (reference 003/004).

1. Mark the metadata IN_RECOVERY by CAS (the writer's next ensemble change then fails).
2. Fence: READ of entry −1 with FENCE_LEDGER to the last fragment's bookies until the fenced
   ones cover every ack quorum; the largest piggybacked LAC is where recovery starts.
3. Recovery reads (which fence too) from LAC+1: an entry is recovered on one positive
   answer, absent only after (WQ−AQ)+1 explicit negatives; unknown answers abort.
4. Write every recovered entry back with RECOVERY_ADD carrying the frozen LAC (a no-op
   that no metadata records: see below).
5. Close by CAS, and only if the ledger is still IN_RECOVERY.

Unbounded ledgers (reference 000) fence with a term instead: step 1 also raises the term,
and every request of steps 2–4 carries it (bookies refuse a lower one with EINVALIDTERM).
A takeover replaces step 5: a no-op entry with the truncate flag goes to every bookie of
the last fragment, then the ledger is reopened in the new term.

A no-op entry that step 3 recovers (it says what it is, see ``ledger.py``) ends the
recovered entries: it is written back as the no-op it is, never as data, and is the last
entry. Nothing after it can have been acknowledged: entries of the term it began carry a
piggybacked LAC of at least its id, so had one reached an ack quorum, fencing would have
started recovery past the no-op. It may be a term's recorded no-op or one left behind by a
takeover that failed before reopening the ledger; in both cases entries after it are dirty.
A recorded one is on every bookie of its fragment already. One that no metadata records is
completed as its takeover should have done it: with the truncate flag, on every bookie of
the last fragment, or recovery fails; a bookie it missed may still hold the old term's
entry in its place, which a reader asking that bookie first would get. A takeover then
ends its own term with a new no-op right after it.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, replace
from typing import Any

from bookie_image import buggify
from bookie_image.bugs import Bugs
from bookie_image.client.errors import (
    BKError,
    ConcurrentModificationError,
    LedgerClosedError,
    LedgerFencedError,
    LedgerRecoveryError,
)
from bookie_image.client.ledger import (
    NOOP,
    ClientContext,
    ReadHandle,
    Writer,
    answers,
    classify_read,
    closed_at,
    is_noop,
    quorum_of,
    wire_id,
    write_set_bookies,
)
from bookie_image.client.metadata import LedgerMetadata, LedgerState, Versioned
from bookie_image.client.quorum import (
    ReadOutcome,
    RecoveryDecision,
    RecoveryReadTally,
    quorum_covered,
)
from bookie_image.client.transport import next_request_id
from bookie_image.probes import reach
from bookie_image.protocol import (
    AddRequest,
    Entry,
    ProtocolError,
    ReadRequest,
    Status,
    decode_entry,
    encode_entry,
)

__all__ = ["Recovered", "recover"]

_FENCED = (Status.EOK, Status.ENOENTRY, Status.ENOLEDGER)


@dataclass(frozen=True, slots=True)
class Recovered:
    """Where recovery left the ledger: CLOSED at ``last_entry``, or (a takeover of an
    unbounded ledger) OPEN in a new term with ``last_entry`` the no-op that ended the old."""

    versioned: Versioned
    last_entry: int
    length: int


async def recover(
    ctx: ClientContext, versioned: Versioned, master_key: bytes, *, take_over: bool = False
) -> Recovered:
    """Recover the ledger, then close it — or, with ``take_over`` (unbounded ledgers only),
    end the previous term with a truncating no-op and reopen it for this client."""

    def start(m: LedgerMetadata) -> LedgerMetadata:
        if m.closed:
            if take_over:
                raise LedgerClosedError(f"ledger {m.name} is closed", may_have_happened=False)
            return m
        # An unbounded ledger is fenced by a higher term rather than by the fence bit.
        return replace(m, state=LedgerState.IN_RECOVERY, term=m.term + 1 if m.unbounded else m.term)

    versioned = await ctx.store.update(versioned, start)
    metadata = versioned.metadata
    if metadata.closed:
        return Recovered(versioned, metadata.last_entry_id, metadata.length)
    _, bookies = metadata.last_ensemble
    reach(
        "unbounded-takeover-started" if take_over else "recovery-started",
        ledger=metadata.name,
        term=metadata.term,
        bookies=list(bookies),
    )
    try:
        return await _recover(ctx, versioned, master_key, take_over)
    except LedgerFencedError as exc:
        if exc.code == "EINVALIDTERM":
            reach("unbounded-takeover-lost", ledger=metadata.name, term=metadata.term)
        raise


async def _recover(
    ctx: ClientContext, versioned: Versioned, master_key: bytes, take_over: bool
) -> Recovered:
    """`recover` once the metadata says IN_RECOVERY (and, unbounded, this client's term)."""
    metadata = versioned.metadata
    term = metadata.term if metadata.unbounded else None
    lac = await _fence(ctx, metadata, master_key, term)
    # Reads use the fragment as it was when fencing, never a fragment created by the
    # write-back below: its new bookies lack the entries and would answer negatives.
    writer = Writer(ctx, versioned, master_key, lac=lac, length=0, recovery=True)
    writebacks: list[asyncio.Future[int]] = []
    last_length: int | None = None
    entry_id = lac + 1
    leftover_noop: int | None = None
    while (entry := await _recovery_read(ctx, metadata, master_key, entry_id, term)) is not None:
        last_length = entry.header.length
        if is_noop(metadata, entry) and entry_id not in metadata.noops:
            leftover_noop = entry_id  # completed below, on every bookie
        elif not ctx.bugs.enabled("no-recovery-writeback"):
            if pause := buggify.delay("recovery-writeback-delay"):
                await asyncio.sleep(pause)
            if not writebacks:
                reach(
                    "recovery-writeback",
                    ledger=metadata.name,
                    entry=entry_id,
                    bookies=list(writer.ensemble),
                )
            writebacks.append(writer.enqueue(entry.payload, length=entry.header.length))
        entry_id += 1
        if is_noop(metadata, entry):
            break  # a term ended here: what follows is dirty (see the module docstring)
    try:
        await asyncio.gather(*writebacks)
    except BKError as exc:
        reach("recovery-writeback-failed", ledger=metadata.name, error=type(exc).__name__)
        raise LedgerRecoveryError(
            f"write-back during recovery of ledger {metadata.name} failed: {exc}",
            may_have_happened=False,
        ) from exc
    if leftover_noop is not None:
        reach("unbounded-leftover-noop", ledger=metadata.name, entry=leftover_noop)
        await _truncating_noop(ctx, writer, leftover_noop, last_length)
    last_entry = entry_id - 1
    if last_entry < 0:
        reach("unbounded-takeover-empty" if take_over else "recovery-empty", ledger=metadata.name)
    if last_length is None:
        last_length = await _length_at(ctx, versioned, master_key, lac)
    if take_over:
        return await _start_term(ctx, writer, last_entry, last_length)

    def close(m: LedgerMetadata) -> LedgerMetadata:
        if m.closed and m.last_entry_id == last_entry:
            return m  # a concurrent recovery reached the same end
        if m.state is not LedgerState.IN_RECOVERY or m.term != metadata.term:
            reach("recovery-close-lost-race", ledger=m.name, state=m.state.value, term=m.term)
            raise ConcurrentModificationError(
                f"ledger {m.name} became {m.state.value} (term {m.term}, last entry "
                f"{m.last_entry_id}) while recovering it to last entry {last_entry}",
                may_have_happened=False,
            )
        # with the ensemble changes the write-back made (kept local until now)
        return replace(
            closed_at(m, last_entry, last_length), ensembles=writer.versioned.metadata.ensembles
        )

    if pause := buggify.delay("recovery-close-delay"):
        await asyncio.sleep(pause)
    closed = await ctx.store.update(writer.versioned, close)
    reach("recovery-closed", ledger=metadata.name, last_entry=last_entry)
    if writer.versioned.metadata.ensembles != metadata.ensembles:
        reach("recovery-closed-new-fragment", ledger=metadata.name, bookies=list(writer.ensemble))
    return Recovered(closed, last_entry, last_length)


async def _start_term(
    ctx: ClientContext, writer: Writer, last_entry: int, length: int
) -> Recovered:
    """End the previous term: write a no-op right after the last recovered entry, with the
    truncate flag, to *every* bookie of the last fragment (each drops the dirty entries the
    old term left beyond it), then reopen the ledger in this client's term by CAS."""
    metadata = writer.versioned.metadata
    noop = last_entry + 1
    length += len(NOOP)
    await _truncating_noop(ctx, writer, noop, length)

    def reopen(m: LedgerMetadata) -> LedgerMetadata:
        if m.state is not LedgerState.IN_RECOVERY or m.term != metadata.term:
            raise _newer_term(m)
        return replace(
            m,
            state=LedgerState.OPEN,
            noops=(*m.noops, noop),
            ensembles=writer.versioned.metadata.ensembles,  # the write-back's, kept local
        )

    if pause := buggify.delay("recovery-close-delay"):
        await asyncio.sleep(pause)
    reopened = await ctx.store.update(writer.versioned, reopen)
    reach("unbounded-takeover", ledger=metadata.name, term=metadata.term, noop=noop)
    return Recovered(reopened, noop, length)


async def _truncating_noop(ctx: ClientContext, writer: Writer, entry_id: int, length: int) -> None:
    """Write the no-op that ends a term at ``entry_id``, with the truncate flag, to every
    bookie of the last fragment; each must store it. A bookie that missed it may hold an
    old term's entry in its place, which a reader asking it first would get.

    Its piggybacked LAC is the one recovery froze at fencing, as on the write-back, never
    ``entry_id - 1``: the entries recovered in between are on an ack quorum only of the
    write-back's ensemble, which no metadata records until the ledger is closed or
    reopened. Were the takeover to fail after some bookies stored the no-op, a reader
    would learn a LAC from them that the metadata's bookies cannot back, and the next
    recovery, reading those bookies, could end the ledger before it."""
    if pause := buggify.delay("recovery-writeback-delay"):
        await asyncio.sleep(pause)
    metadata = writer.versioned.metadata
    data = encode_entry(
        wire_id(metadata, ctx.bugs),
        entry_id,
        writer.frozen_lac,
        length,
        NOOP,
        metadata.digest,
        writer.master_key,
    )
    requests = {
        bookie: AddRequest(
            next_request_id(),
            writer.master_key,
            data,
            recovery=True,
            term=writer.term,
            truncate=True,
        )
        for bookie in writer.ensemble
    }
    refused = []
    async for bookie, response in answers(ctx, requests, ctx.add_timeout):
        status = None if response is None else response.status
        if status is Status.EINVALIDTERM:
            raise _newer_term(metadata)
        if status is not Status.EOK:
            refused.append(f"{bookie}: {'no answer' if status is None else status.name}")
    if refused:
        reach("unbounded-truncating-noop-incomplete", ledger=metadata.name, entry=entry_id)
        raise LedgerRecoveryError(
            f"the truncating no-op of ledger {metadata.name} must reach every bookie of its "
            f"last fragment: {', '.join(refused)}",
            may_have_happened=False,
        )
    reach("unbounded-truncating-noop", ledger=metadata.name, entry=entry_id)


def _newer_term(m: LedgerMetadata) -> LedgerFencedError:
    return LedgerFencedError(
        f"another client took ledger {m.name} over (term {m.term}, {m.state.value})",
        may_have_happened=False,
        code="EINVALIDTERM",
    )


async def _fence(
    ctx: ClientContext, metadata: LedgerMetadata, master_key: bytes, term: int | None
) -> int:
    """Fence the last fragment's bookies until quorum coverage; return the LAC to start from."""
    first, bookies = metadata.last_ensemble
    config = quorum_of(metadata)
    lac = first - 1  # entries before the last fragment were confirmed when it was created
    if metadata.noops:
        # ... and those before a recorded no-op when its term began. Its piggybacked LAC
        # is only the one frozen when it was written (`_truncating_noop`), so without this
        # a recovery could start before it, stop at a failed takeover's leftover no-op
        # there and truncate the recorded one.
        lac = max(lac, max(metadata.noops) - 1)
    fenced: set[int] = set()
    unusable: set[int] = set()  # answered nothing, or something that does not fence
    requests = {
        bookie: ReadRequest(
            next_request_id(),
            wire_id(metadata, ctx.bugs),
            -1,
            fence=True,
            master_key=master_key,
            term=term,
        )
        for bookie in bookies
    }
    async for bookie, response in answers(ctx, requests, ctx.read_timeout):
        if response is not None and response.status is Status.EINVALIDTERM:
            raise _newer_term(metadata)
        if response is None or response.status not in _FENCED:
            unusable.add(bookies.index(bookie))
            continue
        fenced.add(bookies.index(bookie))
        if response.status is Status.EOK:
            # A last entry that does not verify still fenced the bookie; its LAC is not trusted.
            with contextlib.suppress(ProtocolError):
                header = decode_entry(response.entry, metadata.digest, master_key).header
                lac = max(lac, header.lac)
        if quorum_covered(config, fenced):
            if len(fenced) < len(bookies):
                reach("recovery-fence-exact", ledger=metadata.name, fenced=len(fenced))
            if unusable:
                reach("recovery-fence-unreachable", ledger=metadata.name, unusable=len(unusable))
            return lac
    reach("recovery-fence-failed", ledger=metadata.name, fenced=len(fenced))
    raise LedgerRecoveryError(
        f"could not fence ledger {metadata.name}: only {sorted(bookies[s] for s in fenced)} "
        f"of {list(bookies)} answered, not enough to cover every ack quorum",
        may_have_happened=False,
    )


async def _recovery_read(
    ctx: ClientContext,
    metadata: LedgerMetadata,
    master_key: bytes,
    entry_id: int,
    term: int | None,
) -> Entry | None:
    """Read ``entry_id`` from its write set; the entry, or None once it is proven absent."""
    config = quorum_of(metadata)
    fence = not ctx.bugs.enabled("recovery-reads-no-fence")
    requests = {
        bookie: ReadRequest(
            next_request_id(),
            wire_id(metadata, ctx.bugs),
            entry_id,
            fence=fence,
            master_key=master_key if fence else None,
            term=term,
        )
        for bookie in write_set_bookies(metadata, entry_id)
    }
    tally = RecoveryReadTally(config, bugs=ctx.bugs)
    async for _, response in answers(ctx, requests, ctx.read_timeout):
        outcome, entry = _classify(response, metadata, master_key, entry_id, ctx.bugs)
        if outcome is not ReadOutcome.POSITIVE:
            reach(_READ_PROBES[outcome, response is None], ledger=metadata.name, entry=entry_id)
        decision = tally.record(outcome)
        if decision is RecoveryDecision.RECOVERABLE and entry is not None:
            if tally.negatives:
                reach("recovery-positive-after-negative", ledger=metadata.name, entry=entry_id)
            return entry
        if decision is RecoveryDecision.UNRECOVERABLE:
            reach("recovery-negative-threshold", ledger=metadata.name, entry=entry_id)
            return None
        if decision is RecoveryDecision.UNKNOWN:
            break
    reach("recovery-unknown-abort", ledger=metadata.name, entry=entry_id)
    raise LedgerRecoveryError(
        f"cannot tell whether entry {entry_id} of ledger {metadata.name} exists: "
        f"{tally.positives} positive, {tally.negatives} negative, {tally.unknowns} unknown "
        f"answers (absent needs {config.write_quorum - config.ack_quorum + 1} negatives)",
        may_have_happened=False,
    )


_READ_PROBES = {
    (ReadOutcome.NEGATIVE, False): "recovery-read-negative",
    (ReadOutcome.UNKNOWN, False): "recovery-read-unknown",
    (ReadOutcome.UNKNOWN, True): "recovery-read-timeout",
}
"""(how a non-positive recovery read counts, whether it had no answer) -> its probe."""


def _classify(
    response: Any, metadata: LedgerMetadata, master_key: bytes, entry_id: int, bugs: Bugs
) -> tuple[ReadOutcome, Entry | None]:
    """`classify_read`, except that a newer term's refusal ends the recovery."""
    if response is not None and response.status is Status.EINVALIDTERM:
        raise _newer_term(metadata)
    return classify_read(response, metadata, master_key, entry_id, bugs)


async def _length_at(
    ctx: ClientContext, versioned: Versioned, master_key: bytes, entry_id: int
) -> int:
    """The ledger's total length through ``entry_id`` (from that entry's header)."""
    if entry_id < 0:
        return 0
    entry = await ReadHandle(ctx, versioned, master_key, entry_id).read_entry(entry_id)
    return entry.header.length
