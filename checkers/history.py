"""Reading and pairing histories (docs/history.md §1-3).

`read_ops` streams a `history.jsonl` file in chunks decoded by msgspec, so parsing a
million-op history costs less than the stdlib would; `index_history` pairs invocations
with completions and indexes what the checkers need in one pass. Both raise
`HistoryError` naming the line and what is wrong; the CLI maps it to exit 254.
"""

from __future__ import annotations

import warnings
from array import array
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from itertools import chain, repeat
from operator import itemgetter
from pathlib import Path
from typing import Annotated, Any, Literal

import msgspec
import numpy as np

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
    entries: list[tuple[Int64, str]] | None = None  # a read's, checked at C speed on decode
    first: Any = msgspec.field(default=None, name="from")  # a read's first entry asked for
    end: Any = None  # a follow read that followed its ledger to its closed end
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


class Append(Call, gc=False):
    """A client append call, with its payload and where it went (`ledger`/`entry` from
    the ok value, else the ledger the invoke asked for). It is its own Call, not a
    second object beside one: a million-op history holds about half a million appends,
    and every walk over them (finders, stream, graph) reads the call's fields too."""

    payload: str = ""
    ledger: Any = None
    entry: int | None = None
    first: bool = False  # the first append of its payload: `History.appends` holds it

    @property
    def call(self) -> Call:
        return self


class Read(msgspec.Struct, gc=False):
    """An ok `read` (entries and lac) or `read-lac` (entries None); `first` is the entry a
    read asked to start at (`from`, default 0), `end` whether a `follow` read followed its
    ledger to its closed end."""

    ledger: Any
    mode: str
    lac: int
    entries: list[tuple[int, str]] | None
    call: Call
    first: int = 0
    end: bool = False


@dataclass(slots=True)
class History:
    """Everything the checkers need, gathered in one pass over the history.

    The fields up to `memo` are a *segment's*: what the per-segment checkers (ledger,
    stream, graph) read, dropped at each cut of a streaming check (`checkers.stream_check`).
    The fields after it are the whole history's, kept small (a few per ledger, nemesis op
    or audit, and 16 bytes per ok call for perf), and read by the other checkers.
    """

    calls: list[Call] = field(default_factory=list)  # client calls, completion order
    nodes: list[Call] = field(default_factory=list)  # the graph's: appends not failed, ok reads
    appends: dict[str, Append] = field(default_factory=dict)  # payload -> first append
    failed: set[str] = field(default_factory=set)  # payloads whose first append failed
    acked: dict[Any, list[Append]] = field(default_factory=dict)  # ledger -> ok appends
    reads: list[Read] = field(default_factory=list)  # ok reads and read-lacs, in order
    closed: dict[Any, list[Read]] = field(default_factory=dict)  # ledger -> closed reads
    streams: dict[Any, tuple[Any, Any]] = field(default_factory=dict)  # ledger -> (s, seq)
    touched: dict[Any, None] = field(default_factory=dict)  # ledgers its client ops name
    memo: dict[str, Any] = field(default_factory=dict)  # derived data shared by checkers
    # -- the whole history's
    lines: int = 0
    end_time: int = 0  # `time` of the last line, ns
    first_time: int | None = None  # earliest invoke `time`, ns
    client_calls: int = 0
    counts: dict[tuple[str, str], int] = field(default_factory=dict)  # (f, type) -> calls
    ok_times: dict[str, tuple[array[int], array[int]]] = field(
        default_factory=dict
    )  # f -> (invoke times, completion times) of its ok calls, ns
    nemesis: list[Call] = field(default_factory=list)
    acked_counts: dict[Any, int] = field(default_factory=dict)  # ledger -> ok appends
    checked: dict[Any, None] = field(default_factory=dict)  # ledgers with an ok closed read
    closed_errors: dict[Any, str] = field(default_factory=dict)  # ledger -> last failed one's
    audits: list[Call] = field(default_factory=list)  # ok audits of a ledger's copies
    closings: dict[Any, list[Call]] = field(
        default_factory=dict
    )  # ledger -> closed reads, recovers
    ensembles: dict[Any, list[tuple[Call, list[list[Any]]]]] = field(default_factory=dict)
    sizes: dict[Any, int] = field(default_factory=dict)  # ledger -> ensemble size (create)
    ledgers: dict[Any, None] = field(default_factory=dict)  # every ledger, first-seen order
    progress: list[Call] = field(default_factory=list)  # the progress check's (`after_heal`)

    def drop_segment(self) -> None:
        """Forget the segment's fields (a cut of a streaming check). `calls` goes last,
        so that the calls and their ops are freed in completion order, which is about
        the order they lie in memory: freed through `acked`, ledger by ledger, they
        would be visited across the whole segment's memory (4x slower for 1M ops)."""
        self.memo, self.reads, self.nodes, self.acked, self.appends = {}, [], [], {}, {}
        self.failed, self.closed, self.streams, self.touched = set(), {}, {}, {}
        self.calls = []


