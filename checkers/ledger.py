"""Per-ledger anomalies (docs/history.md §4), one linear scan each.

Each finder takes the indexed history and the authoritative content of every checked
ledger, and yields anomaly cases; its docstring is the definition it checks. `info`
appends never appear in a definition except as payloads that may legitimately be read.
"""

from __future__ import annotations

from collections.abc import Iterator
from itertools import compress, repeat
from operator import is_, itemgetter
from typing import Any, NamedTuple

from checkers.history import Append, Call, History, Read
from checkers.result import NEXT_PHASE, UNKNOWN, Case, case, collect

_ENTRY, _PAYLOAD = itemgetter(0), itemgetter(1)  # of an [entry, payload] pair


class Content(NamedTuple):
    """What the first `closed` read of a ledger returned: the authoritative content."""

    last: int
    at: dict[int, str]
    read: Read


def authoritative(h: History) -> dict[Any, Content]:
    """Ledger -> its authoritative content; ledgers without a closed read are unchecked.

    Computed once per history and shared by the checkers that need it.
    """
    auth = h.memo.get("authoritative")
    if auth is None:
        auth = h.memo["authoritative"] = {
            ledger: Content(reads[0].lac, {e: p for e, p in reads[0].entries}, reads[0])
            for ledger, reads in h.closed.items()
        }
    return auth


EntryOrder = tuple[list[int], list[Append | None]]
"""A ledger's entry ids in increasing order, and the first append of each one's payload
(None: no append carried it)."""


def in_entry_order(at: dict[int, str], appends: dict[str, Append]) -> EntryOrder:
    entries = sorted(at)
    return entries, list(map(appends.get, map(at.__getitem__, entries)))


def content_order(h: History, auth: dict[Any, Content]) -> dict[Any, EntryOrder]:
    """Checked ledger -> its authoritative content in entry order, with the appends; shared
    by the stream and graph checkers, which both walk it."""
    if "content_order" not in h.memo:
        _compare_acks(h, auth)
    return h.memo["content_order"]


def unmatched(h: History, auth: dict[Any, Content]) -> dict[Any, list[Append]]:
    """Checked ledger -> its ok appends, in order, whose entry in the authoritative
    content does not hold their payload: the lost appends, the divergences from the
    closed read and the graph's rw edges from it are all among these."""
    if "unmatched" not in h.memo:
        _compare_acks(h, auth)
    return h.memo["unmatched"]


def _compare_acks(h: History, auth: dict[Any, Content]) -> None:
    """Compare every ok append with its ledger's authoritative content, once per history
    (`unmatched`), and put the content in entry order (`content_order`): an ack that
    matches and is its payload's first append is that entry's append, so only the other
    entries are looked up in `h.appends` (a dict of every payload: a look-up per entry
    there cost more than the comparison)."""
    missing: dict[Any, list[Append]] = {}
    ordered: dict[Any, EntryOrder] = {}
    for ledger, content in auth.items():
        at = content.at
        lost: list[Append] = []
        writer: dict[int, Append] = {}
        for a in h.acked.get(ledger, ()):
            if at.get(a.entry) != a.payload:
                lost.append(a)
            elif a.first:
                writer[a.entry] = a
        entries = sorted(at)
        apps: list[Append | None] = list(map(writer.get, entries))
        if len(writer) < len(entries):  # the others, found at C speed
            for i in compress(range(len(apps)), map(is_, apps, repeat(None))):
                apps[i] = h.appends.get(at[entries[i]])
        ordered[ledger] = entries, apps
        missing[ledger] = lost
    h.memo["content_order"] = ordered
    h.memo["unmatched"] = {ledger: missing[ledger] for ledger in h.acked if ledger in auth}


def _entry_reads(h: History) -> Iterator[Read]:
    return (r for r in h.reads if r.entries is not None)


def lost_append(h: History, auth: dict[Any, Content]) -> Iterator[Case]:
    """An ok append (L, e, p) where L has authoritative content and p is not at entry e."""
    for ledger, missing in unmatched(h, auth).items():
        content = auth[ledger]
        at = content.at
        for a in missing:
            got = at.get(a.entry)
            there = f"no entry {a.entry}" if got is None else f"{got!r} there"
            yield case(
                f"the append of {a.payload!r} was acknowledged at entry {a.entry} of "
                f"ledger {ledger}, but its closed read (op {content.read.call.inv.index}) "
                f"has {there}.",
                a.call.ops + content.read.call.ops,
                ledger=ledger,
                entry=a.entry,
                payload=a.payload,
            )


