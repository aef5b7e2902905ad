"""Ledger handles: reading (bounded by the LAC) and writing (replication, ensemble changes).

The writer core, :class:`Writer`, is shared by a :class:`LedgerHandle` (regular adds) and
by recovery (write-back with RECOVERY_ADD), because both need the same machinery: striping,
ack-quorum tracking, adds completing in entry order and ensemble changes when a bookie
fails.

Entries of an unbounded ledger say what they are, so that a no-op is recognised wherever
it is read, whatever the metadata says (a takeover that fails after writing its no-op to
some bookies leaves one that no metadata records). The payload a bookie stores for such a
ledger starts with one kind byte: ``0x00`` for data, the application's bytes following,
or ``0x01`` alone for the no-op that ends a term (the one written with the truncate
flag). Reads skip no-ops and strip the kind byte; a payload that is neither is treated
like a bad digest. The header's ``length`` counts stored payload bytes, kind bytes too.
Bounded ledgers store the application's bytes as they are.
"""

from __future__ import annotations

import asyncio
import hashlib
import random
from collections.abc import AsyncIterator, Callable, Coroutine, Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from bookie_image import buggify
from bookie_image.bugs import NO_BUGS, Bugs
from bookie_image.client.errors import (
    BKError,
    BKTimeoutError,
    BookieError,
    DigestMismatchError,
    LedgerClosedError,
    LedgerFencedError,
    NoSuchEntryError,
    NotEnoughBookiesError,
    UnauthorizedError,
)
from bookie_image.client.metadata import LedgerMetadata, LedgerState, Versioned, ZkMetadataStore
from bookie_image.client.quorum import (
    AckTracker,
    QuorumConfig,
    ReadOutcome,
    ack_quorum_survives,
    quorum_covered,
    write_set,
)
from bookie_image.client.transport import BookieTransport, BookieUnavailableError, next_request_id
from bookie_image.probes import reach
from bookie_image.protocol import (
    AddRequest,
    DigestError,
    DigestType,
    Entry,
    LedgerId,
    ProtocolError,
    ReadLacRequest,
    ReadRequest,
    Status,
    decode_entry,
    encode_entry,
    master_key_for,
)

__all__ = [
    "DATA",
    "NOOP",
    "ClientContext",
    "CopyAudit",
    "LedgerHandle",
    "ReadHandle",
    "Writer",
    "answers",
    "application_payload",
    "check_password",
    "classify_read",
    "closed_at",
    "decode_checked",
    "is_noop",
    "password_hash",
    "stored_payload",
    "write_set_bookies",
]

READ_WINDOW = 16  # entries fetched concurrently by ReadHandle.read
AUDIT_RETRY_S = 0.5  # before asking again the bookies that did not answer an audit
DATA = b"\x00"  # kind byte of an unbounded ledger's data entry (see the module docstring)
NOOP = b"\x01"  # the whole payload of an unbounded ledger's no-op entry


def password_hash(password: bytes) -> str:
    """What the metadata stores to reject a wrong password on open (never the password)."""
    return hashlib.sha256(password).hexdigest()


@dataclass
class ClientContext:
    """What every handle of one client shares: among it the seeded bugs it has and the
    random stream it picks bookies with (a simulation's own, seeded, or a fresh one)."""

    store: ZkMetadataStore
    transport: BookieTransport
    add_timeout: float = 10.0
    read_timeout: float = 10.0
    speculative_timeout: float = 0.5
    bugs: Bugs = NO_BUGS
    rng: random.Random = field(default_factory=random.Random)
    _tasks: set[asyncio.Task[Any]] = field(default_factory=set)

    async def close(self) -> None:
        """Stop background work (adds in flight, ensemble changes) and the transport."""
        for task in list(self._tasks):
            task.cancel()
        await self.transport.close()

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        """Run a background task, keeping a reference so it is not garbage collected."""
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def request(self, bookie: str, request: Any, timeout: float) -> Any | None:
        """Send a request; None means no answer (unknown outcome)."""
        if pause := buggify.delay("client-request-delay"):
            await asyncio.sleep(pause)
        try:
            response = await self.transport.request(bookie, request, timeout)
        except (BookieUnavailableError, TimeoutError):
            return None
        return None if buggify.fires("client-spurious-timeout") else response


def quorum_of(metadata: LedgerMetadata) -> QuorumConfig:
    return QuorumConfig(metadata.ensemble_size, metadata.write_quorum, metadata.ack_quorum)


def wire_id(metadata: LedgerMetadata, bugs: Bugs) -> LedgerId:
    # The seeded bug drops the scope, so a 128-bit ledger talks to bookies as (0, id).
    scope = 0 if bugs.enabled("scope-id-ignored") else metadata.scope
    return LedgerId(scope, metadata.ledger)