READ_MODES = ("tail", "closed", "follow")
"""docs/history.md §2: a `read`'s modes."""
_DECODER = msgspec.json.Decoder(Op)
_PAYLOAD = itemgetter(1)  # of an [entry, payload] pair


def read_ops(path: str | Path) -> Iterator[Op]:
    """Yield the ops of a history file, in file order.

    A final line without a newline that is not JSON is a crash-truncated write: it is
    dropped with a warning. Any other bad line raises HistoryError with its number.
    """
    with open(path, "rb") as fh:
        line = 1
        rest = b""
        while chunk := fh.read(_CHUNK):
            buf = rest + chunk if rest else chunk
            cut = buf.rfind(b"\n") + 1
            rest = buf[cut:]
            if cut:  # its whole lines, decoded in place (a view, not a copy)
                ops = _decode(memoryview(buf)[:cut], line)
                yield from ops
                line += len(ops)
        if rest:
            try:
                yield from _decode(memoryview(rest), line)
            except HistoryError as exc:
                if isinstance(exc.__cause__, msgspec.ValidationError):
                    raise
                warnings.warn(
                    f"{path}: line {line} is truncated (crashed run?); ignored",
                    stacklevel=2,
                )


def _decode(view: memoryview, first_line: int) -> list[Op]:
    """Decode whole lines at C speed, one op a line (`view` starts at its buffer's start);
    on error, find the culprit line for the message."""
    try:
        ops = _DECODER.decode_lines(view)
        if len(ops) == view.obj.count(b"\n", 0, len(view)) + (view[-1:] != b"\n"):
            return ops
    except (msgspec.DecodeError, UnicodeDecodeError):
        pass
    body = bytes(view)
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


class Entangled(Exception):
    """An op refers to a ledger, stream or payload of a segment already checked and
    dropped: the cut before it was not clean, so the streaming check starts again without
    cuts (`checkers.stream_check`)."""


class Digests:
    """A set of payloads held as 8-byte digests (`hash(payload)`, fixed for the process)
    in sorted int64 runs, each at least twice as long as the next: a soak retires
    millions of payloads, and a set of str would take about 90 bytes each. Payloads are
    added and looked up a segment at a time, so both run at numpy's speed: a lookup is
    one binary search per run, and each digest is merged into a longer run about
    log2(history / segment) times.

    A collision errs one way only: a payload never seen may look retired. That raises
    Entangled, and the check starts again without cuts, so it costs time, never a false
    anomaly or a missed one (with 10 million payloads, under one chance in 10^5 a run)."""

    __slots__ = ("runs",)

    def __init__(self) -> None:
        self.runs: list[np.ndarray] = []

    def __len__(self) -> int:
        return sum(map(len, self.runs))

    @staticmethod
    def of(payloads: Iterable[str]) -> np.ndarray:
        """Payloads' digests, sorted and distinct: what `holds_any` and `add` take."""
        return np.unique(np.fromiter(map(hash, payloads), np.int64))

    def holds_any(self, digests: np.ndarray) -> bool:
        """Whether any of `digests` (from `of`) is here."""
        return any(map(_holds, self.runs, repeat(digests)))

    def add(self, digests: np.ndarray) -> None:
        """Add `digests` (from `of`) as a run; merge runs until each is at least twice
        as long as the next."""
        if not len(digests):
            return
        runs = self.runs
        runs.append(digests)
        while len(runs) > 1 and len(runs[-2]) < 2 * len(runs[-1]):
            merged = np.concatenate((runs.pop(), runs.pop()))
            merged.sort(kind="stable")  # two sorted runs: one merge pass
            runs.append(merged)


