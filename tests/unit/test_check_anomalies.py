"""Hand-built histories: one per anomaly and per ambiguous case, with the exact anomaly
types and the ops each case cites (docs/history.md §4)."""

from __future__ import annotations

from typing import Any

import pytest

from checkers import index_history
from checkers.graph import classify
from checkers.history import ops_from_dicts
from checkers.ledger import authoritative, content_order
from tests.helpers.histories import H


def two_acked(ledger: Any = 7) -> H:
    """p0 and p1 acknowledged at entries 0 and 1 of the ledger (ops 0-3)."""
    h = H()
    h.append(0, ledger, "p0", 0)
    h.append(0, ledger, "p1", 1)
    return h


def cases(result: dict[str, Any], name: str) -> list[dict[str, Any]]:
    return result["anomalies"][name]


@pytest.mark.parametrize("ledger", [7, "0001-00000000000000ab"])
def test_lost_append(ledger: Any) -> None:
    h = two_acked(ledger)
    read = h.read(1, ledger, [(0, "p0")], lac=1)
    r = h.check()
    assert r["valid"] is False
    assert r["anomaly_types"] == ["G-single-realtime", "lost-append"]
    (c,) = cases(r, "lost-append")
    assert (c["ledger"], c["entry"], c["payload"], c["ops"]) == (ledger, 1, "p1", [2, 3, *read])


def test_truncated_ledger() -> None:
    h = two_acked()
    read = h.read(1, 7, [(0, "p0")])
    r = h.check()
    assert r["anomaly_types"] == ["G-single-realtime", "lost-append", "truncated-ledger"]
    (c,) = cases(r, "truncated-ledger")
    assert (c["entry"], c["last_entry"], c["ops"]) == (1, 0, [2, 3, *read])


def test_divergence_between_reads() -> None:
    h = H()
    h.append(0, 7, "pa", kind="info")
    h.append(1, 7, "pb", kind="info")
    tail = h.read(2, 7, [(0, "pa")], mode="tail")
    closed = h.read(3, 7, [(0, "pb")])
    r = h.check()
    assert r["anomaly_types"] == ["divergence"]
    (c,) = cases(r, "divergence")
    assert (c["entry"], c["payloads"], c["ops"]) == (0, ["pb", "pa"], closed + tail)


def test_divergence_of_last_entry_ids() -> None:
    h = H()
    h.append(0, 7, "pa", kind="info")
    h.append(1, 7, "pb", kind="info")
    first = h.read(2, 7, [(0, "pa")])
    second = h.read(3, 7, [(0, "pa"), (1, "pb")])
    r = h.check()
    assert r["anomaly_types"] == ["dirty-read", "divergence"]
    (c,) = cases(r, "divergence")
    assert (c["last_entries"], c["ops"]) == ([0, 1], first + second)


def test_dirty_read() -> None:
    h = H()
    h.append(0, 7, "pa", kind="info")
    h.append(1, 7, "pb", kind="info")
    h.read(2, 7, [(0, "pa")])
    dirty = h.read(3, 7, [(0, "pa"), (1, "pb")], lac=0)
    r = h.check()
    assert r["anomaly_types"] == ["dirty-read"]
    (c,) = cases(r, "dirty-read")
    assert (c["entry"], c["payload"], c["ops"]) == (1, "pb", [*dirty, 4, 5])


def test_garbage_read() -> None:
    h = H()
    read = h.read(0, 7, [(0, "zzz")])
    r = h.check()
    assert r["anomaly_types"] == ["garbage-read"]
    assert cases(r, "garbage-read")[0]["ops"] == read


def test_duplicate_in_one_ledger_is_also_a_ww_cycle() -> None:
    h = H()
    h.append(0, 7, "pa", kind="info")
    h.append(1, 7, "pb", kind="info")
    read = h.read(2, 7, [(0, "pa"), (1, "pb"), (2, "pa")])
    r = h.check()
    assert r["anomaly_types"] == ["G0", "duplicate"]
    (c,) = cases(r, "duplicate")
    assert (c["ledger"], c["entry"], c["first"], c["ops"]) == (7, 2, [7, 0], read)
    (g0,) = cases(r, "G0")
    assert [e["kind"] for e in g0["cycle"]] == ["ww", "ww"]
    assert g0["explanation"].endswith("a contradiction!")


def test_duplicate_across_ledgers() -> None:
    h = H()
    h.append(0, 7, "pa", kind="info")
    h.read(1, 7, [(0, "pa")])
    h.read(1, 8, [(0, "pa")])
    assert h.check()["anomaly_types"] == ["duplicate"]


