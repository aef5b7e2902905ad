"""Property tests: synthetic histories of a correct log check valid; each mutation that
injects one anomaly is reported under its name; the pruned graph finds a cycle exactly
when the whole graph (realtime edges built pairwise) has one."""

from __future__ import annotations

import copy
import random
from collections.abc import Callable
from typing import Any

import networkx as nx
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from checkers import check, index_history, synthesize
from checkers.graph import data_edges
from checkers.history import ops_from_dicts
from checkers.ledger import authoritative

Ops = list[dict[str, Any]]

histories = st.builds(
    lambda seed, kw: list(synthesize(seed, **kw)),
    st.integers(0, 2**32),
    st.fixed_dictionaries(
        {
            "ops": st.integers(60, 1500),
            "ledgers": st.integers(1, 4),
            "streams": st.integers(0, 3),
            "processes": st.integers(1, 6),
            "read_fraction": st.floats(0.0, 0.5),
            "rollover": st.floats(0.0, 0.05),
            "abandon": st.floats(0.0, 0.6),
            "nemesis": st.booleans(),
        }
    ),
)

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
    r = check(_renumber(kept))
    assert r["anomaly_types"] == []
    acked = {op["value"]["ledger"] for op in kept if op["f"] == "append" and op["type"] == "ok"}
    assert r["valid"] == ("unknown" if acked & dropped else True)


# -- mutations: each takes a valid history and injects one anomaly, or returns None


def _renumber(ops: Ops) -> Ops:
    return [{**op, "index": i} for i, op in enumerate(ops)]


def _oks(ops: Ops, f: str, pred: Callable[[dict], bool] = lambda v: True) -> list[dict]:
    return [op for op in ops if op["type"] == "ok" and op["f"] == f and pred(op["value"])]


def _closed(ops: Ops, ledger: Any = None) -> list[dict]:
    return _oks(ops, "read", lambda v: v["mode"] == "closed" and ledger in (None, v["ledger"]))


def _tail_call(ops: Ops, process: int, f: str, value: dict, done: dict) -> Ops:
    """Append one call at the end of the history."""
    t = ops[-1]["time"]
    call = {"process": process, "f": f}
    invoke = {"index": 0, "time": t + 1, "type": "invoke", **call, "value": value}
    return _renumber(
        [*ops, invoke, {"index": 0, "time": t + 2, "type": "ok", **call, "value": done}]
    )


def _fresh(ops: Ops) -> int:
    return 1 + max(op["process"] for op in ops if isinstance(op["process"], int))


def lost_append(ops: Ops, rng: random.Random) -> Ops | None:
    acked = [op["value"] for op in _oks(ops, "append") if _closed(ops, op["value"]["ledger"])]
    if not acked:
        return None
    v = rng.choice(acked)
    for read in _closed(ops, v["ledger"]):
        read["value"]["entries"].remove([v["entry"], v["payload"]])
    return ops


def truncated_ledger(ops: Ops, rng: random.Random) -> Ops | None:
    acked = [op["value"] for op in _oks(ops, "append") if _closed(ops, op["value"]["ledger"])]
    if not acked:
        return None
    ledger = rng.choice(acked)["ledger"]
    top = max(v["entry"] for v in acked if v["ledger"] == ledger)
    for read in _closed(ops, ledger):
        read["value"]["lac"] = top - 1
        del read["value"]["entries"][top:]
    return ops


def divergence(ops: Ops, rng: random.Random) -> Ops | None:
    reads = [op for op in _closed(ops) if op["value"]["lac"] >= 0]
    if not reads:
        return None
    v = copy.deepcopy(rng.choice(reads)["value"])
    v["lac"] -= 1
    v["entries"].pop()
    return _tail_call(ops, _fresh(ops), "read", {"ledger": v["ledger"], "mode": "closed"}, v)


def _absent_payload(ops: Ops) -> str:
    """A payload some append carried that no read returned (else: garbage)."""
    seen = {p for op in _oks(ops, "read") for _, p in op["value"]["entries"]}
    carried = [op["value"]["payload"] for op in ops if op["f"] == "append"]
    return next((p for p in carried if p not in seen), "never-appended")


def dirty_read(ops: Ops, rng: random.Random) -> Ops | None:
    reads = _closed(ops)
    if not reads:
        return None
    v = copy.deepcopy(rng.choice(reads)["value"])
    v["entries"].append([v["lac"] + 1, _absent_payload(ops)])
    return _tail_call(ops, _fresh(ops), "read", {"ledger": v["ledger"], "mode": "closed"}, v)