def decode_checked(
    metadata: LedgerMetadata, master_key: bytes, data: bytes, entry_id: int, bugs: Bugs
) -> Entry:
    """Decode and verify an entry, and check it is the one asked for."""
    entry = decode_entry(data, metadata.digest, master_key)
    if entry.header.entry_id != entry_id or entry.header.ledger != wire_id(metadata, bugs):
        raise DigestError(
            f"asked for entry {entry_id} of {metadata.name}, got {entry.header.entry_id} "
            f"of {entry.header.ledger.qualified_name}"
        )
    if metadata.unbounded and not (entry.payload[:1] == DATA or entry.payload == NOOP):
        raise ProtocolError(
            f"entry {entry_id} of unbounded ledger {metadata.name} is neither data nor a "
            f"no-op (payload starts {entry.payload[:8]!r})"
        )
    return entry


def stored_payload(metadata: LedgerMetadata, data: bytes) -> bytes:
    """What an entry of this ledger stores for the application's ``data``."""
    return DATA + data if metadata.unbounded else data


def is_noop(metadata: LedgerMetadata, entry: Entry) -> bool:
    """Whether a (checked) entry is the no-op that ended a term, not data."""
    return metadata.unbounded and entry.payload == NOOP


def application_payload(metadata: LedgerMetadata, entry: Entry) -> bytes | None:
    """The application's bytes in a (checked) entry; None for a no-op, which has none."""
    if is_noop(metadata, entry):
        return None
    return entry.payload[len(DATA) :] if metadata.unbounded else entry.payload


def write_set_bookies(metadata: LedgerMetadata, entry_id: int) -> list[str]:
    """The bookies of the entry's write set, in write-set order, in the fragment holding it."""
    _, bookies = metadata.ensemble_at(entry_id)
    return [bookies[slot] for slot in write_set(entry_id, quorum_of(metadata))]


def classify_read(
    response: Any, metadata: LedgerMetadata, master_key: bytes, entry_id: int, bugs: Bugs
) -> tuple[ReadOutcome, Entry | None]:
    """Positive only with a verified entry; negative only on an explicit "no such entry";
    everything else (no answer, EIO, a digest that does not verify, ...) is unknown."""
    if response is None:
        return ReadOutcome.UNKNOWN, None
    if response.status in _NEGATIVE:
        return ReadOutcome.NEGATIVE, None
    if response.status is Status.EOK:
        try:
            return ReadOutcome.POSITIVE, decode_checked(
                metadata, master_key, response.entry, entry_id, bugs
            )
        except ProtocolError:
            pass
    return ReadOutcome.UNKNOWN, None


async def answers(
    ctx: ClientContext, requests: dict[str, Any], timeout: float
) -> AsyncIterator[tuple[str, Any]]:
    """Yield ``(bookie, response or None)`` as answers arrive; cancels the rest on exit."""

    async def one(bookie: str, request: Any) -> tuple[str, Any]:
        return bookie, await ctx.request(bookie, request, timeout)

    tasks = [asyncio.ensure_future(one(b, r)) for b, r in requests.items()]
    try:
        for done in asyncio.as_completed(tasks):
            yield await done
    finally:
        for task in tasks:
            task.cancel()


@dataclass
class CopyAudit:
    """What the copies of a closed ledger say. `lacking`: (entry, the bookies that said
    "no such entry", the bookies whose answer said nothing) for each entry some bookie of
    its write set lacks. `divergent`: (entry, bookie -> the application's bytes it holds,
    None for a no-op) for each entry whose verified copies differ: a reader gets one or
    the other depending on which bookie answers first."""

    lacking: list[tuple[int, list[str], list[str]]] = field(default_factory=list)
    divergent: list[tuple[int, dict[str, bytes | None]]] = field(default_factory=list)