def test_failed_append_visible() -> None:
    h = H()
    failed = h.append(0, 7, "pf", kind="fail")
    read = h.read(1, 7, [(0, "pf")])
    r = h.check()
    assert r["anomaly_types"] == ["failed-append-visible"]
    assert cases(r, "failed-append-visible")[0]["ops"] == failed + read


def test_a_retried_payload_is_its_first_appends_in_the_content() -> None:
    """p0 failed, then was appended again and acknowledged at entry 0: the closed
    content's entry is p0's first append (the failed one) for every checker, though the
    ack matches it (the shared pass over the acks takes a matching ack as its entry's
    append only if it is its payload's first)."""
    h = H()
    failed = h.append(0, 7, "p0", kind="fail")
    h.append(1, 7, "p0", 0)
    read = h.read(2, 7, [(0, "p0")])
    indexed = index_history(ops_from_dicts(h.ops))
    entries, appends = content_order(indexed, authoritative(indexed))[7]
    assert entries == [0] and [a.call.ops for a in appends] == [failed]
    r = h.check()
    assert r["anomaly_types"] == ["failed-append-visible"]
    assert cases(r, "failed-append-visible")[0]["ops"] == [*failed, *read]


def test_read_beyond_lac() -> None:
    h = two_acked()
    tail = h.read(1, 7, [(0, "p0"), (1, "p1")], lac=0, mode="tail")
    h.read(2, 7, [(0, "p0"), (1, "p1")])
    r = h.check()
    assert r["anomaly_types"] == ["read-beyond-lac"]
    (c,) = cases(r, "read-beyond-lac")
    assert (c["entry"], c["lac"], c["ops"]) == (1, 0, tail)


def test_a_follow_read_beyond_its_lac_is_read_beyond_lac_too() -> None:
    h = two_acked()
    follow = h.read(1, 7, [(0, "p0"), (1, "p1")], lac=0, mode="follow")
    h.read(2, 7, [(0, "p0"), (1, "p1")])
    r = h.check()
    assert r["anomaly_types"] == ["read-beyond-lac"]
    assert cases(r, "read-beyond-lac")[0]["ops"] == follow


def _three_acked() -> H:
    h = two_acked()
    h.append(0, 7, "p2", 2)
    return h


@pytest.mark.parametrize(
    ("mode", "entries", "lac", "extra", "skipped"),
    [
        ("tail", [(0, "p0"), (2, "p2")], 2, {}, 1),  # a hole below its lac
        ("tail", [(1, "p1")], 2, {"from": 1}, 2),  # short of its lac
        ("closed", [(0, "p0"), (1, "p1")], 2, {}, 2),  # a later closed read, short
        ("follow", [(1, "p1")], 2, {"from": 1, "end": True}, 2),  # followed to the end
        ("follow", [(0, "p0"), (2, "p2")], 2, {"end": False}, 1),  # a hole in what it got
    ],
)
def test_incomplete_read(mode: str, entries: list, lac: int, extra: dict, skipped: int) -> None:
    h = _three_acked()
    closed = h.read(1, 7, [(0, "p0"), (1, "p1"), (2, "p2")])
    read = h.read(2, 7, entries, lac=lac, mode=mode, **extra)
    r = h.check()
    # a closed read is an rw edge from every acked append it lacks: the graph restates it
    restated = ["G-single-realtime"] if mode == "closed" else []
    assert r["anomaly_types"] == [*restated, "incomplete-read"]
    (c,) = cases(r, "incomplete-read")
    assert (c["entry"], c["payload"], c["ops"]) == (skipped, f"p{skipped}", read + closed)


@pytest.mark.parametrize(
    ("entries", "extra"),
    [
        ([(1, "p1")], {"from": 1, "end": False}),  # stopped before its lac: it lags
        ([], {"from": 3, "end": True}),  # from past the end: nothing to return
        ([(0, "p0"), (1, "p1"), (2, "p2")], {"end": True}),
    ],
)
def test_a_follow_read_that_stops_short_of_its_lac_is_complete(entries: list, extra: dict) -> None:
    h = _three_acked()
    h.read(1, 7, [(0, "p0"), (1, "p1"), (2, "p2")])
    h.read(2, 7, entries, lac=2, mode="follow", **extra)
    assert h.check()["anomaly_types"] == []


