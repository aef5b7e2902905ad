"""Request handling: the protocol semantics of one bookie, independent of sockets.

`Bookie.handle(request, reply)` answers each request by calling `reply(response)` once,
possibly later (after the journal fsync, or when a long poll ends). Guards (master key,
fence, term) change in memory at once, in request order, so a request that arrives after
a fence is refused even before the fence is durable; every change is journaled and
nothing is acknowledged before the fsync that covers it. Entries and explicit LACs become
visible to reads only once durable, in journal order, exactly as replay applies them.

Statuses follow the reference: ENOLEDGER only for a ledger never seen, ENOENTRY only for a
missing entry of a known ledger, EIO for anything unreadable (never an explicit negative).
Requests with a term (unbounded ledgers) use terms instead of the fence bit: a lower term
gets EINVALIDTERM, a higher one on an add or a fencing read raises the ledger's term.
"""

from __future__ import annotations

import asyncio
import errno
import shutil
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any

from bookie_image.bugs import NO_BUGS, Bugs
from bookie_image.probes import reach
from bookie_image.protocol import (
    AddRequest,
    AddResponse,
    BookieInfoRequest,
    BookieInfoResponse,
    LedgerId,
    ReadLacRequest,
    ReadLacResponse,
    ReadRequest,
    ReadResponse,
    Status,
    WriteLacRequest,
    WriteLacResponse,
)

from .events import EventLog
from .journal import ADD, FENCED, NO_KEY, RECOVERY, STATE, TRUNCATE, Journal, Record
from .storage import CorruptEntry, LedgerState, LKey, NoEntry, NoLedger, Store

Reply = Callable[[Any], None]