def truncated_ledger(h: History, auth: dict[Any, Content]) -> Iterator[Case]:
    """L's authoritative last entry id is below the largest e of any ok append on L."""
    missing, ordered = unmatched(h, auth), content_order(h, auth)
    for ledger, acked in h.acked.items():
        content = auth.get(ledger)
        if content is None:
            continue
        entries = ordered[ledger][0]
        # an ack beyond the last entry can match the content only if the closed read
        # returned entries beyond it too; else it is among the unmatched ones
        maybe = acked if entries and entries[-1] > content.last else missing[ledger]
        beyond = [a for a in maybe if a.entry > content.last]
        if beyond:
            top = max(beyond, key=lambda a: a.entry)
            yield case(
                f"ledger {ledger} was closed at entry {content.last}, but {len(beyond)} "
                f"append(s) beyond it were acknowledged, up to entry {top.entry}.",
                [i for a in beyond for i in a.call.ops] + content.read.call.ops,
                ledger=ledger,
                entry=top.entry,
                last_entry=content.last,
            )


def divergence(h: History, auth: dict[Any, Content]) -> Iterator[Case]:
    """Two reads, or a read and an ok append, give different payloads for the same (L, e);
    or two closed reads of L report different last entry ids.

    Observations are compared with the authoritative content where it has the entry,
    else with the first read that returned it.
    """
    first: dict[Any, dict[int, tuple[str, Read]]] = {}
    for r in _entry_reads(h):
        content = auth.get(r.ledger)
        if content is not None and r is content.read:
            continue
        at = content.at if content is not None else {}
        others = first.setdefault(r.ledger, {})
        for e, p in r.entries:
            q = at.get(e)
            if q is not None:
                if q != p:
                    yield _diverged(r.ledger, e, (q, content.read), p, "a read", r.call)
            elif (seen := others.get(e)) is None:
                others[e] = (p, r)
            elif seen[0] != p:
                yield _diverged(r.ledger, e, seen, p, "a read", r.call)
    yield NEXT_PHASE
    missing = unmatched(h, auth)
    for ledger, acked in h.acked.items():
        content = auth.get(ledger)
        at = content.at if content is not None else {}
        others = first.get(ledger, {})
        for a in missing[ledger] if content is not None else acked:
            q = at.get(a.entry)
            if q is not None:  # a content entry, so (unmatched) not a.payload
                yield _diverged(
                    ledger, a.entry, (q, content.read), a.payload, "an ok append", a.call
                )
            elif (seen := others.get(a.entry)) is not None and seen[0] != a.payload:
                yield _diverged(ledger, a.entry, seen, a.payload, "an ok append", a.call)
    yield NEXT_PHASE
    for ledger, reads in h.closed.items():
        lasts = sorted({r.lac for r in reads})
        if len(lasts) > 1:
            yield case(
                f"closed reads of ledger {ledger} disagree on its last entry id: {lasts}.",
                [i for r in reads for i in r.call.ops],
                ledger=ledger,
                last_entries=lasts,
            )


def _diverged(
    ledger: Any, entry: int, first: tuple[str, Read], payload: str, what: str, call: Call
) -> Case:
    return case(
        f"a read (op {first[1].call.inv.index}) saw {first[0]!r} at entry {entry} of ledger "
        f"{ledger}, but {what} (op {call.inv.index}) has {payload!r} there.",
        first[1].call.ops + call.ops,
        ledger=ledger,
        entry=entry,
        payloads=[first[0], payload],
    )


def dirty_read(h: History, auth: dict[Any, Content]) -> Iterator[Case]:
    """A read returned (L, e, p) with e beyond L's authoritative last entry id."""
    for r in _entry_reads(h):
        content = auth.get(r.ledger)
        if content is None:
            continue
        for e, p in r.entries:
            if e > content.last:
                yield case(
                    f"a read (op {r.call.inv.index}) returned {p!r} at entry {e} of ledger "
                    f"{r.ledger}, which was closed at entry {content.last}.",
                    r.call.ops + content.read.call.ops,
                    ledger=r.ledger,
                    entry=e,
                    payload=p,
                )


