"""Reading and pairing histories (docs/history.md §1-3).

`read_ops` streams a `history.jsonl` file in chunks decoded by msgspec, so parsing a
million-op history costs less than the stdlib would; `index_history` pairs invocations
with completions and indexes what the checkers need in one pass. Both raise
`HistoryError` naming the line and what is wrong; the CLI maps it to exit 254.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

import msgspec

NEMESIS = "nemesis"
_CHUNK = 1 << 22
_SHOWN = 300  # characters of a malformed value quoted in an error
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
Int64 = Annotated[int, msgspec.Meta(ge=INT64_MIN, le=INT64_MAX)]
"""Every integer of a history is 64-bit (docs/history.md §1): ids, entries, times."""


class HistoryError(ValueError):
    """The history is malformed; the message names the line and what is wrong."""


class Value(msgspec.Struct, gc=False):
    """The fields of an op's value that the checkers read (spec §2-3); any others (a
    nemesis's targets and proof, say) are skipped on decode, which keeps a million-op
    history small and quick to decode. Missing fields are None."""

    ledger: Any = None
    payload: Any = None
    entry: Any = None
    stream: Any = None
    seq: Any = None
    mode: Any = None
    lac: Any = None
    entries: Any = None
    last_entry: Any = None
    wq: Any = None
    aq: Any = None
    lacking: Any = None
    divergent: Any = None
    unbounded: Any = None
    proof: Any = None  # a nemesis completion's (checkers/nemesis.py)
    ensembles: Any = None  # create, close, recover: [[first entry, [bookie…]], …]
    ensemble: Any = None  # create: the ensemble size
    after_heal: Any = None  # the progress check's ops (checkers/liveness.py)


class Op(msgspec.Struct, gc=False):
    """One history line, validated by type on decode."""

    index: Int64
    time: Int64
    type: Literal["invoke", "ok", "fail", "info"]
    process: Int64 | str
    f: str
    value: Value | None = None
    error: str | None = None
    node: str | None = None


class Call(msgspec.Struct, gc=False):
    """An invocation and its completion (`done` is None if it never completed: info).

    `key` orders calls by the position of their completion; calls never completed sort
    after the end of the history.
    """

    inv: Op
    done: Op | None
    type: str
    key: int

    @property
    def ops(self) -> list[int]:
        """History indices of the lines of this call, cited by anomaly cases."""
        return [self.inv.index] if self.done is None else [self.inv.index, self.done.index]


class Append(msgspec.Struct, gc=False):
    """An append call; `ledger`/`entry` are known from the ok value or the invoke."""

    payload: str
    ledger: Any
    entry: int | None
    type: str
    call: Call


class Read(msgspec.Struct, gc=False):
    """An ok `read` (entries and lac) or `read-lac` (entries None)."""

    ledger: Any
    mode: str
    lac: int
    entries: list[list[Any]] | None
    call: Call


@dataclass(slots=True)
class History:
    """Everything the checkers need, gathered in one pass over the history."""

    lines: int = 0
    end_time: int = 0  # `time` of the last line, ns
    calls: list[Call] = field(default_factory=list)  # client calls, completion order
    nodes: list[Call] = field(default_factory=list)  # the graph's: appends not failed, ok reads
    counts: dict[tuple[str, str], int] = field(default_factory=dict)  # (f, type) -> calls
    nemesis: list[Call] = field(default_factory=list)
    appends: dict[str, Append] = field(default_factory=dict)  # payload -> first append
    acked: dict[Any, list[Append]] = field(default_factory=dict)  # ledger -> ok appends
    reads: list[Read] = field(default_factory=list)  # ok reads and read-lacs, in order
    closed: dict[Any, list[Read]] = field(default_factory=dict)  # ledger -> closed reads
    closed_errors: dict[Any, str] = field(default_factory=dict)  # ledger -> last failed one's
    streams: dict[Any, tuple[Any, Any]] = field(default_factory=dict)  # ledger -> (s, seq)
    audits: list[Call] = field(default_factory=list)  # ok audits of a ledger's copies
    closings: dict[Any, list[Call]] = field(
        default_factory=dict
    )  # ledger -> closed reads, recovers
    ensembles: dict[Any, list[tuple[Call, list[list[Any]]]]] = field(default_factory=dict)
    sizes: dict[Any, int] = field(default_factory=dict)  # ledger -> ensemble size (create)
    ledgers: dict[Any, None] = field(default_factory=dict)  # every ledger, first-seen order
    memo: dict[str, Any] = field(default_factory=dict)  # derived data shared by checkers


_DECODER = msgspec.json.Decoder(Op)


def read_ops(path: str | Path) -> Iterator[Op]:
    """Yield the ops of a history file, in file order.

    A final line without a newline that is not JSON is a crash-truncated write: it is
    dropped with a warning. Any other bad line raises HistoryError with its number.
    """
    with open(path, "rb") as fh:
        line = 1
        rest = b""
        while chunk := fh.read(_CHUNK):
            buf = rest + chunk
            cut = buf.rfind(b"\n") + 1
            body, rest = buf[:cut], buf[cut:]
            if body:
                yield from _decode(body, line)
                line += body.count(b"\n")
        if rest:
            try:
                yield from _decode(rest, line)
            except HistoryError as exc:
                if isinstance(exc.__cause__, msgspec.ValidationError):
                    raise
                warnings.warn(
                    f"{path}: line {line} is truncated (crashed run?); ignored",
                    stacklevel=2,
                )


def _decode(body: bytes, first_line: int) -> list[Op]:
    """Decode whole lines at C speed; on error, find the culprit line for the message."""
    try:
        ops = _DECODER.decode_lines(body)
        if len(ops) == body.count(b"\n") + (not body.endswith(b"\n")):
            return ops
    except (msgspec.DecodeError, UnicodeDecodeError):
        pass
    for number, text in enumerate(body.split(b"\n")[: body.count(b"\n") or 1], first_line):
        try:
            _DECODER.decode(text)
        except UnicodeDecodeError as exc:
            raise HistoryError(f"line {number}: not UTF-8: {exc}") from exc
        except msgspec.DecodeError as exc:
            what = "not an op" if isinstance(exc, msgspec.ValidationError) else "bad JSON"
            raise HistoryError(f"line {number}: {what}: {exc}") from exc
    last = first_line + body.count(b"\n") - 1
    raise HistoryError(f"lines {first_line}-{last}: not one op per line")


def ops_from_dicts(ops: Iterable[dict[str, Any] | Op]) -> Iterator[Op]:
    """Validate in-memory op dicts (tests, other producers) as the file reader would."""
    for number, op in enumerate(ops, 1):
        try:
            yield op if isinstance(op, Op) else msgspec.convert(op, Op)
        except msgspec.ValidationError as exc:
            raise HistoryError(f"op {number}: not an op: {exc}") from exc


def index_history(ops: Iterable[Op]) -> History:
    """Pair invocations with completions (spec §1) and index appends, reads and ledgers."""
    h = History()
    outstanding: dict[Any, Op] = {}
    last_index = -1
    line = 0
    for line, op in enumerate(ops, 1):
        if op.index <= last_index:
            raise HistoryError(f"line {line}: index {op.index} does not increase")
        last_index = op.index
        process = op.process
        if type(process) is str and process != NEMESIS:
            raise HistoryError(f"line {line}: process {process!r} is neither an int nor nemesis")
        kind = op.type
        if kind == "invoke":
            if process in outstanding:
                raise HistoryError(
                    f"line {line}: process {process} invokes while op "
                    f"{outstanding[process].index} is still outstanding"
                )
            outstanding[process] = op
            continue
        inv = outstanding.pop(process, None)
        if inv is None:
            raise HistoryError(f"line {line}: {kind} of process {process} without an invoke")
        if inv.f != op.f:
            raise HistoryError(f"line {line}: completes {op.f!r} but op {inv.index} is {inv.f!r}")
        _add(h, Call(inv, op, kind, op.index), line)
    h.lines = line
    if line:
        h.end_time = op.time
    for inv in sorted(outstanding.values(), key=lambda o: o.index):
        _add(h, Call(inv, None, "info", line + inv.index), line)
    return h


def _add(h: History, call: Call, line: int) -> None:
    """Index one call; a missing or mistyped value field is a HistoryError."""
    inv = call.inv
    f = inv.f
    if inv.process == NEMESIS:
        h.nemesis.append(call)
        return
    h.calls.append(call)
    kind = call.type
    counted = (f, kind)
    h.counts[counted] = h.counts.get(counted, 0) + 1
    try:
        if f == "append":  # most ops: inlined
            payload = inv.value.payload
            if type(payload) is not str:
                raise TypeError(f"payload {payload!r} is not a string")
            asked = inv.value.ledger
            if asked is not None:
                _check_ledger(asked)
            if kind == "ok":
                done = call.done.value
                ledger, entry = done.ledger, done.entry
                if not (_int64(entry) and _ledger_id(ledger)):
                    raise TypeError(f"ledger {ledger!r} or entry {entry!r} is mistyped")
                a = Append(payload, ledger, entry, kind, call)
                acked = h.acked.get(ledger)
                if acked is None:
                    h.acked[ledger] = [a]
                    h.ledgers[ledger] = None
                    _stream(h, ledger, done)
                else:
                    acked.append(a)
            else:
                a = Append(payload, asked, None, kind, call)
                if asked is not None:
                    h.ledgers[asked] = None
            if payload not in h.appends:
                h.appends[payload] = a
            if kind != "fail":
                h.nodes.append(call)
        elif f in ("read", "read-lac"):
            _read(h, call, kind)
        elif f == "audit" and kind == "ok":
            _audit(h, call)
        elif f == "create" and kind == "ok":
            done = call.done.value
            _check_ledger(done.ledger)
            h.ledgers[done.ledger] = None
            _stream(h, done.ledger, done)
            if done.ensemble is not None:
                if not _int64(done.ensemble):
                    raise TypeError(f"ensemble size {done.ensemble!r} is not a 64-bit int")
                h.sizes[done.ledger] = done.ensemble
            _ensembles(h, done.ledger, call)
        elif f in ("close", "recover"):
            ledger = _check_ledger(call.inv.value.ledger)
            if f == "recover":
                h.closings.setdefault(ledger, []).append(call)
            if kind == "ok":
                _ensembles(h, ledger, call)
    except (KeyError, TypeError, AttributeError, ValueError) as exc:
        why = repr(exc) if len(repr(exc)) <= _SHOWN else repr(exc)[:_SHOWN] + "…"
        raise HistoryError(
            f"line {line}: op {call.ops[-1]} ({f}) has a malformed value: {why}"
        ) from exc


def _read(h: History, call: Call, kind: str) -> None:
    ledger = _check_ledger(call.inv.value.ledger)
    h.ledgers[ledger] = None
    if call.inv.f == "read" and call.inv.value.mode == "closed":
        h.closings.setdefault(ledger, []).append(call)
    if kind != "ok":
        if call.inv.value.mode == "closed":
            h.closed_errors[ledger] = (call.done.error if call.done else None) or kind
        return
    done = call.done.value
    lac = done.lac
    if not _int64(lac):
        raise TypeError(f"lac {lac!r} is not a 64-bit int")
    if call.inv.f == "read-lac":
        h.reads.append(Read(ledger, "lac", lac, None, call))
        return
    mode = call.inv.value.mode
    entries = done.entries
    if mode not in ("tail", "closed") or type(entries) is not list:
        raise TypeError(f"mode {mode!r} or entries {entries!r} is wrong")
    for e, p in entries:
        if not _int64(e) or type(p) is not str:
            raise TypeError(f"entry {[e, p]!r} is not [64-bit int, str]")
    r = Read(ledger, mode, lac, entries, call)
    h.reads.append(r)
    h.nodes.append(call)
    if mode == "closed":
        h.closed.setdefault(ledger, []).append(r)


def _audit(h: History, call: Call) -> None:
    """An ok audit: a ledger, its last entry, WQ and AQ, [entry, missing, unknown]s, and
    [entry, {bookie: payload or null}]s and whether the ledger is unbounded (both absent
    from histories recorded before the audit compared copies)."""
    done = call.done.value
    _check_ledger(done.ledger)
    numbers = (done.last_entry, done.wq, done.aq)
    if not all(map(_int64, numbers)) or type(done.lacking) is not list:
        raise TypeError(f"last_entry, wq, aq {numbers!r} or lacking {done.lacking!r} is wrong")
    for lack in done.lacking:
        if not (
            type(lack) is list
            and len(lack) == 3
            and _int64(lack[0])
            and all(type(b) is list and all(type(x) is str for x in b) for b in lack[1:])
        ):
            raise TypeError(f"lacking copy {lack!r} is not [entry, [bookie…], [bookie…]]")
    if done.unbounded not in (None, True, False):
        raise TypeError(f"unbounded {done.unbounded!r} is not a boolean")
    if done.divergent is not None and type(done.divergent) is not list:
        raise TypeError(f"divergent {done.divergent!r} is not a list")
    for copies in done.divergent or []:
        if not (
            type(copies) is list
            and len(copies) == 2
            and _int64(copies[0])
            and type(copies[1]) is dict
            and all(p is None or type(p) is str for p in copies[1].values())
        ):
            raise TypeError(f"divergent copies {copies!r} are not [entry, {{bookie: payload}}]")
    h.audits.append(call)


def _ensembles(h: History, ledger: Any, call: Call) -> None:
    """Remember the fragments an ok create, close or recover reports (absent from older
    histories): [[first entry, [bookie name…]], …]."""
    fragments = call.done.value.ensembles
    if fragments is None:
        return
    if type(fragments) is not list or not all(
        type(fragment) is list
        and len(fragment) == 2
        and _int64(fragment[0])
        and type(fragment[1]) is list
        and all(type(b) is str for b in fragment[1])
        for fragment in fragments
    ):
        raise TypeError(f"ensembles {fragments!r} are not [[first entry, [bookie…]], …]")
    h.ensembles.setdefault(ledger, []).append((call, fragments))


def _int64(n: Any) -> bool:
    return type(n) is int and INT64_MIN <= n <= INT64_MAX


def _ledger_id(ledger: Any) -> bool:
    """A ledger id: a 64-bit int, or a string (a BP-35 qualified name)."""
    return type(ledger) is str or _int64(ledger)


def _check_ledger(ledger: Any) -> Any:
    if not _ledger_id(ledger):
        raise TypeError(f"ledger {ledger!r} is neither a 64-bit int nor a string")
    return ledger


def _stream(h: History, ledger: Any, value: Value) -> None:
    """Remember which stream a ledger belongs to, and its position (seq) in it."""
    if type(value.stream) not in (type(None), str, int):
        raise TypeError(f"stream {value.stream!r} is neither a string nor an int")
    if value.seq is not None and not _int64(value.seq):
        raise TypeError(f"seq {value.seq!r} is not a 64-bit int")
    if value.stream is not None and h.streams.get(ledger, (None, None))[1] is None:
        h.streams[ledger] = (value.stream, value.seq)
