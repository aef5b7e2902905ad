"""Executes workload operations through the ledger client and classifies each outcome.

The classification is the contract of docs/history.md §1 and the reason this module
exists: `ok` — it happened and the value says what was observed; `fail` — it definitely did
not happen and never will; `info` — unknown. Reporting `fail` for something that may still
happen makes the checker cry wolf (`failed-append-visible`); reporting `ok` for something
that did not happen hides lost entries. So:

- a client error says itself whether the operation may have happened
  (`BKError.may_have_happened`); anything else unexpected is `info`;
- a timeout is `info` for operations that change state (append, create, close, recover)
  and `fail` for pure reads, which change nothing whatever happens;
- an append to a ledger this agent holds no write handle for is `fail`: no byte was sent.

Write handles are keyed by ledger, or by (ledger, term) for unbounded ledgers: a takeover
on this agent must not hand its new handle to the previous writer, whose appends must
keep going through its own, fenced, handle.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from bookie_image.client.errors import BKError

if TYPE_CHECKING:
    from bookie_image.client import BookKeeper

Outcome = tuple[str, dict[str, Any] | None, str | None]
"""(type, value, error): type is "ok", "fail" or "info"."""

READ_ONLY_OPS = frozenset({"read", "read-lac", "audit"})
READ_MODES = ("tail", "closed", "follow")
FOLLOW_WINDOW_MS = 1000
"""How long a `follow` read follows its ledger unless it ends first (`window_ms`)."""


@dataclass
class LedgerOptions:
    """How the agent creates ledgers (per workload; overridable per create op)."""

    ensemble: int = 3
    write_quorum: int = 2
    ack_quorum: int = 2
    digest: str = "crc32c"
    password: str = "bkchaos"
    id_bits: int = 64
    mode: str = "bounded"
    guaranteed_write_quorum: bool = False
    scope: int = 0
    """A BP-35 scope for 128-bit ledgers (ids from its own counter); 0: a random id."""

    def merged(self, value: dict[str, Any]) -> LedgerOptions:
        keys = (
            "ensemble",
            "write_quorum",
            "ack_quorum",
            "digest",
            "id_bits",
            "mode",
            "guaranteed_write_quorum",
            "scope",
        )
        return LedgerOptions(**{**self.__dict__, **{k: value[k] for k in keys if k in value}})


@dataclass
class Executor:
    """One agent's client, its open write handles and the op table."""

    bk: BookKeeper
    options: LedgerOptions = field(default_factory=LedgerOptions)
    writers: dict[Any, Any] = field(default_factory=dict)
    readers: dict[Any, asyncio.Task] = field(default_factory=dict)
    reader_locks: dict[Any, asyncio.Lock] = field(default_factory=dict)

    @property
    def password(self) -> bytes:
        return self.options.password.encode()

    async def run(
        self,
        f: str,
        value: dict[str, Any],
        timeout: float,
        run_on: Callable[[asyncio.Task[Any]], None] | None = None,
    ) -> Outcome:
        """Run op `f` with `value`, bounded by `timeout` seconds, and classify the outcome.

        A call that outlives its timeout is answered `ETIMEOUT` at once; it is cancelled,
        as a real agent bounds its own work, unless `run_on` is given: then it runs on and
        `run_on` gets its task (the simulation's agents, whose calls still running long
        after every fault healed are the `hang` anomaly: a cancelled call hides a hang)."""
        handler = self._ops().get(f)
        if handler is None:
            return "fail", None, f"unknown op {f!r}"
        call = asyncio.ensure_future(handler(value))
        try:
            result = await asyncio.wait_for(asyncio.shield(call), timeout)
        except TimeoutError:
            if run_on is None:
                call.cancel()
            else:
                run_on(call)
            call.add_done_callback(_retrieved)
            return ("fail" if f in READ_ONLY_OPS else "info"), None, "ETIMEOUT"
        except asyncio.CancelledError:  # the agent itself stops (its node killed)
            call.cancel()
            raise
        except BKError as exc:
            definitely_not = not exc.may_have_happened or f in READ_ONLY_OPS
            return ("fail" if definitely_not else "info"), None, exc.code
        except Exception as exc:  # an unexpected failure mid-flight: anything may have happened
            return ("fail" if f in READ_ONLY_OPS else "info"), None, type(exc).__name__
        return "ok", {**value, **result}, None

    def _ops(self) -> dict[str, Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]]:
        return {
            "create": self.create,
            "append": self.append,
            "read": self.read,
            "read-lac": self.read_lac,
            "close": self.close,
            "recover": self.recover,
            "take-over": self.take_over,
            "audit": self.audit,
        }

    async def create(self, value: dict[str, Any]) -> dict[str, Any]:
        opts = self.options.merged(value)
        lh = await self.bk.create_ledger(
            ensemble=opts.ensemble,
            write_quorum=opts.write_quorum,
            ack_quorum=opts.ack_quorum,
            password=self.password,
            digest=opts.digest,
            id_bits=opts.id_bits,
            scope=opts.scope or None,
            mode=opts.mode,
            guaranteed_write_quorum=opts.guaranteed_write_quorum,
        )
        result = {
            "ledger": lh.id,
            "ensemble": opts.ensemble,
            "wq": opts.write_quorum,
            "aq": opts.ack_quorum,
            "ensembles": ensembles(lh.metadata),
        }
        if opts.mode == "unbounded":
            result["term"] = lh.metadata.term
        self.writers[_writer_key(result)] = lh
        return result

    async def append(self, value: dict[str, Any]) -> dict[str, Any]:
        _, payload = _require(value, ledger=(int, str), payload=str)
        entry = await self._writer(value).append(payload.encode())
        return {"entry": entry}

    def _writer(self, value: dict[str, Any], *, pop: bool = False) -> Any:
        """The write handle the op names (by ledger, and term if given), or ENOHANDLE."""
        key = _writer_key(value)
        lh = self.writers.pop(key, None) if pop else self.writers.get(key)
        if lh is None:
            raise _NotOurs(f"this agent holds no write handle for ledger {key}")
        return lh

    async def take_over(self, value: dict[str, Any]) -> dict[str, Any]:
        """Become the writer of an unbounded ledger in a new term (fencing the previous)."""
        (ledger,) = _require(value, ledger=(int, str))
        lh = await self.bk.take_over_ledger(ledger, password=self.password)
        result = {"last_entry": lh.last_add_confirmed, "term": lh.metadata.term}
        self.writers[_writer_key({"ledger": ledger, **result})] = lh
        return result

    async def read(self, value: dict[str, Any]) -> dict[str, Any]:
        ledger, mode = _require(value, ledger=(int, str), mode=str)
        if mode not in READ_MODES:
            raise _BadValue(f"read mode must be one of {READ_MODES}, not {mode!r}")
        first = _optional(value, "from", 0)
        if mode == "follow":
            return await self._follow(ledger, first, value)
        if mode == "closed":
            rh = await self.bk.open_ledger(ledger, password=self.password, recovery=True)
            lac = rh.last_add_confirmed
        else:
            rh, lac = await self._tail_lac(ledger, value)
        entries = []
        if lac >= first:
            entries = [[e, data.decode()] async for e, data in rh.read(first, lac)]
        return {"lac": lac, "entries": entries}

    async def _follow(self, ledger: Any, first: int, value: dict[str, Any]) -> dict[str, Any]:
        """Follow the ledger from entry `first` through `ReadHandle.follow` (a tailing
        consumer's long-poll loop) for `window_ms`, or until it is closed and read to its
        end (`end`: true). Through the kept tail handle, so the reported `lac` — the
        handle's at the end, at or above every entry returned — never goes down for a
        reader; the entries returned are every one from `first` to the last returned
        (to the ledger's end with `end`), which the checkers hold it to."""
        wait_ms = _optional(value, "wait_ms", 0)  # 0: no long poll (the follower paces)
        window_ms = _optional(value, "window_ms", FOLLOW_WINDOW_MS)
        rh = await self._tail_reader(ledger)
        entries: list[list[Any]] = []
        end = False
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(window_ms / 1000):
                async for entry, data in rh.follow(first, wait_ms=wait_ms):
                    entries.append([entry, data.decode()])
                end = True
        return {"lac": rh.last_add_confirmed, "entries": entries, "end": end}

    async def read_lac(self, value: dict[str, Any]) -> dict[str, Any]:
        (ledger,) = _require(value, ledger=(int, str))
        _, lac = await self._tail_lac(ledger, value)
        return {"lac": lac}

    async def _tail_lac(self, ledger: Any, value: dict[str, Any]) -> tuple[Any, int]:
        """The LAC through the ledger's kept tail handle; with `wait_ms`, a long poll.

        One read_lac at a time per handle: the handle sets its LAC to what its own call
        learned, so two overlapping calls could leave the lower one behind."""
        wait_ms = _optional(value, "wait_ms", 0) or None
        rh = await self._tail_reader(ledger)
        async with self.reader_locks.setdefault(ledger, asyncio.Lock()):
            return rh, await rh.read_lac(wait_ms=wait_ms)

    async def _tail_reader(self, ledger: Any) -> Any:
        """One non-recovering read handle per ledger, kept open like a tailing reader's.

        A handle's LAC never goes down, but two fresh handles may each reach quorum
        coverage through different bookies and learn different LACs; reusing the handle is
        what makes one reader's view of the LAC monotonic. Opening is shared as a task so
        two workers asking at once get the same handle."""
        task = self.readers.get(ledger)
        if task is None:
            opening = self.bk.open_ledger(ledger, password=self.password, recovery=False)
            task = self.readers[ledger] = asyncio.ensure_future(opening)
        try:
            return await asyncio.shield(task)
        except Exception:
            if self.readers.get(ledger) is task:
                del self.readers[ledger]
            raise

    async def close(self, value: dict[str, Any]) -> dict[str, Any]:
        _require(value, ledger=(int, str))
        lh = self._writer(value, pop=True)
        await lh.close()
        return {"last_entry": lh.metadata.last_entry_id, "ensembles": ensembles(lh.metadata)}

    async def recover(self, value: dict[str, Any]) -> dict[str, Any]:
        (ledger,) = _require(value, ledger=(int, str))
        rh = await self.bk.open_ledger(ledger, password=self.password, recovery=True)
        return {"last_entry": rh.last_add_confirmed, "ensembles": ensembles(rh.metadata)}

    async def audit(self, value: dict[str, Any]) -> dict[str, Any]:
        """The copies of a closed ledger (BookKeeper's ledger checker): every entry up to
        the last, asked of every bookie of its write set. `lacking` lists [entry, bookies
        that said "no such entry", bookies whose answer said nothing] for each entry some
        bookie lacks, which the checker judges against AQ; `divergent` lists [entry,
        {bookie: payload, null for a no-op}] for each entry whose copies differ."""
        (ledger,) = _require(value, ledger=(int, str))
        rh = await self.bk.open_ledger(ledger, password=self.password, recovery=False)
        metadata = rh.metadata
        if not metadata.closed:
            raise _NotClosed(f"ledger {ledger} is not closed: only a closed one can be audited")
        audit = await rh.audit_copies()
        return {
            "last_entry": metadata.last_entry_id,
            "wq": metadata.write_quorum,
            "aq": metadata.ack_quorum,
            "unbounded": metadata.unbounded,
            "lacking": [[entry, missing, unknown] for entry, missing, unknown in audit.lacking],
            "divergent": [
                [entry, {b: None if p is None else p.decode() for b, p in held.items()}]
                for entry, held in audit.divergent
            ],
        }