class ReadHandle:
    """A ledger opened for reading. Never reads past the LAC it knows (or, once the ledger
    is closed, past its last entry)."""

    def __init__(
        self, ctx: ClientContext, versioned: Versioned, master_key: bytes, lac: int
    ) -> None:
        self._ctx = ctx
        self._versioned = versioned
        self._master_key = master_key
        self._lac = versioned.metadata.last_entry_id if versioned.metadata.closed else lac

    @property
    def id(self) -> int | str:
        return self.metadata.name

    @property
    def metadata(self) -> LedgerMetadata:
        return self._versioned.metadata

    @property
    def last_add_confirmed(self) -> int:
        return self._lac

    async def read(self, first: int, last: int) -> AsyncIterator[tuple[int, bytes]]:
        """Yield ``(entry_id, payload)`` for ``first..last`` inclusive, in order."""
        if first < 0 or last < first - 1:
            raise ValueError(f"bad read range first={first} last={last}")
        if last > self.last_add_confirmed and not self._ctx.bugs.enabled("read-beyond-lac"):
            raise ValueError(
                f"last={last} is beyond the last add confirmed ({self.last_add_confirmed}) "
                f"of ledger {self.id}"
            )
        metadata = self.metadata
        window: list[asyncio.Task[Entry]] = []
        next_id = first
        try:
            while next_id <= last or window:
                while next_id <= last and len(window) < READ_WINDOW:
                    window.append(asyncio.ensure_future(self.read_entry(next_id)))
                    next_id += 1
                entry = await window.pop(0)
                payload = application_payload(metadata, entry)
                if payload is not None:  # None: a term's end, recognised by its payload
                    yield entry.header.entry_id, payload
        finally:
            for task in window:
                task.cancel()

    async def read_entry(self, entry_id: int) -> Entry:
        """Read one entry from the bookies of its write set, in write-set order. A bookie
        that has not answered within the speculative timeout is not waited for: the next
        one is asked too, and the first valid answer wins (a paused bookie costs little)."""
        metadata, bugs = self.metadata, self._ctx.bugs
        order = write_set_bookies(metadata, entry_id)
        errors: list[BKError] = []
        asking: dict[asyncio.Future[Any], str] = {}
        try:
            while order or asking:
                if order:
                    bookie = order.pop(0)
                    request = ReadRequest(next_request_id(), wire_id(metadata, bugs), entry_id)
                    future = asyncio.ensure_future(
                        self._ctx.request(bookie, request, self._ctx.read_timeout)
                    )
                    asking[future] = bookie
                done, _ = await asyncio.wait(
                    asking,
                    timeout=self._ctx.speculative_timeout if order else None,
                    return_when=asyncio.FIRST_COMPLETED,
                )
                # In the order asked, not the set's (by address): what wins when two answers
                # land together must not vary from run to run of a simulated seed.
                for future in [f for f in asking if f in done]:
                    bookie = asking.pop(future)
                    response = future.result()
                    if response is None:
                        errors.append(
                            BKTimeoutError(f"{bookie}: no answer", may_have_happened=False)
                        )
                    elif response.status is not Status.EOK:
                        cls = NoSuchEntryError if response.status in _NEGATIVE else BookieError
                        code = response.status.name
                        errors.append(cls(f"{bookie}: {code}", may_have_happened=False, code=code))
                    else:
                        try:
                            return decode_checked(
                                metadata, self._master_key, response.entry, entry_id, bugs
                            )
                        except ProtocolError as exc:  # DigestError included
                            errors.append(
                                DigestMismatchError(f"{bookie}: {exc}", may_have_happened=False)
                            )
        finally:
            for future in asking:
                future.cancel()
        # Explicit negatives everywhere: the entry is not there; else report the first cause.
        chosen = next((e for e in errors if not isinstance(e, NoSuchEntryError)), errors[0])
        raise type(chosen)(
            f"cannot read entry {entry_id} of ledger {self.id}: "
            + "; ".join(e.args[0] for e in errors),
            may_have_happened=False,
            code=chosen.code,
        )

    async def read_lac(self, wait_ms: int | None = None) -> int:
        """Ask the bookies of the last fragment for the LAC they know (explicit or piggybacked
        on their last entry) and return the largest; the handle's LAC never goes down.

        With ``wait_ms`` it is a long poll: the bookies answer once their LAC passes the
        handle's, or after ``wait_ms``; the first answer showing progress is enough, and so
        are "no progress" answers covering every ack quorum (a paused bookie is not waited
        for, as with a plain read).

        Calls may overlap: each only ever raises the handle's LAC and metadata, so a slower
        call that learned less cannot undo what a faster one learned."""
        await self._refresh()
        metadata = self.metadata
        if metadata.closed:
            return self._raise_lac(metadata.last_entry_id)
        first, bookies = metadata.last_ensemble
        # Entries before the last fragment were confirmed when the fragment was created.
        lac = previous = max(self._lac, first - 1)
        poll: dict[str, Any] = {"previous_lac": previous, "timeout_ms": wait_ms} if wait_ms else {}
        requests = {
            b: ReadLacRequest(next_request_id(), wire_id(metadata, self._ctx.bugs), **poll)
            for b in bookies
        }
        timeout = self._ctx.read_timeout + (wait_ms or 0) / 1000
        answered: set[int] = set()
        async for bookie, response in answers(self._ctx, requests, timeout):
            if response is None or response.status not in (Status.EOK, *_NEGATIVE):
                continue
            answered.add(bookies.index(bookie))
            if response.status is Status.EOK:
                lac = max(lac, response.lac, self._piggybacked_lac(response.last_entry))
            # A long poll ends with the first progress; either ends with quorum coverage,
            # so that one slow bookie does not hold it up.
            if (wait_ms and lac > previous) or quorum_covered(quorum_of(metadata), answered):
                break
        if not answered:
            raise BookieError(
                f"no bookie of {list(bookies)} answered READ_LAC for ledger {self.id}",
                may_have_happened=False,
                code="EBOOKIEUNAVAILABLE",
            )
        # Any entry carrying this LAC was sent after the metadata CAS that created the
        # fragment holding the LAC's entry (adds wait while the ensemble changes), and after
        # the CAS that recorded a new term's no-op: re-reading now lets reads up to this LAC
        # use the right bookies and skip the no-ops.
        await self._refresh()
        if self.metadata.closed:  # closed meanwhile: its last entry is the LAC
            lac = self.metadata.last_entry_id
        return self._raise_lac(lac)

    async def _refresh(self) -> None:
        """Re-read the metadata, keeping whichever copy is newer (by znode version): an
        overlapping call may have read a newer one already."""
        versioned = await self._ctx.store.read(self.id)
        if versioned.version > self._versioned.version:
            self._versioned = versioned

    def _raise_lac(self, lac: int) -> int:
        """The handle's LAC never goes down (of two overlapping read_lac calls, the slower
        may have learned less); returns it."""
        self._lac = max(self._lac, lac)
        return self._lac

    async def follow(self, first: int = 0, wait_ms: int = 1000) -> AsyncIterator[tuple[int, bytes]]:
        """Tail the ledger, as a Pulsar or DistributedLog reader does: yield ``(entry_id,
        payload)`` from entry ``first`` on, each once the LAC covers it (long-polling the
        bookies), until the ledger is closed and read to its end."""
        next_id = first
        seen_open = False
        while True:
            before = self._lac
            lac = await self.read_lac(wait_ms=wait_ms)
            seen_open = seen_open or not self.metadata.closed
            if lac >= next_id:
                async for item in self.read(next_id, lac):
                    yield item
                next_id = lac + 1
            elif self.metadata.closed:
                if seen_open:
                    reach("client-follow-closed", ledger=self.metadata.name, last_entry=lac)
                return
            elif lac == before:
                await asyncio.sleep(0.05)  # bookies that answer at once (new ledger): pace

    def _piggybacked_lac(self, data: bytes) -> int:
        if not data:
            return -1
        try:
            header = decode_entry(data, self.metadata.digest, self._master_key).header
        except ProtocolError:
            return -1
        # The seeded bug takes the last entry a bookie stores for confirmed, so readers go
        # past the LAC onto entries recovery may still drop.
        return header.entry_id if self._ctx.bugs.enabled("read-beyond-lac") else header.lac

    async def copies(self, entry_id: int) -> dict[str, tuple[ReadOutcome, Entry | None]]:
        """Ask every bookie of the entry's write set for it, as a ledger checker does
        (a read stops at the first copy): how each answer counts (`classify_read`), and
        the verified entry of each positive one."""
        metadata = self.metadata
        requests = {
            bookie: ReadRequest(next_request_id(), wire_id(metadata, self._ctx.bugs), entry_id)
            for bookie in write_set_bookies(metadata, entry_id)
        }
        found: dict[str, tuple[ReadOutcome, Entry | None]] = {}
        async for bookie, response in answers(self._ctx, requests, self._ctx.read_timeout):
            found[bookie] = classify_read(
                response, metadata, self._master_key, entry_id, self._ctx.bugs
            )
        return found

    async def audit_copies(self) -> CopyAudit:
        """Every copy of every entry of this closed ledger, asked of each bookie of its
        write set (BookKeeper's ledger checker), and compared. Entries with unknown
        answers are asked once more after AUDIT_RETRY_S, so a bookie that was busy for a
        moment does not blur the figure."""
        if not self.metadata.closed:
            raise ValueError(f"ledger {self.id} is not closed: its copies are still changing")
        found = await self._copies_of(range(self.metadata.last_entry_id + 1))
        unsure = [
            e
            for e, said in found.items()
            if any(o is ReadOutcome.UNKNOWN for o, _ in said.values())
        ]
        if unsure:
            await asyncio.sleep(AUDIT_RETRY_S)
            found.update(await self._copies_of(unsure))
        audit = CopyAudit()
        for entry_id, said in sorted(found.items()):
            outcomes = {b: outcome for b, (outcome, _) in said.items()}
            missing = sorted(b for b, o in outcomes.items() if o is ReadOutcome.NEGATIVE)
            if missing:
                unknown = sorted(b for b, o in outcomes.items() if o is ReadOutcome.UNKNOWN)
                audit.lacking.append((entry_id, missing, unknown))
            held = {
                b: application_payload(self.metadata, entry)
                for b, (_, entry) in sorted(said.items())
                if entry is not None
            }
            if len(set(held.values())) > 1:
                audit.divergent.append((entry_id, held))
        return audit

    async def _copies_of(
        self, entry_ids: Iterable[int]
    ) -> dict[int, dict[str, tuple[ReadOutcome, Entry | None]]]:
        """`copies` of many entries, READ_WINDOW of them at a time."""
        found: dict[int, dict[str, tuple[ReadOutcome, Entry | None]]] = {}
        ids = list(entry_ids)
        for start in range(0, len(ids), READ_WINDOW):
            batch = ids[start : start + READ_WINDOW]
            found.update(zip(batch, await asyncio.gather(*map(self.copies, batch)), strict=True))
        return found

    async def close(self) -> None:
        """Nothing to release for a read handle; present so every handle can be closed."""