def garbage_read(h: History, auth: dict[Any, Content]) -> Iterator[Case]:
    """A read returned a payload that no append in the history ever carried."""
    appends, ordered = h.appends, content_order(h, auth)
    for r in _entry_reads(h):
        content = auth.get(r.ledger)
        if content is not None and r is content.read:  # its appends are looked up already
            if None not in ordered[r.ledger][1]:
                continue
        elif not set(map(_PAYLOAD, r.entries)).difference(appends):  # screen at C speed
            continue
        for e, p in r.entries:
            if p not in appends:
                yield case(
                    f"a read (op {r.call.inv.index}) returned {p!r} at entry {e} of ledger "
                    f"{r.ledger}, a payload no append ever carried.",
                    r.call.ops,
                    ledger=r.ledger,
                    entry=e,
                    payload=p,
                )


def duplicate(h: History, auth: dict[Any, Content]) -> Iterator[Case]:
    """The same payload at two different (L, e) positions (reads or ok appends)."""
    where: dict[str, tuple[Any, int, Call]] = {}
    clashes: list[tuple[tuple[Any, int, Call], tuple[Any, int, Call], str]] = []
    get = where.get
    whole: set[Any] = set()  # ledgers whose closed read put every payload where it has it
    for r in _entry_reads(h):
        ledger, call = r.ledger, r.call
        first_clash = len(clashes)
        payloads = list(map(_PAYLOAD, r.entries))
        if len(set(payloads)) == len(payloads):  # distinct: the same cases, at C speed
            known = {p: where[p] for p in filter(where.__contains__, payloads)}
            if known:
                entry_of = dict(zip(payloads, map(_ENTRY, r.entries), strict=True))
                for p, there in known.items():
                    if there[1] != entry_of[p] or there[0] != ledger:
                        clashes.append((there, (ledger, entry_of[p], call), p))
            places = zip(repeat(ledger), map(_ENTRY, r.entries), repeat(call))
            where.update(zip(payloads, places, strict=True))
            where.update(known)  # the first place seen stays
            content = auth.get(ledger)
            if content is not None and r is content.read and len(clashes) == first_clash:
                whole.add(ledger)
            continue
        for e, p in r.entries:
            there = get(p)
            if there is None:
                where[p] = (ledger, e, call)
            elif there[1] != e or there[0] != ledger:
                clashes.append((there, (ledger, e, call), p))
    read_clashes = len(clashes)
    missing = unmatched(h, auth)
    for ledger, acked in h.acked.items():
        if ledger in whole and not missing[ledger]:
            continue  # each ack's payload is where the closed read put it: no clash
        for a in acked:
            there = get(a.payload)
            if there is None:
                where[a.payload] = (ledger, a.entry, a.call)
            elif there[1] != a.entry or there[0] != ledger:
                clashes.append((there, (ledger, a.entry, a.call), a.payload))
    for n, ((l1, e1, c1), (l2, e2, c2), p) in enumerate(clashes):
        if n == read_clashes:
            yield NEXT_PHASE
        yield case(
            f"{p!r} is at entry {e1} of ledger {l1} (op {c1.inv.index}) and also at entry "
            f"{e2} of ledger {l2} (op {c2.inv.index}).",
            c1.ops + c2.ops,
            ledger=l2,
            entry=e2,
            payload=p,
            first=[l1, e1],
        )


def failed_append_visible(h: History, auth: dict[Any, Content]) -> Iterator[Case]:
    """The payload of an append that completed `fail` appears in a read."""
    appends, failed = h.appends, h.failed
    for r in _entry_reads(h):
        if failed.isdisjoint(map(_PAYLOAD, r.entries)):  # screen at C speed
            continue
        for e, p in r.entries:
            a = appends.get(p)
            if a is not None and a.type == "fail":
                yield case(
                    f"the append of {p!r} failed (op {a.call.ops[-1]}), yet a read "
                    f"(op {r.call.inv.index}) returned it at entry {e} of ledger {r.ledger}.",
                    a.call.ops + r.call.ops,
                    ledger=r.ledger,
                    entry=e,
                    payload=p,
                )