class Bookie:
    """One bookie's request semantics over a `Store` and a `Journal`."""

    def __init__(
        self,
        store: Store,
        journal: Journal,
        events: EventLog,
        ledger_dirs: Collection[Path] = (),
        bugs: Bugs = NO_BUGS,
    ) -> None:
        self.store = store
        self.journal = journal
        self.events = events
        self._ledger_dirs = list(ledger_dirs)
        self._no_truncate = bugs.enabled("unbounded-no-truncate")
        self._corrupt_as_missing = bugs.enabled("corrupt-returns-noentry")
        self.readonly: str | None = None  # why, when read-only
        self.on_mode_change: Callable[[bool], None] = lambda readonly: None
        self.restarted = False
        """Started on disks that held data before (set at start): its first entry read is
        the probe `bookie-read-after-restart`."""
        self._waiters: dict[LKey, list[tuple[int, ReadLacRequest, Reply, asyncio.TimerHandle]]] = {}

    # -- modes -------------------------------------------------------------------------------

    def set_readonly(self, reason: str, **fields: Any) -> None:
        if self.readonly is None:
            self.readonly = reason
            self.events.emit("readonly", reason=reason, **fields)
            reach("bookie-readonly", reason=reason)
            self.on_mode_change(True)

    def set_writable(self) -> None:
        """Leave a read-only mode caused by a full disk once usage is below the threshold
        again; any other I/O error keeps the bookie read-only until restarted."""
        if self.readonly in ("disk-usage", "disk-full"):
            self.readonly = None
            self.events.emit("writable")
            self.on_mode_change(False)

    def io_failed(self, what: str, exc: BaseException) -> None:
        full = isinstance(exc, OSError) and exc.errno == errno.ENOSPC
        self.set_readonly("disk-full" if full else "io-error", what=what, error=str(exc))

    # -- dispatch ----------------------------------------------------------------------------

    def handle(self, request: Any, reply: Reply) -> None:
        if isinstance(request, AddRequest):
            self._add(request, reply)
        elif isinstance(request, ReadRequest):
            self._read(request, reply)
        elif isinstance(request, ReadLacRequest):
            self._read_lac(request, reply)
        elif isinstance(request, WriteLacRequest):
            self._write_lac(request, reply)
        elif isinstance(request, BookieInfoRequest):
            free, total = self.disk_space()
            reply(BookieInfoResponse(request.request_id, Status.EOK, free, total))
        else:
            raise TypeError(f"not a request: {request!r}")

    # -- guards --------------------------------------------------------------------------------

    def _guard(self, lk: LKey, key: bytes | None, term: int | None) -> Status | None:
        """EUA for a wrong master key, EINVALIDTERM for a stale term; None when allowed."""
        st = self.store.ledgers.get(lk)
        if st is None:
            return None
        if key is not None and st.key != NO_KEY and st.key != key:
            return Status.EUA
        if term is not None and term < st.term:
            return Status.EINVALIDTERM
        return None

    def _apply_guards(
        self, ledger: LedgerId, key: bytes, term: int | None, fence: bool = False
    ) -> LedgerState:
        lk = (ledger.scope, ledger.id)
        before = self.store.ledgers.get(lk)
        old_term = before.term if before is not None else -1
        was_fenced = before is not None and before.fenced
        st = self.store.apply_state(lk, key, -1 if term is None else term, fenced=fence)
        if st.term > old_term:
            self.events.emit("term-advanced", ledger=_name(ledger), term=st.term, was=old_term)
            if old_term >= 0:
                reach("unbounded-term-raised", ledger=_name(ledger), term=st.term, was=old_term)
        if st.fenced and not was_fenced:
            self.events.emit("fenced", ledger=_name(ledger))
            reach("bookie-fenced", ledger=_name(ledger))
        return st

    # -- ADD -----------------------------------------------------------------------------------

    def _add(self, req: AddRequest, reply: Reply) -> None:
        header = req.header
        ledger, entry_id = header.ledger, header.entry_id
        lk = (ledger.scope, ledger.id)

        def answer(status: Status) -> None:
            reply(AddResponse(req.request_id, status, ledger, entry_id))

        if self.readonly is not None:
            reach("bookie-readonly-add-refused", ledger=_name(ledger), entry=entry_id)
            return answer(Status.EREADONLY)
        refused = self._guard(lk, req.master_key, req.term)
        if refused is not None:
            if refused is Status.EINVALIDTERM:
                reach("unbounded-stale-term-add", ledger=_name(ledger), entry=entry_id)
            return answer(refused)
        st = self.store.ledgers.get(lk)
        if st is not None and st.fenced:
            if not req.recovery:
                reach("bookie-fenced-add-refused", ledger=_name(ledger), entry=entry_id)
                return answer(Status.EFENCED)
            reach("bookie-recovery-add-on-fenced", ledger=_name(ledger), entry=entry_id)
        if req.recovery and not req.truncate and (st is None or entry_id > st.last_entry):
            # A write-back bringing this bookie a copy it lacked: failing here, it still
            # lacks the entry, and the recovery must write it to a replacement.
            reach("bookie-recovery-add-new-entry", ledger=_name(ledger), entry=entry_id)
        self._apply_guards(ledger, req.master_key, req.term)
        truncate = req.truncate and not self._no_truncate
        flags = (RECOVERY if req.recovery else 0) | (TRUNCATE if truncate else 0)
        term = -1 if req.term is None else req.term
        record = Record(
            ADD, lk[0], lk[1], entry_id, header.lac, term, flags, req.master_key, req.entry
        )

        def durable(error: BaseException | None) -> None:
            if error is not None:
                self.io_failed("journal", error)
                return answer(Status.EIO)
            held = self.store.ledgers[lk].last_entry if truncate else -1  # for the probe
            self.store.apply_add(lk, entry_id, req.entry, header.lac, truncate)
            if truncate:
                self.events.emit("truncated", ledger=_name(ledger), after=entry_id)
                reach("unbounded-truncate-applied", ledger=_name(ledger), entry=entry_id)
                if held > entry_id:
                    reach("unbounded-truncate-dropped", ledger=_name(ledger), after=entry_id)
            self._notify(lk)
            answer(Status.EOK)

        self.journal.append(record, durable)
        return None

    # -- READ ----------------------------------------------------------------------------------

    def _lookup(self, lk: LKey, entry_id: int) -> tuple[Status, int, bytes]:
        try:
            found, data = self.store.read(lk, entry_id)
            return Status.EOK, found, data
        except NoLedger:
            return Status.ENOLEDGER, entry_id, b""
        except NoEntry:
            return Status.ENOENTRY, entry_id, b""
        except CorruptEntry as exc:
            name = _name(LedgerId(*lk))
            self.events.emit("corrupt-entry", ledger=name, entry=entry_id, error=str(exc))
            reach("bookie-corrupt-entry-read", ledger=name, entry=entry_id)
            if self._corrupt_as_missing:
                return Status.ENOENTRY, entry_id, b""
            return Status.EIO, entry_id, b""

    def _read(self, req: ReadRequest, reply: Reply) -> None:
        ledger = req.ledger
        lk = (ledger.scope, ledger.id)

        def answer() -> None:
            status, found, data = self._lookup(lk, req.entry_id)
            if self.restarted and status is Status.EOK and req.entry_id >= 0:
                self.restarted = False
                reach("bookie-read-after-restart", ledger=_name(ledger), entry=req.entry_id)
            reply(ReadResponse(req.request_id, status, ledger, found, data))

        refused = self._guard(lk, req.master_key if req.fence else None, req.term)
        if refused is not None:
            if refused is Status.EINVALIDTERM:
                reach("unbounded-stale-term-read", ledger=_name(ledger), entry=req.entry_id)
            return reply(ReadResponse(req.request_id, refused, ledger, req.entry_id))
        if not req.fence:
            return answer()
        assert req.master_key is not None  # the codec guarantees a key with FENCE_LEDGER
        # With a term the term is the fence (unbounded ledgers): no once-only fence bit.
        self._journal_state(
            ledger,
            req.master_key,
            req.term,
            -1,
            req.term is None,
            answer,
            lambda: reply(ReadResponse(req.request_id, Status.EIO, ledger, req.entry_id)),
        )
        return None

    def _journal_state(
        self,
        ledger: LedgerId,
        key: bytes,
        term: int | None,
        lac: int,
        fence: bool,
        then: Callable[[], None],
        on_error: Callable[[], None],
    ) -> None:
        """Apply guard changes now, journal them, and run `then` once they are durable."""
        lk = (ledger.scope, ledger.id)
        st = self._apply_guards(ledger, key, term, fence)
        record = Record(
            STATE,
            lk[0],
            lk[1],
            -1,
            lac,
            -1 if term is None else term,
            FENCED if fence else 0,
            st.key,
        )

        def durable(error: BaseException | None) -> None:
            if error is not None:
                self.io_failed("journal", error)
                on_error()
                return
            if lac >= 0:
                self.store.apply_state(lk, lac=lac)
                self._notify(lk)
            then()

        self.journal.append(record, durable)

    # -- LAC -----------------------------------------------------------------------------------

    def _write_lac(self, req: WriteLacRequest, reply: Reply) -> None:
        ledger = req.ledger
        lk = (ledger.scope, ledger.id)

        def answer(status: Status) -> None:
            reply(WriteLacResponse(req.request_id, status, ledger))

        if self.readonly is not None:
            return answer(Status.EREADONLY)
        refused = self._guard(lk, req.master_key, None)
        if refused is not None:
            return answer(refused)
        self._journal_state(
            ledger,
            req.master_key,
            None,
            req.lac,
            False,
            lambda: answer(Status.EOK),
            lambda: answer(Status.EIO),
        )
        return None

    def _read_lac(self, req: ReadLacRequest, reply: Reply) -> None:
        lk = (req.ledger.scope, req.ledger.id)
        st = self.store.ledgers.get(lk)
        if st is None:
            return reply(ReadLacResponse(req.request_id, Status.ENOLEDGER, req.ledger, -1))
        if req.previous_lac is None or st.known_lac > req.previous_lac or not req.timeout_ms:
            return self._answer_lac(req, reply)
        timer = asyncio.get_running_loop().call_later(req.timeout_ms / 1000, self._expire, lk, req)
        self._waiters.setdefault(lk, []).append((req.previous_lac, req, reply, timer))
        return None

    def _answer_lac(self, req: ReadLacRequest, reply: Reply) -> None:
        lk = (req.ledger.scope, req.ledger.id)
        st = self.store.ledgers[lk]
        status, _, last = self._lookup(lk, -1)
        if status == Status.ENOENTRY:
            status = Status.EOK  # a known ledger with no entry yet: the LAC alone
        reply(ReadLacResponse(req.request_id, status, req.ledger, st.lac, last))

    def _notify(self, lk: LKey) -> None:
        waiters = self._waiters.get(lk)
        if not waiters:
            return
        known = self.store.ledgers[lk].known_lac
        keep = []
        for waiter in waiters:
            previous, req, reply, timer = waiter
            if known > previous:
                timer.cancel()
                self._answer_lac(req, reply)
            else:
                keep.append(waiter)
        if keep:
            self._waiters[lk] = keep
        else:
            del self._waiters[lk]

    def _expire(self, lk: LKey, req: ReadLacRequest) -> None:
        waiters = self._waiters.get(lk, [])
        for i, (_, waiting, reply, _) in enumerate(waiters):
            if waiting is req:
                del waiters[i]
                if not waiters:
                    del self._waiters[lk]
                self._answer_lac(req, reply)
                return

    # -- disk ----------------------------------------------------------------------------------

    def disk_space(self) -> tuple[int, int]:
        """(free, total) bytes over the distinct filesystems of the ledger dirs."""
        seen: set[int] = set()
        free = total = 0
        for d in self._ledger_dirs:
            try:
                dev = d.stat().st_dev
                if dev in seen:
                    continue
                seen.add(dev)
                usage = shutil.disk_usage(d)
            except OSError:
                continue
            free += usage.free
            total += usage.total
        return free, total


def _name(ledger: LedgerId) -> str:
    """How logs name a ledger: the decimal id, or BP-35's hex name for a 128-bit one."""
    return ledger.qualified_name if ledger.scope else str(ledger.id)