def test_nonmonotonic_lac() -> None:
    h = two_acked()
    high = h.read_lac(1, 7, 1)
    low = h.read(1, 7, [(0, "p0")], mode="tail")
    h.read_lac(2, 7, 0)  # another process may lag: not an anomaly
    h.read(3, 7, [(0, "p0"), (1, "p1")])
    r = h.check()
    assert r["anomaly_types"] == ["nonmonotonic-lac"]
    (c,) = cases(r, "nonmonotonic-lac")
    assert (c["lacs"], c["ops"]) == ([1, 0], high + low)


def test_lac_beyond_end() -> None:
    h = two_acked()
    beyond = h.read_lac(1, 7, 2)
    closed = h.read(2, 7, [(0, "p0"), (1, "p1")])
    r = h.check()
    assert r["anomaly_types"] == ["lac-beyond-end"]
    assert cases(r, "lac-beyond-end")[0]["ops"] == beyond + closed


def test_realtime_order_in_a_stream() -> None:
    h = H()
    h.call(0, "create", {"stream": "s"}, {"stream": "s", "ledger": 7, "seq": 1})
    h.call(0, "create", {"stream": "s"}, {"stream": "s", "ledger": 8, "seq": 2})
    a = h.append(0, 8, "pa", 0, stream="s", seq=2)
    b = h.append(1, 7, "pb", 0, stream="s", seq=1)
    h.read(2, 7, [(0, "pb")])
    h.read(2, 8, [(0, "pa")])
    r = h.check()
    assert r["anomaly_types"] == ["G0-realtime", "realtime-order"]
    (c,) = cases(r, "realtime-order")
    assert (c["stream"], c["ledger"], c["payload"], c["ops"]) == ("s", 7, "pb", a + b)


def test_wr_from_the_future_is_g1c_realtime() -> None:
    h = H()
    h.read(0, 7, [(0, "pb")], mode="tail")
    h.append(1, 7, "pb", 0)
    h.read(2, 7, [(0, "pb")])
    r = h.check()
    assert r["anomaly_types"] == ["G1c-realtime"]
    assert [e["kind"] for e in r["anomalies"]["G1c-realtime"][0]["cycle"]] == [
        "realtime",
        "wr",
    ]


def test_lost_append_seen_by_its_own_process_is_g_single_process() -> None:
    h = two_acked()
    h.read(0, 7, [(0, "p0")], lac=1)
    assert "G-single-process" in h.check()["anomaly_types"]


@pytest.mark.parametrize(
    ("kinds", "name"),
    [
        (["ww", "ww"], "G0"),
        (["ww", "wr"], "G1c"),
        (["wr", "rw"], "G-single"),
        (["rw", "wr", "rw", "wr"], "G2"),
        (["ww", "realtime"], "G0-realtime"),
        (["wr", "process"], "G1c-process"),
        (["rw", "process", "realtime"], "G-single-realtime"),
        (["rw", "rw", "process"], "G2-process"),
    ],
)
def test_classify(kinds: list[str], name: str) -> None:
    assert classify(kinds) == name


# -- ambiguous cases: never an anomaly


@pytest.mark.parametrize("present", [True, False])
def test_info_append_may_or_may_not_appear(present: bool) -> None:
    h = H()
    h.append(0, 7, "p0", 0)
    h.append(0, 7, "pi", kind="info")
    h.read(1, 7, [(0, "p0"), (1, "pi")] if present else [(0, "p0")])
    assert h.check()["valid"] is True


def test_never_completed_invoke_counts_as_info_and_may_appear() -> None:
    h = H()
    h.append(0, 7, "p0", 0)
    h.line("invoke", 1, "append", {"ledger": 7, "payload": "pn"})
    h.read(2, 7, [(0, "p0"), (1, "pn")])
    r = h.check()
    assert r["valid"] is True
    assert (r["stats"]["invoke"], r["stats"]["info"]) == (3, 1)


def test_failed_append_absent_and_tail_read_lagging_are_valid() -> None:
    h = two_acked()
    h.append(0, 7, "pf", kind="fail")
    h.read(1, 7, [(0, "p0")], lac=0, mode="tail")
    h.read_lac(1, 7, 1)
    h.read(1, 7, [(0, "p0"), (1, "p1")])
    assert h.check()["valid"] is True