def _holds(run: np.ndarray, digests: np.ndarray) -> bool:
    """Whether the sorted `run` holds any of `digests`."""
    at = run.searchsorted(digests)
    np.minimum(at, len(run) - 1, out=at)
    return bool((run[at] == digests).any())


@dataclass(slots=True)
class Retired:
    """What the segments checked so far referred to; no later op may refer to it."""

    ledgers: set[Any] = field(default_factory=set)
    streams: set[Any] = field(default_factory=set)
    payloads: Digests = field(default_factory=Digests)

    def ledger(self, ledger: Any) -> None:
        if ledger in self.ledgers:
            raise Entangled(f"ledger {ledger!r} of an earlier segment")


class Indexer:
    """Pairs invocations with completions (spec §1) and indexes appends, reads and
    ledgers into `h`; `index_history` feeds it a whole history. A streaming check cuts
    where no client call is outstanding: `cut` drops the segment's fields and remembers
    what they referred to, so that a later op that refers to any of it raises
    `Entangled`."""

    def __init__(self) -> None:
        self.h = History()
        self.outstanding: dict[Any, Op] = {}
        self.busy = 0  # client calls outstanding
        self.last_index = -1
        self.line = 0
        self.last: Op | None = None
        self.retired: Retired | None = None

    def feed(
        self,
        ops: Iterable[Op],
        segment_lines: int | None = None,
        fold: Callable[[History], None] | None = None,
    ) -> None:
        """Pair and index `ops`, the pairing state in locals (it runs once per line).

        With `segment_lines`, once a segment holds that many lines it is cut at the first
        line where no client call is outstanding and every ledger its client ops named
        has an ok closed read: `fold` checks the segment, then `cut` drops it."""
        h, outstanding, add = self.h, self.outstanding, self._add
        line, last_index, busy, op = self.line, self.last_index, self.busy, self.last
        start = line
        try:
            for op in ops:
                line += 1
                index = op.index
                if index <= last_index:
                    raise HistoryError(f"line {line}: index {index} does not increase")
                last_index = index
                process = op.process
                if type(process) is str and process != NEMESIS:
                    raise HistoryError(
                        f"line {line}: process {process!r} is neither an int nor nemesis"
                    )
                kind = op.type
                if kind == "invoke":
                    if process in outstanding:
                        raise HistoryError(
                            f"line {line}: process {process} invokes while op "
                            f"{outstanding[process].index} is still outstanding"
                        )
                    outstanding[process] = op
                    if process != NEMESIS:
                        busy += 1
                else:
                    inv = outstanding.pop(process, None)
                    if inv is None:
                        raise HistoryError(
                            f"line {line}: {kind} of process {process} without an invoke"
                        )
                    if inv.f != op.f:
                        raise HistoryError(
                            f"line {line}: completes {op.f!r} but op {inv.index} is {inv.f!r}"
                        )
                    if process != NEMESIS:
                        busy -= 1
                    add(inv, op, kind, index, line)
                if (
                    busy == 0
                    and segment_lines is not None
                    and line - start >= segment_lines
                    and len(h.closed) == len(h.touched)  # closed ⊆ touched: every one closed
                ):
                    if fold is not None:
                        fold(h)
                    self.cut()
                    start = line
        finally:
            self.line, self.last_index, self.busy, self.last = line, last_index, busy, op

    def cut(self) -> None:
        """Drop the segment's fields; remember the ledgers, streams and payloads it
        referred to."""
        h = self.h
        retired = self.retired = self.retired or Retired()
        retired.ledgers.update(h.touched)
        retired.streams.update(stream for stream, _ in h.streams.values())
        self._retire_payloads(keep=True)
        self._count_segment()
        h.drop_segment()

    def finish(self) -> History:
        """Index the calls never completed (as info, after the end) and return `h`."""
        h, line = self.h, self.line
        h.lines = line
        if self.last is not None:
            h.end_time = self.last.time
        for inv in sorted(self.outstanding.values(), key=lambda o: o.index):
            self._add(inv, None, "info", line + inv.index, line)
        self.outstanding.clear()
        if self.retired is not None:
            self._retire_payloads(keep=False)
        self._count_segment()
        return h

    def _retire_payloads(self, keep: bool) -> None:
        """Raise Entangled if the segment appended or read a payload of an earlier one
        (checked here, once a segment, not op by op: numpy does a segment's lookups in a
        few calls); with `keep`, remember the segment's payloads for the next ones."""
        h, retired = self.h, self.retired
        read = (map(_PAYLOAD, r.entries) for r in h.reads if r.entries)
        # what the reads returned was mostly appended in the segment: digesting it again
        # (the hash is cached) costs less than finding which was not
        digests = Digests.of(chain(h.appends, *read))
        if retired.payloads.holds_any(digests):
            raise Entangled("a payload of an earlier segment, appended or read again")
        if keep:
            retired.payloads.add(digests)

    def _count_segment(self) -> None:
        """Add the segment's client calls, and its ok appends per ledger, to the whole
        history's counts (once per segment, not once per call; a ledger is in one segment
        only)."""
        h = self.h
        h.client_calls += len(h.calls)
        for ledger, acked in h.acked.items():
            h.acked_counts[ledger] = h.acked_counts.get(ledger, 0) + len(acked)

    def _add(self, inv: Op, done: Op | None, kind: str, key: int, line: int) -> None:
        """Index one call; a missing or mistyped value field is a HistoryError."""
        h = self.h
        f, time, value = inv.f, inv.time, inv.value
        first_time = h.first_time
        if first_time is None or time < first_time:
            h.first_time = time
        if inv.process == NEMESIS:
            h.nemesis.append(Call(inv, done, kind, key))
            return
        counts = h.counts
        counted = (f, kind)
        counts[counted] = counts.get(counted, 0) + 1
        retired = self.retired
        try:
            if kind == "ok":
                times = h.ok_times.get(f)
                if times is None:
                    times = h.ok_times[f] = (array("q"), array("q"))
                times[0].append(time)
                times[1].append(done.time)
            if f == "append":  # most ops: inlined, type checks too
                payload, ledger = value.payload, value.ledger
                if type(payload) is not str:
                    raise TypeError(f"payload {payload!r} is not a string")
                if ledger is not None and type(ledger) is not str:
                    _check_ledger(ledger)
                entry = None
                if kind == "ok":
                    got = done.value
                    ledger, entry = got.ledger, got.entry
                    if not (
                        type(entry) is int
                        and INT64_MIN <= entry <= INT64_MAX
                        and (type(ledger) is str or _int64(ledger))
                    ):
                        raise TypeError(f"ledger {ledger!r} or entry {entry!r} is mistyped")
                a = Append(inv, done, kind, key, payload, ledger, entry)
                h.calls.append(a)
                if value.after_heal is not None:
                    h.progress.append(a)
                if kind == "ok":
                    acked = h.acked.get(ledger)
                    if acked is None:
                        if retired is not None:
                            retired.ledger(ledger)
                        h.touched[ledger] = None
                        h.acked[ledger] = [a]
                        h.ledgers[ledger] = None
                        _stream(h, ledger, got, retired)
                    else:
                        acked.append(a)
                elif ledger is not None:
                    h.ledgers[ledger] = None
                    h.touched[ledger] = None
                if h.appends.setdefault(payload, a) is a:  # the payload's first append
                    a.first = True
                    if kind == "fail":
                        h.failed.add(payload)
                if kind != "fail":
                    h.nodes.append(a)
                return
            call = Call(inv, done, kind, key)
            h.calls.append(call)
            if value is not None and value.after_heal is not None:
                h.progress.append(call)
            if f in ("read", "read-lac"):
                _read(h, call, kind, retired)
            elif f == "audit" and kind == "ok":
                _audit(h, call)
            elif f == "create" and kind == "ok":
                got = done.value
                _check_ledger(got.ledger)
                h.ledgers[got.ledger] = None
                h.touched[got.ledger] = None
                _stream(h, got.ledger, got, retired)
                if got.ensemble is not None:
                    if not _int64(got.ensemble):
                        raise TypeError(f"ensemble size {got.ensemble!r} is not a 64-bit int")
                    h.sizes[got.ledger] = got.ensemble
                _ensembles(h, got.ledger, call)
            elif f in ("close", "recover"):
                ledger = _check_ledger(call.inv.value.ledger)
                if f == "recover":
                    h.closings.setdefault(ledger, []).append(call)
                if kind == "ok":
                    _ensembles(h, ledger, call)
        except (KeyError, TypeError, AttributeError, ValueError) as exc:
            why = repr(exc) if len(repr(exc)) <= _SHOWN else repr(exc)[:_SHOWN] + "…"
            raise HistoryError(
                f"line {line}: op {(done or inv).index} ({f}) has a malformed value: {why}"
            ) from exc