_NEGATIVE = (Status.ENOENTRY, Status.ENOLEDGER)


@dataclass(eq=False)
class _PendingAdd:
    entry_id: int
    length: int
    data: bytes  # the encoded entry, re-sent verbatim after an ensemble change
    future: asyncio.Future[int]  # resolves once the entry is confirmed (under the LAC)
    retired: asyncio.Future[None]  # resolves once the writer is done with the entry
    sent: dict[int, str] = field(default_factory=dict)  # ensemble slot -> bookie sent to
    stored: set[int] = field(default_factory=set)  # slots whose current bookie acked it


class Writer:
    """Replicates entries of one ledger: stripes, counts acks, advances the LAC over the
    contiguous committed prefix, and replaces failed bookies by an ensemble change.

    In ``recovery`` mode the adds carry RECOVERY_ADD and the LAC frozen at recovery start,
    and ensemble changes require the metadata to be IN_RECOVERY instead of OPEN.

    With a guaranteed write quorum (a ledger option) a confirmed entry is retired only once
    every bookie of its write set has it: a bookie that fails later is still replaced, the
    new fragment starting at the oldest entry not yet on all of them where that is safe
    (:meth:`_first_of_new_fragment`); older ones are sent to the replacement as well.
    """

    def __init__(
        self,
        ctx: ClientContext,
        versioned: Versioned,
        master_key: bytes,
        *,
        lac: int,
        length: int,
        recovery: bool = False,
    ) -> None:
        self.ctx = ctx
        self.versioned = versioned
        self.master_key = master_key
        self.config = quorum_of(versioned.metadata)
        self.tracker = AckTracker(self.config, lac, ctx.bugs)
        self.recovery = recovery
        # Unbounded ledgers fence by term: every add carries the term this writer holds.
        self.term = versioned.metadata.term if versioned.metadata.unbounded else None
        self.frozen_lac = lac
        self.next_entry_id = lac + 1
        self.length = length  # total payload length through the last queued entry
        self.confirmed_length = length  # ... through the LAC
        self.error: BKError | None = None
        self._pending: dict[int, _PendingAdd] = {}
        self._failed: dict[int, str] = {}  # slot -> failed bookie awaiting replacement
        self._excluded: set[str] = set()  # bookies that failed on this ledger
        self._changing: asyncio.Task[None] | None = None
        self._rotate = False  # the last fragment is full: change the whole ensemble
        self._digest = DigestType.parse(versioned.metadata.digest)
        self._guarantee = versioned.metadata.guaranteed_write_quorum

    @property
    def lac(self) -> int:
        return self.tracker.last_add_confirmed

    @property
    def ensemble(self) -> tuple[str, ...]:
        return self.versioned.metadata.last_ensemble[1]

    def enqueue(self, payload: bytes, length: int | None = None) -> asyncio.Future[int]:
        """Queue the next entry, whose payload is stored as given (see
        :func:`stored_payload`); the future resolves to its id once it is confirmed
        (futures resolve in entry order). ``length`` overrides the running total (recovery
        writes back entries verbatim, with the length they were first written with)."""
        if self.error is not None:
            raise type(self.error)(
                f"ledger {self.versioned.metadata.name} cannot take adds: {self.error.args[0]}",
                may_have_happened=False,
                code=self.error.code,
            )
        entry_id = self.next_entry_id
        self.next_entry_id += 1
        self.length = self.length + len(payload) if length is None else length
        lac = self.frozen_lac if self.recovery else self.lac
        data = encode_entry(
            wire_id(self.versioned.metadata, self.ctx.bugs),
            entry_id,
            lac,
            self.length,
            payload,
            self._digest,
            self.master_key,
        )
        loop = asyncio.get_running_loop()
        pending = _PendingAdd(
            entry_id, self.length, data, loop.create_future(), loop.create_future()
        )
        self._pending[entry_id] = pending
        self.tracker.expect(entry_id)
        first, _ = self.versioned.metadata.last_ensemble
        limit = self.versioned.metadata.max_fragment_entries
        if limit and entry_id - first >= limit and self._changing is None and not self.recovery:
            # The fragment is full: move on to a fresh ensemble (unbounded ledgers spread
            # over the cluster this way instead of by rolling over to new ledgers).
            self._rotate = True
            self._changing = self.ctx.spawn(self._change_ensemble())
        if self._changing is None:
            self._send(pending)
        return pending.future

    async def drain(self) -> None:
        """Wait until every queued add has completed (with a guaranteed write quorum: is on
        every bookie of its write set) or failed. Shielded: a caller that gives up (a close
        cancelled at its timeout) must not cancel the writer's own futures, which it
        completes later (`_retire`, `fail`) and would then find cancelled."""
        await asyncio.shield(asyncio.gather(*(p.retired for p in self._pending.values())))

    def _send(self, pending: _PendingAdd) -> None:
        """Send to every bookie of the write set that has not been sent this entry yet."""
        bookies = self.ensemble
        sent_to = []
        for slot in write_set(pending.entry_id, self.config):
            if pending.sent.get(slot) != bookies[slot]:
                pending.sent[slot] = bookies[slot]
                pending.stored.discard(slot)
                self.ctx.spawn(self._send_one(pending, slot, bookies[slot]))
                sent_to.append(bookies[slot])
        if sent_to:  # the sends are spawned, not yet run: nothing has reached a bookie
            name = self.versioned.metadata.name
            reach("client-add-sent", ledger=name, entry=pending.entry_id, bookies=sent_to)

    async def _send_one(self, pending: _PendingAdd, slot: int, bookie: str) -> None:
        request = AddRequest(
            next_request_id(), self.master_key, pending.data, recovery=self.recovery, term=self.term
        )
        response = await self.ctx.request(bookie, request, self.ctx.add_timeout)
        if self.error is not None or self.ensemble[slot] != bookie:
            return  # the ledger failed, or this bookie was already replaced
        status = None if response is None else response.status
        if status is Status.EOK:
            self._on_ack(pending.entry_id, slot)
        elif status in (Status.EFENCED, Status.EINVALIDTERM):
            name = self.versioned.metadata.name
            reach("client-add-fenced", ledger=name, entry=pending.entry_id, bookie=bookie)
            self.fail(
                LedgerFencedError(
                    f"ledger {self.versioned.metadata.name} was fenced by a recovery or a "
                    f"newer term (bookie {bookie})",
                    may_have_happened=True,
                    code=status.name,
                )
            )
        elif status is Status.EUA:
            self.fail(UnauthorizedError(f"{bookie} refused the master key", may_have_happened=True))
        else:  # no answer, EIO, EREADONLY, ETOOMANYREQUESTS, ...: replace the bookie
            self._bookie_failed(slot, bookie)

    def _on_ack(self, entry_id: int, slot: int) -> None:
        if slot in self._failed:
            return  # its replacement must get the entry; this ack will not count
        if (acked := self._pending.get(entry_id)) is not None:
            acked.stored.add(slot)
        for done in self.tracker.ack(entry_id, slot):
            pending = self._pending[done]
            self.confirmed_length = pending.length
            if not pending.future.done():
                pending.future.set_result(done)
        self._retire()

    def _retire(self) -> None:
        """Forget, in entry order, the confirmed entries the writer owes nothing more: all of
        them, or with a guaranteed write quorum those stored on every bookie of their write
        set. In order, so that the pending entries are always a suffix of the ledger."""
        for entry_id in list(self._pending):
            pending = self._pending[entry_id]
            stored = pending.stored.issuperset(write_set(entry_id, self.config))
            if entry_id > self.lac or (self._guarantee and not stored):
                break
            del self._pending[entry_id]
            pending.retired.set_result(None)

    def _bookie_failed(self, slot: int, bookie: str) -> None:
        if slot in self._failed:
            return
        if self.recovery:
            name = self.versioned.metadata.name
            reach("recovery-writeback-bookie-failed", ledger=name, bookie=bookie)
        self._failed[slot] = bookie
        self._excluded.add(bookie)
        if not self.ctx.bugs.enabled("ensemble-change-drops-pending"):
            self.tracker.forget_bookie(slot)
        if self._changing is None:
            self._changing = self.ctx.spawn(self._change_ensemble())

    async def _change_ensemble(self) -> None:
        """Replace failed bookies (or, to rotate a full fragment, the whole ensemble): a new
        fragment from LAC+1, written by CAS, then re-send the pending adds to the new
        bookies. A metadata state other than the one this writer owns means a recovery has
        started: the writer has been fenced."""
        name = self.versioned.metadata.name
        failed = sorted(self._failed.values())
        reach("ensemble-change", ledger=name, bookies=list(self.ensemble), failed=failed)
        if self.recovery:
            reach("ensemble-change-in-recovery", ledger=name, failed=failed)
        if any(entry_id > self.lac for entry_id in self._pending):
            reach("ensemble-change-adds-pending", ledger=name, lac=self.lac)
        try:
            while (self._failed or self._rotate) and self.error is None:
                ensemble = list(self.ensemble)
                available = [
                    b for b in await self.ctx.store.available_bookies() if b not in self._excluded
                ]
                targets = self._plan(ensemble, available)
                if targets is None:
                    reach("ensemble-change-no-replacement", ledger=name, available=available)
                    # A fenced writer should say so rather than blame the bookies.
                    fresh = await self.ctx.store.read(self.versioned.metadata.name)
                    self._still_owner(fresh.metadata)
                    if not self._guarantee and ack_quorum_survives(self.config, self._failed):
                        # No replacement, but the others still make ack quorums: carry on
                        # degraded (the failed bookie's acks stay ignored) rather than fail.
                        break
                    guarantee = " (its write quorum is guaranteed)" if self._guarantee else ""
                    raise NotEnoughBookiesError(
                        f"cannot replace {sorted(self._failed.values())} in ledger "
                        f"{self.versioned.metadata.name}{guarantee}: no other writable "
                        f"bookie in {available}",
                        may_have_happened=True,
                    )
                for slot in targets:
                    if slot not in self._failed:  # rotated away: its acks no longer count
                        self._failed[slot] = ensemble[slot]
                        self.tracker.forget_bookie(slot)
                first = self._first_of_new_fragment(set(targets))
                for slot, bookie in targets.items():
                    ensemble[slot] = bookie
                change = self._new_fragment(first, tuple(ensemble))
                if pause := buggify.delay("ensemble-change-delay"):
                    await asyncio.sleep(pause)
                if self.recovery:
                    # A recovery keeps its replacements to itself until it closes the
                    # ledger, as BookKeeper's does: written now, they would name a bookie
                    # that lacks the entries being written back, and the next recovery
                    # would take its "no such entry" for a negative and truncate.
                    self.versioned = replace(
                        self.versioned, metadata=change(self.versioned.metadata)
                    )
                else:
                    self.versioned = await self.ctx.store.update(self.versioned, change)
                for slot in targets:
                    del self._failed[slot]
                if self.ctx.bugs.enabled("ensemble-change-drops-pending"):
                    # The seeded bug: entries already sent to a replaced bookie are not
                    # re-sent to its replacement, and that bookie's acks still count.
                    for pending in self._pending.values():
                        pending.sent.update({s: ensemble[s] for s in targets if s in pending.sent})
                        pending.stored.update(s for s in targets if s in pending.sent)
            # Re-send pending adds to the new bookies of their write sets, and send the adds
            # queued while the ensemble was changing.
            for pending in list(self._pending.values()):
                self._send(pending)
        except BKError as exc:
            self.fail(exc)
        finally:
            self._changing = None

    def _first_of_new_fragment(self, replaced: set[int]) -> int:
        """Where a new fragment starts: at LAC+1, or with a guaranteed write quorum at the
        oldest entry not yet on every bookie of its write set (pending entries at or below
        the LAC), so its replacements receive it; but never so low that a confirmed entry it
        takes keeps fewer than AQ holders among the bookies not replaced — a replaced bookie
        may hold it, and a crash before the re-send would leave enough explicit negatives
        for a recovery to truncate it. Never below the last fragment's start."""
        first = min(self.lac + 1, next(iter(self._pending), self.lac + 1))
        for entry_id in range(self.lac, first - 1, -1):
            if len(self._pending[entry_id].stored - replaced) < self.config.ack_quorum:
                first = entry_id + 1
                break
        return max(first, self.versioned.metadata.last_ensemble[0])

    def _plan(self, ensemble: list[str], available: list[str]) -> dict[int, str] | None:
        """New bookies by ensemble slot; None when a failed bookie cannot be replaced."""
        if self._rotate:
            self._rotate = False
            if len(available) >= len(ensemble):
                fresh = self.ctx.rng.sample(available, len(ensemble))
                return {slot: b for slot, b in enumerate(fresh) if b != ensemble[slot]}
        candidates = [b for b in available if b not in ensemble]
        if len(candidates) < len(self._failed):
            return None
        self.ctx.rng.shuffle(candidates)
        return {slot: candidates.pop() for slot in self._failed}

    def check_owner(self, m: LedgerMetadata, *, may_have_happened: bool) -> None:
        """Raise unless ``m`` still belongs to this writer: the state it writes in (OPEN, or
        IN_RECOVERY for recovery) and, for an unbounded ledger, its term."""
        owned = LedgerState.IN_RECOVERY if self.recovery else LedgerState.OPEN
        if m.state is not owned or (self.term is not None and m.term != self.term):
            raise LedgerFencedError(
                f"ledger {m.name} is {m.state.value} in term {m.term}: another client is "
                "recovering, has taken over or has closed it",
                may_have_happened=may_have_happened,
            )

    def _still_owner(self, m: LedgerMetadata) -> None:
        """`check_owner` for an ensemble change: losing the ledger to a recovery or a newer
        term while changing its ensemble is a race worth counting."""
        try:
            self.check_owner(m, may_have_happened=True)
        except LedgerFencedError:
            reach("ensemble-change-lost-to-recovery", ledger=m.name, state=m.state.value)
            raise

    def _new_fragment(
        self, first: int, ensemble: tuple[str, ...]
    ) -> Callable[[LedgerMetadata], LedgerMetadata]:
        def mutate(m: LedgerMetadata) -> LedgerMetadata:
            self._still_owner(m)
            return m.with_ensemble(first, ensemble)

        return mutate

    def fail(self, error: BKError) -> None:
        """The writer is done for: fail every pending add (later ones with it, so adds
        still complete in order) and refuse new ones."""
        if self.error is not None:
            return
        self.error = error
        for pending in self._pending.values():
            if not pending.future.done():
                pending.future.set_exception(_for_pending(error, pending))
            pending.retired.set_result(None)
        self._pending.clear()