def test_unchecked_ledger_with_acked_appends_is_unknown() -> None:
    h = two_acked()
    h.append(0, 9, "q", kind="info")  # unchecked but nothing acked: no doubt about it
    h.call(1, "read", {"ledger": 7, "mode": "closed"}, {"ledger": 7, "mode": "closed"}, "fail")
    h.ops[-1]["error"] = "NotEnoughBookies: 1 of 3 answered"
    r = h.check()
    assert r["valid"] == "unknown"
    assert r["anomaly_types"] == []
    assert r["stats"]["unchecked_ledgers"] == [7]
    why = [{"ledger": 7, "closed_read_error": "NotEnoughBookies: 1 of 3 answered"}]
    assert r["checkers"]["ledger"]["unchecked_why"] == why


def test_unknown_f_and_nemesis_ops_are_counted_not_judged() -> None:
    h = two_acked()
    h.call("nemesis", "kill", {"node": "b1"}, {"node": "b1", "proof": {"pid": 0}}, "info")
    h.call(3, "noop", None, None)
    h.read(1, 7, [(0, "p0"), (1, "p1")])
    r = h.check()
    assert r["valid"] is True
    assert r["checkers"]["stats"]["unknown_f"] == ["noop"]
    assert r["stats"]["ops"] == 10


def audited(lacking: list[list[Any]], wq: int = 2, aq: int = 2, **more: Any) -> tuple[H, list[int]]:
    """Two acked entries of ledger 7, read closed, then an audit of its copies finding
    `lacking` ([entry, bookies without it, bookies that said nothing]) and `more`
    (`divergent` copies, `unbounded`)."""
    h = two_acked()
    h.read(1, 7, [(0, "p0"), (1, "p1")])
    done = {"ledger": 7, "last_entry": 1, "wq": wq, "aq": aq, "lacking": lacking, **more}
    return h, h.call(2, "audit", {"ledger": 7}, done)


def test_an_entry_below_its_ack_quorum_of_copies_is_under_replicated() -> None:
    h, audit = audited([[1, ["b2:3181"], []]])
    r = h.check()
    assert (r["valid"], r["anomaly_types"]) == (False, ["under-replicated"])
    (c,) = cases(r, "under-replicated")
    assert (c["ledger"], c["entry"], c["missing"], c["ops"]) == (7, 1, ["b2:3181"], audit)
    assert "at most 1 of the 2 bookies" in c["explanation"]
    assert r["checkers"]["stats"]["unknown_f"] == []


@pytest.mark.parametrize(
    ("lacking", "under"),
    [
        ([[0, ["b1:3181"], []]], []),  # WQ 3, AQ 2: one bookie may lack it
        ([[0, ["b1:3181"], ["b2:3181", "b3:3181"]]], []),  # silence is not absence
        ([[0, ["b1:3181", "b2:3181"], []], [1, ["b3:3181"], []]], [0]),
    ],
)
def test_only_more_missing_copies_than_wq_minus_aq_count(lacking: list, under: list) -> None:
    h, _ = audited(lacking, wq=3, aq=2)
    r = h.check()
    found = [c["entry"] for c in r["anomalies"].get("under-replicated", [])]
    assert (found, r["valid"]) == (under, not under)


def test_copies_that_differ_are_a_divergence() -> None:
    held = {"b1:3181": "p1", "b2:3181": "stale", "b3:3181": None}
    h, audit = audited([], wq=3, aq=2, divergent=[[1, held]], unbounded=True)
    r = h.check()
    assert (r["valid"], r["anomaly_types"]) == (False, ["divergence"])
    (c,) = cases(r, "divergence")
    assert (c["ledger"], c["entry"], c["copies"], c["ops"]) == (7, 1, held, audit)
    assert "b2:3181 holds 'stale'; b3:3181 holds a no-op" in c["explanation"]


def test_an_unbounded_ledgers_missing_copies_are_not_judged() -> None:
    """Its terms truncate: which copies it must keep is not what the checker models."""
    lacking = [[1, ["b1:3181", "b2:3181"], []]]
    assert audited(lacking, wq=3, aq=2, unbounded=False)[0].check()["valid"] is False
    r = audited(lacking, wq=3, aq=2, unbounded=True, divergent=[])[0].check()
    assert (r["valid"], r["checkers"]["replication"]["audited_ledgers"]) == (True, 1)


def test_copies_are_not_judged_after_faults_that_destroy_data() -> None:
    h, _ = audited([[1, ["b2:3181"], []]])
    h.call("nemesis", "corrupt", {"nodes": ["b2"]}, {"nodes": ["b2"], "proof": {}}, "info")
    r = h.check()
    assert (r["valid"], r["anomaly_types"]) == (True, [])
    assert "corrupt" in r["checkers"]["replication"]["not_judged"]
