"""Grudges and the combined schedule as pure values: no processes, no containers."""

from __future__ import annotations

import random

import pytest

from core.generator import Context
from nemesis.combined import CombinedCycle
from nemesis.grudge import bridge, complete, grudge, halves, majorities_ring
from nemesis.schedule import START_STOP

NODES = ["zk1", "b1", "b2", "b3", "b4"]
ROLES = {"zk1": "zk", "b1": "bookie", "b2": "bookie", "b3": "bookie", "b4": "bookie"}


def symmetric(g: dict[str, frozenset[str]]) -> bool:
    return all(a in g.get(b, ()) for a, drops in g.items() for b in drops)


def test_complete_grudges_cut_both_ways() -> None:
    assert halves(NODES) == complete([["zk1", "b1"], ["b2", "b3", "b4"]])
    assert halves(NODES)["zk1"] == {"b2", "b3", "b4"} and symmetric(halves(NODES))
    isolated = grudge("isolate", NODES, ROLES, random.Random(0), ["b2"])
    assert isolated["b2"] == {"zk1", "b1", "b3", "b4"} and isolated["b1"] == {"b2"}
    zk = grudge("isolate-zk", NODES, ROLES, random.Random(0))
    assert zk["zk1"] == {"b1", "b2", "b3", "b4"}


def test_majorities_ring_each_node_sees_its_own_majority() -> None:
    g = majorities_ring(NODES)
    seen = [frozenset(NODES) - g[n] for n in NODES]
    assert all(len(s) == 3 and n in s for n, s in zip(NODES, seen, strict=True))
    assert len(set(seen)) == len(NODES) and symmetric(g)


def test_bridge_node_sees_both_sides() -> None:
    g = bridge(NODES)
    assert g["b2"] == frozenset() and g["zk1"] == {"b3", "b4"} and symmetric(g)


def test_bad_grudges_name_what_to_choose() -> None:
    with pytest.raises(ValueError, match="unknown grudge"):
        grudge("thirds", NODES, ROLES, random.Random(0))
    with pytest.raises(ValueError, match="unknown nodes"):
        grudge({"b1": ["b9"]}, NODES, ROLES, random.Random(0))


def test_combined_cycle_overlaps_and_replays_from_its_seed() -> None:
    def play(seed: int) -> list[tuple[float, str, str]]:
        cycle = CombinedCycle(("kill", "wipe", "partition", "packet"), ("b1", "b2", "b3"), 2.0)
        rng, ops, active, most = random.Random(seed), [], set(), 0
        for tick in range(600):
            op = cycle.op(Context(tick / 10, "nemesis", rng, 0))
            if isinstance(op, dict):
                node = op["value"]["nodes"][0]
                starting = op["f"] in {pair[0] for pair in START_STOP.values()}
                assert (node in active) != starting  # one fault per node at a time
                (active.add if starting else active.discard)(node)
                most = max(most, len(active))
                ops.append((tick / 10, op["f"], node))
        assert most == 2  # overlapping faults, never more than max_overlap
        return ops

    assert play(1) == play(1) and play(1) != play(2)
    kinds = {"kill", "wipe", "start-partition", "start-packet"}
    for seed in range(20):  # each kind once per round of four starts
        starts = [f for _, f, _ in play(seed) if f in kinds]
        assert set(starts[:4]) == kinds, starts
