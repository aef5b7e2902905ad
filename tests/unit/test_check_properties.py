"""Property tests: synthetic histories of a correct log check valid; each mutation that
injects one anomaly is reported under its name; the pruned graph finds a cycle exactly
when the whole graph (realtime edges built pairwise) has one."""

from __future__ import annotations

import copy
import random
from typing import Any

import networkx as nx
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from checkers import check, index_history
from checkers.graph import data_edges
from checkers.history import History, ops_from_dicts
from checkers.ledger import authoritative, duplicate, lost_append, truncated_ledger
from checkers.result import NEXT_PHASE
from tests.helpers.histories import MUTATIONS, Ops, histories, renumber, rich_history

SETTINGS = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(histories)
def test_correct_histories_check_valid(ops: Ops) -> None:
    r = check(ops)
    assert r["anomaly_types"] == [], r["anomalies"]
    assert r["valid"] is True


@SETTINGS
@given(histories, st.integers(1, 2))
def test_ledgers_left_without_closed_read_are_unknown_or_valid(ops: Ops, drop: int) -> None:
    closed = [op for op in ops if op["f"] == "read" and op["value"]["mode"] == "closed"]
    dropped = {op["value"]["ledger"] for op in closed[-2 * drop :]}
    kept = [op for op in ops if not (op["f"] == "read" and op["value"].get("ledger") in dropped
            and op["value"]["mode"] == "closed")]  # fmt: skip
    r = check(renumber(kept))
    assert r["anomaly_types"] == []
    acked = {op["value"]["ledger"] for op in kept if op["f"] == "append" and op["type"] == "ok"}
    assert r["valid"] == ("unknown" if acked & dropped else True)


# -- mutations: each takes a valid history and injects one anomaly, or returns None


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(histories, st.sampled_from(sorted(MUTATIONS)), st.randoms(use_true_random=False))
def test_each_mutation_is_reported_by_name(ops: Ops, name: str, rng: random.Random) -> None:
    mutated = MUTATIONS[name](copy.deepcopy(ops), rng)
    assume(mutated is not None)
    r = check(mutated)
    assert r["valid"] is False
    assert name in r["anomaly_types"], r["anomaly_types"]
    for cases in r["anomalies"].values():
        assert all(c["ops"] and c["explanation"] for c in cases)


# -- the pruned graph against the whole graph


def _has_cycle_whole_graph(ops: Ops) -> bool:
    """Oracle: every edge, realtime ones pairwise (O(n²), fine for small histories)."""
    h = index_history(ops_from_dicts(ops))
    nodes = [c for c in h.calls if (c.inv.f == "append" and c.type != "fail")
             or (c.inv.f == "read" and c.type == "ok")]  # fmt: skip
    g = nx.DiGraph()
    g.add_nodes_from(c.inv.index for c in nodes)
    g.add_edges_from(
        (u.inv.index, v.inv.index) for u, v, _, _ in data_edges(h, authoritative(h)) if u is not v
    )
    for a in nodes:
        for b in nodes:
            if a.type == "ok" and a.done.index < b.inv.index:
                g.add_edge(a.inv.index, b.inv.index)
    return not nx.is_directed_acyclic_graph(g)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(histories, st.sampled_from([None, *sorted(MUTATIONS)]), st.randoms(use_true_random=False))
def test_pruned_graph_agrees_with_whole_graph(ops: Ops, name: str | None, rng: random.Random):
    if name is not None:
        ops = MUTATIONS[name](copy.deepcopy(ops), rng)
        assume(ops is not None)
    graph = check(ops)["checkers"]["graph"]
    assert bool(graph["anomaly_types"]) == _has_cycle_whole_graph(ops)


def test_the_model_produces_every_ambiguity_the_checkers_must_tolerate() -> None:
    """Vacuity guard: the valid histories above do exercise the hard cases."""
    ops = rich_history()
    h = index_history(ops_from_dicts(ops))
    content = {p for reads in h.closed.values() for _, p in reads[0].entries}
    info = [a for a in h.appends.values() if a.type == "info"]
    assert any(a.payload in content for a in info), "info appends that landed"
    assert any(a.payload not in content for a in info), "info appends that did not"
    assert any(a.call.done is None for a in info), "appends never completed"
    assert any(a.type == "fail" for a in h.appends.values())
    assert any(r.mode == "tail" and r.lac < h.closed[r.ledger][0].lac for r in h.reads)
    assert h.nemesis and len({s for s, _ in h.streams.values()}) == 2
    assert len(h.closed) > 4, "ledgers taken over by recovery"
    assert len({c.inv.process for c in h.calls}) > 5, "processes retired after info"
    assert check(ops)["valid"] is True


@pytest.mark.parametrize("name", sorted(MUTATIONS))
def test_each_mutation_applies_to_a_rich_history(name: str) -> None:
    mutated = MUTATIONS[name](rich_history(), random.Random(0))
    assert mutated is not None
    assert name in check(mutated)["anomaly_types"]


# -- the ledger finders' shortcuts against one plain scan per definition


def _plain_duplicates(h: History) -> list[tuple[Any, ...]]:
    """Oracle: every read entry, then every ok append, placed one by one."""
    where: dict[str, tuple[Any, int, int]] = {}
    found: list[tuple[Any, ...]] = []
    placed = [
        (r.ledger, e, p, r.call.inv.index) for r in h.reads if r.entries for e, p in r.entries
    ]
    placed += [(a.ledger, a.entry, a.payload, a.call.inv.index) for acked in h.acked.values()
               for a in acked]  # fmt: skip
    for ledger, e, p, op in placed:
        there = where.setdefault(p, (ledger, e, op))
        if there[:2] != (ledger, e):
            found.append((p, there, (ledger, e)))
    return found


def _plain_lost_and_truncated(h: History) -> tuple[list[tuple[Any, int]], list[Any]]:
    """Oracle: every ok append against its ledger's closed content."""
    auth = authoritative(h)
    lost, truncated = [], []
    for ledger, acked in h.acked.items():
        if ledger in auth:
            lost += [(ledger, a.entry) for a in acked if auth[ledger].at.get(a.entry) != a.payload]
            if any(a.entry > auth[ledger].last for a in acked):
                truncated.append(ledger)
    return lost, truncated


@SETTINGS
@given(histories, st.lists(st.sampled_from(sorted(MUTATIONS)), max_size=3), st.randoms())
def test_ledger_finder_shortcuts_find_what_one_plain_scan_finds(
    ops: Ops, names: list[str], rng: random.Random
) -> None:
    for name in names:
        ops = MUTATIONS[name](copy.deepcopy(ops), rng) or ops
    h = index_history(ops_from_dicts(ops))
    auth = authoritative(h)
    cases = [(c["payload"], (*c["first"], c["ops"][0]), (c["ledger"], c["entry"]))
             for c in duplicate(h, auth) if c is not NEXT_PHASE]  # fmt: skip
    assert cases == _plain_duplicates(h)
    lost, truncated = _plain_lost_and_truncated(h)
    assert [(c["ledger"], c["entry"]) for c in lost_append(h, auth)] == lost
    assert [c["ledger"] for c in truncated_ledger(h, auth)] == truncated