def garbage_read(ops: Ops, rng: random.Random) -> Ops | None:
    reads = [op for op in _oks(ops, "read") if op["value"]["entries"]]
    if not reads:
        return None
    rng.choice(rng.choice(reads)["value"]["entries"])[1] = "garbage!"
    return ops


def duplicate(ops: Ops, rng: random.Random) -> Ops | None:
    reads = [op for op in _closed(ops) if len(op["value"]["entries"]) >= 2]
    if not reads:
        return None
    entries = rng.choice(reads)["value"]["entries"]
    entries[-1][1] = entries[0][1]
    return ops


def failed_append_visible(ops: Ops, rng: random.Random) -> Ops | None:
    failed = [op["value"]["payload"] for op in ops if op["f"] == "append" and op["type"] == "fail"]
    reads = [op for op in _oks(ops, "read") if op["value"]["entries"]]
    if not failed or not reads:
        return None
    rng.choice(rng.choice(reads)["value"]["entries"])[1] = rng.choice(failed)
    return ops


def read_beyond_lac(ops: Ops, rng: random.Random) -> Ops | None:
    reads = _oks(ops, "read", lambda v: v["mode"] == "tail" and v["entries"])
    if not reads:
        return None
    v = rng.choice(reads)["value"]
    v["lac"] = max(e for e, _ in v["entries"]) - 1
    return ops


def nonmonotonic_lac(ops: Ops, rng: random.Random) -> Ops | None:
    seen = [op for op in _oks(ops, "read") + _oks(ops, "read-lac") if op["value"]["lac"] >= 0]
    if not seen:
        return None
    op = rng.choice(seen)
    v = {"ledger": op["value"]["ledger"]}
    lower = {**v, "lac": op["value"]["lac"] - 1}
    pending = sum(1 if o["type"] == "invoke" else -1 for o in ops if o["process"] == op["process"])
    return None if pending else _tail_call(ops, op["process"], "read-lac", v, lower)


def lac_beyond_end(ops: Ops, rng: random.Random) -> Ops | None:
    reads = _closed(ops)
    if not reads:
        return None
    v = rng.choice(reads)["value"]
    done = {"ledger": v["ledger"], "lac": v["lac"] + 1}
    return _tail_call(ops, _fresh(ops), "read-lac", {"ledger": v["ledger"]}, done)


def realtime_order(ops: Ops, rng: random.Random) -> Ops | None:
    """Swap where two ok stream appends landed, the first acked before the second began."""
    invoked = {}
    acked = []
    for op in ops:
        if op["f"] == "append" and op["type"] == "invoke":
            invoked[op["process"]] = op["index"]
        elif op["f"] == "append" and op["type"] == "ok" and "seq" in op["value"]:
            acked.append((invoked[op["process"]], op["index"], op["value"]))
    checked = {op["value"]["ledger"] for op in _closed(ops)}
    acked = [x for x in acked if x[2]["ledger"] in checked]
    if not acked:
        return None
    first = rng.choice(acked)
    later = [x for x in acked if x[2]["stream"] == first[2]["stream"] and first[1] < x[0]]
    if not later:
        return None
    a, b = first[2], rng.choice(later)[2]
    swap = {a["payload"]: b["payload"], b["payload"]: a["payload"]}
    for read in _oks(ops, "read"):
        read["value"]["entries"] = [[e, swap.get(p, p)] for e, p in read["value"]["entries"]]
    for key in ("ledger", "entry", "seq"):
        a[key], b[key] = b[key], a[key]
    return ops


MUTATIONS = {
    "lost-append": lost_append,
    "truncated-ledger": truncated_ledger,
    "divergence": divergence,
    "dirty-read": dirty_read,
    "garbage-read": garbage_read,
    "duplicate": duplicate,
    "failed-append-visible": failed_append_visible,
    "read-beyond-lac": read_beyond_lac,
    "nonmonotonic-lac": nonmonotonic_lac,
    "lac-beyond-end": lac_beyond_end,
    "realtime-order": realtime_order,
}


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


def _sample(seed: int = 3) -> Ops:
    return list(synthesize(seed, ops=3000, ledgers=4, streams=2, read_fraction=0.3,
                           rollover=0.01, abandon=0.5))  # fmt: skip


def test_the_model_produces_every_ambiguity_the_checkers_must_tolerate() -> None:
    """Vacuity guard: the valid histories above do exercise the hard cases."""
    ops = _sample()
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
    mutated = MUTATIONS[name](_sample(), random.Random(0))
    assert mutated is not None
    assert name in check(mutated)["anomaly_types"]