def _for_pending(error: BKError, pending: _PendingAdd) -> BKError:
    """The error a pending add fails with. Whatever ended the writer (say, a ZooKeeper
    read failing during an ensemble change: that read did not happen), an add already
    sent to a bookie may be stored there, and a recovery that finds it there takes it into
    the ledger: its failure is never definite."""
    if error.may_have_happened or not pending.sent:
        return error
    return type(error)(error.args[0], may_have_happened=True, code=error.code)


class LedgerHandle(ReadHandle):
    """A ledger this client writes to: one it created, or an unbounded one it took over
    (then ``lac`` and ``length`` say where the previous term ended)."""

    def __init__(
        self,
        ctx: ClientContext,
        versioned: Versioned,
        master_key: bytes,
        *,
        lac: int = -1,
        length: int = 0,
    ) -> None:
        super().__init__(ctx, versioned, master_key, lac=lac)
        self._writer = Writer(ctx, versioned, master_key, lac=lac, length=length)
        self._closed = False

    @property
    def metadata(self) -> LedgerMetadata:
        return self._writer.versioned.metadata

    @property
    def last_add_confirmed(self) -> int:
        return self._writer.lac

    async def append(self, data: bytes) -> int:
        """Add an entry; returns its id once AQ bookies have it and every earlier entry is
        confirmed too. Pipelined: many appends may be outstanding at once."""
        if self._closed:
            raise LedgerClosedError(f"ledger {self.id} is closed", may_have_happened=False)
        return await self._writer.enqueue(stored_payload(self.metadata, bytes(data)))

    async def read_lac(self, wait_ms: int | None = None) -> int:
        """The writer knows its LAC: no need to ask (nor wait for) the bookies."""
        return self.last_add_confirmed

    async def close(self) -> None:
        """Wait for outstanding adds, then mark the ledger CLOSED at the LAC by CAS."""
        if self._closed:
            return
        self._closed = True
        writer = self._writer
        await writer.drain()
        lac, length = writer.lac, writer.confirmed_length

        def close(m: LedgerMetadata) -> LedgerMetadata:
            if m.closed and m.last_entry_id == lac:
                return m
            writer.check_owner(m, may_have_happened=False)
            return closed_at(m, lac, length)

        writer.versioned = await self._ctx.store.update(writer.versioned, close)
        writer.fail(LedgerClosedError(f"ledger {self.id} is closed", may_have_happened=False))


def closed_at(m: LedgerMetadata, last_entry_id: int, length: int) -> LedgerMetadata:
    return replace(m, state=LedgerState.CLOSED, last_entry_id=last_entry_id, length=length)


def check_password(metadata: LedgerMetadata, password: bytes) -> bytes:
    """The master key for ``password``, after checking it against the metadata's hash."""
    if metadata.password_hash != password_hash(password):
        raise UnauthorizedError(
            f"wrong password for ledger {metadata.name}", may_have_happened=False
        )
    return master_key_for(password)
