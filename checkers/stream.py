"""The stream checker: `realtime-order` (docs/history.md §4).

A stream is a sequence of ledgers ordered by `seq`; its order is `(seq, entry)` over the
authoritative content of its ledgers. Ledgers of a stream whose `seq` is unknown are
ordered only within themselves.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from checkers.history import Append, History
from checkers.ledger import Content, authoritative, content_order
from checkers.result import Case, case, collect


def stream_orders(h: History, auth: dict[Any, Content]) -> dict[Any, list[Any]]:
    """Stream -> its checked ledgers in seq order (unknown seq: a stream of one ledger)."""
    groups: dict[Any, list[tuple[Any, Any]]] = {}
    for ledger, (stream, seq) in h.streams.items():
        if ledger in auth:
            key = (stream, None) if seq is not None else (stream, ledger)
            groups.setdefault(key, []).append((seq, ledger))
    return {
        key: [ledger for _, ledger in sorted(members, key=lambda m: m[0] or 0)]
        for key, members in groups.items()
    }


def realtime_order(h: History, auth: dict[Any, Content]) -> Iterator[Case]:
    """Same stream: append a completed ok before append b was invoked, both are present
    in the authoritative content, and b precedes a in stream order.

    Scans each stream backwards keeping the earliest-completed ok append seen so far, so
    each b is compared with the one witness that matters: linear in the content size.
    """
    ordered = content_order(h, auth)
    for (stream, _), ledgers in stream_orders(h, auth).items():
        witness: Append | None = None
        for ledger in reversed(ledgers):
            entries, writers = ordered[ledger]
            for e, b in zip(reversed(entries), reversed(writers), strict=True):
                if b is None:
                    continue
                p = b.payload
                # an ok call's key is its completion's index
                if witness is not None and witness.key < b.inv.index:
                    a = witness
                    yield case(
                        f"in stream {stream!r}, the append of {a.payload!r} completed (op "
                        f"{a.done.index}) before the append of {p!r} was invoked (op "
                        f"{b.inv.index}), yet {p!r} is earlier: entry {e} of ledger "
                        f"{ledger} vs entry {a.entry} of ledger {a.ledger}.",
                        a.ops + b.ops,
                        ledger=ledger,
                        entry=e,
                        payload=p,
                        stream=stream,
                    )
                if b.type == "ok" and (witness is None or b.key < witness.key):
                    witness = b


def stream_anomalies(h: History) -> dict[str, Iterator[Case]]:
    """The realtime-order cases of every stream, lazily."""
    return {"realtime-order": realtime_order(h, authoritative(h))}


def check_streams(h: History) -> dict[str, Any]:
    """The realtime-order anomalies of every stream."""
    return collect(stream_anomalies(h))