def _retrieved(call: asyncio.Task[Any]) -> None:
    """Mark a given-up call's outcome as seen: nobody awaits it any more, and an error it
    ends with is no news (asyncio would log it when the task is collected)."""
    if not call.cancelled():
        call.exception()


class _Refused(BKError):
    """Refused by the agent before any byte was sent, so it definitely did not happen."""

    def __init__(self, message: str) -> None:
        super().__init__(message, may_have_happened=False)


class _NotOurs(_Refused):
    """The op names a ledger this agent never opened for writing."""

    default_code = "ENOHANDLE"


class _NotClosed(_Refused):
    """An audit of a ledger still open: its copies may still change."""

    default_code = "ENOTCLOSED"


class _BadValue(_Refused):
    """The op's value is malformed (a controller bug, reported rather than guessed at)."""

    default_code = "EBADVALUE"


def ensembles(metadata: Any) -> list[list[Any]]:
    """The ledger's fragments as its metadata names them, `[[first_entry, [bookie id,
    …]], …]` (docs/history.md §2): the controller turns the ids into node names."""
    return [[first, list(bookies)] for first, bookies in metadata.ensembles]


def _writer_key(value: dict[str, Any]) -> Any:
    """A write handle's key: the ledger, or (ledger, term) for an unbounded ledger's."""
    return value["ledger"] if value.get("term") is None else (value["ledger"], value["term"])


def _optional(value: dict[str, Any], name: str, default: int) -> int:
    """An optional non-negative int field of an op value."""
    got = value.get(name, default)
    if type(got) is not int or got < 0:
        raise _BadValue(f"op value field {name!r} must be an int >= 0, got {got!r}")
    return got


def _require(value: dict[str, Any], **types: type | tuple[type, ...]) -> list[Any]:
    """The named fields of an op value, checked before anything is sent."""
    fields = []
    for name, expected in types.items():
        if not isinstance(value.get(name), expected):
            raise _BadValue(f"op value needs {name!r} of type {expected}, got {value.get(name)!r}")
        fields.append(value[name])
    return fields