def incomplete_read(h: History, auth: dict[Any, Content]) -> Iterator[Case]:
    """A read lacks an entry that L's authoritative content holds within the range it
    read: from its `from` (default 0) to its `lac` for a `tail` or `closed` read; for a
    `follow` read to the last entry it returned, or to L's authoritative last entry when
    it followed L to its end (`end`)."""
    for r in _entry_reads(h):
        content = auth.get(r.ledger)
        if content is None or r is content.read:
            continue
        if r.mode != "follow":
            last = r.lac
        elif r.end:
            last = content.last
        else:
            last = r.entries[-1][0] if r.entries else r.first - 1
        at, got = content.at, set(map(_ENTRY, r.entries))
        for e in range(r.first, min(last, content.last) + 1):
            if e in at and e not in got:
                yield case(
                    f"a {r.mode} read (op {r.call.inv.index}) of ledger {r.ledger} from entry "
                    f"{r.first} to {last} lacks entry {e}, which its closed read (op "
                    f"{content.read.call.inv.index}) holds ({at[e]!r}).",
                    r.call.ops + content.read.call.ops,
                    ledger=r.ledger,
                    entry=e,
                    payload=at[e],
                )
                break  # one case per read: the first entry it skipped


def read_beyond_lac(h: History, auth: dict[Any, Content]) -> Iterator[Case]:
    """A `tail` or `follow` read returned an entry id greater than its own `lac`."""
    for r in _entry_reads(h):
        if r.mode in ("tail", "follow") and r.entries:
            e, p = max(r.entries)
            if e > r.lac:
                yield case(
                    f"a {r.mode} read (op {r.call.inv.index}) of ledger {r.ledger} with lac "
                    f"{r.lac} returned entry {e}.",
                    r.call.ops,
                    ledger=r.ledger,
                    entry=e,
                    payload=p,
                    lac=r.lac,
                )


def nonmonotonic_lac(h: History, auth: dict[Any, Content]) -> Iterator[Case]:
    """One process, one ledger: an ok read/read-lac reports a `lac` lower than an
    earlier ok one from the same process."""
    highest: dict[tuple[Any, Any], Read] = {}
    for r in h.reads:
        key = (r.call.inv.process, r.ledger)
        top = highest.get(key)
        if top is None or r.lac > top.lac:
            highest[key] = r
        elif r.lac < top.lac:
            yield case(
                f"process {key[0]} saw lac {top.lac} of ledger {r.ledger} (op "
                f"{top.call.inv.index}), then lac {r.lac} (op {r.call.inv.index}).",
                top.call.ops + r.call.ops,
                ledger=r.ledger,
                lacs=[top.lac, r.lac],
            )


def lac_beyond_end(h: History, auth: dict[Any, Content]) -> Iterator[Case]:
    """A reported `lac` (tail read or read-lac) exceeds L's authoritative last entry id."""
    for r in h.reads:
        content = auth.get(r.ledger)
        if r.mode != "closed" and content is not None and r.lac > content.last:
            yield case(
                f"op {r.call.inv.index} reported lac {r.lac} of ledger {r.ledger}, which was "
                f"closed at entry {content.last}.",
                r.call.ops + content.read.call.ops,
                ledger=r.ledger,
                lac=r.lac,
                last_entry=content.last,
            )


FINDERS = {
    "lost-append": lost_append,
    "truncated-ledger": truncated_ledger,
    "divergence": divergence,
    "dirty-read": dirty_read,
    "garbage-read": garbage_read,
    "duplicate": duplicate,
    "failed-append-visible": failed_append_visible,
    "read-beyond-lac": read_beyond_lac,
    "incomplete-read": incomplete_read,
    "nonmonotonic-lac": nonmonotonic_lac,
    "lac-beyond-end": lac_beyond_end,
}


def unchecked_ledgers(h: History) -> list[Any]:
    """Ledgers with ok appends but no closed read: their appends cannot be judged."""
    return [ledger for ledger in h.acked_counts if ledger not in h.checked]


def ledger_anomalies(h: History) -> dict[str, Iterator[Case]]:
    """Every finder's cases, lazily: a streaming check runs them segment by segment."""
    auth = authoritative(h)
    return {name: find(h, auth) for name, find in FINDERS.items()}


def judge_unchecked(h: History, result: dict[str, Any]) -> dict[str, Any]:
    """Add the unchecked ledgers to the finders' result; valid is "unknown" if an acked
    ledger is unchecked."""
    unchecked = unchecked_ledgers(h)
    if result["valid"] and unchecked:
        result["valid"] = UNKNOWN
    result["unchecked_ledgers"] = unchecked
    result["unchecked_why"] = [
        {"ledger": ledger, "closed_read_error": h.closed_errors.get(ledger, "never attempted")}
        for ledger in unchecked
    ]
    return result


def check_ledgers(h: History) -> dict[str, Any]:
    """All per-ledger anomalies; valid is "unknown" if an acked ledger is unchecked."""
    return judge_unchecked(h, collect(ledger_anomalies(h)))