def index_history(ops: Iterable[Op]) -> History:
    """Pair invocations with completions (spec §1) and index appends, reads and ledgers."""
    indexer = Indexer()
    indexer.feed(ops)
    return indexer.finish()


def _read(h: History, call: Call, kind: str, retired: Retired | None) -> None:
    ledger = _check_ledger(call.inv.value.ledger)
    h.ledgers[ledger] = None
    h.touched[ledger] = None
    if call.inv.f == "read" and call.inv.value.mode == "closed":
        # kept for the whole history (availability), so without the entries it returned
        done = call.done and msgspec.structs.replace(call.done, value=None)
        h.closings.setdefault(ledger, []).append(Call(call.inv, done, call.type, call.key))
    if kind != "ok":
        if call.inv.value.mode == "closed":
            h.closed_errors[ledger] = (call.done.error if call.done else None) or kind
        return
    done = call.done.value
    lac = done.lac
    if not _int64(lac):
        raise TypeError(f"lac {lac!r} is not a 64-bit int")
    if retired is not None:
        retired.ledger(ledger)
    if call.inv.f == "read-lac":
        h.reads.append(Read(ledger, "lac", lac, None, call))
        return
    mode = call.inv.value.mode
    entries = done.entries
    if mode not in READ_MODES or type(entries) is not list:
        raise TypeError(f"mode {mode!r} or entries {entries!r} is wrong")
    first = 0 if done.first is None else done.first
    if not _int64(first) or done.end not in (None, True, False):
        raise TypeError(f"from {first!r} or end {done.end!r} is wrong")
    r = Read(ledger, mode, lac, entries, call, first, done.end is True)
    h.reads.append(r)
    h.nodes.append(call)
    if mode == "closed":
        h.closed.setdefault(ledger, []).append(r)
        h.checked[ledger] = None


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


def _stream(h: History, ledger: Any, value: Value, retired: Retired | None) -> None:
    """Remember which stream a ledger belongs to, and its position (seq) in it."""
    if type(value.stream) not in (type(None), str, int):
        raise TypeError(f"stream {value.stream!r} is neither a string nor an int")
    if value.seq is not None and not _int64(value.seq):
        raise TypeError(f"seq {value.seq!r} is not a 64-bit int")
    if value.stream is not None and retired is not None:
        retired.ledger(ledger)
        if value.stream in retired.streams:
            raise Entangled(f"stream {value.stream!r} of an earlier segment")
    if value.stream is not None and h.streams.get(ledger, (None, None))[1] is None:
        h.streams[ledger] = (value.stream, value.seq)
