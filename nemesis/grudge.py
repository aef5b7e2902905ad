"""Partition grudges as pure functions (Jepsen's `nemesis.clj`): who drops whom.

A grudge maps each node to the set of nodes whose packets it drops. Complete grudges
come from components — every node drops every node outside its own component — so both
sides of a cut drop each other. `grudge(name, ...)` builds one by name for the partition
nemesis and the CLI; bad names or nodes raise ValueError naming what to choose.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping, Sequence

Grudge = dict[str, frozenset[str]]

NAMES = (
    "halves",
    "random-halves",
    "isolate",
    "majorities-ring",
    "bridge",
    "clients-vs-bookies",
    "isolate-zk",
)


def complete(components: Iterable[Iterable[str]]) -> Grudge:
    """Every node drops every node outside its own component."""
    comps = [frozenset(c) for c in components]
    everyone = frozenset().union(*comps)
    return {n: everyone - c for c in comps for n in c}


def halves(nodes: Sequence[str]) -> Grudge:
    """The first floor(n/2) nodes against the rest."""
    mid = len(nodes) // 2
    return complete([nodes[:mid], nodes[mid:]])


def isolate(nodes: Sequence[str], alone: Iterable[str]) -> Grudge:
    """`alone` cut off from everyone else (and still talking among themselves)."""
    alone = frozenset(alone)
    return complete([alone, [n for n in nodes if n not in alone]])


def majorities_ring(nodes: Sequence[str]) -> Grudge:
    """Each node sees a majority (itself and its nearest ring neighbours), but no two
    nodes see the same majority. Ring order is `nodes` order."""
    n = len(nodes)
    majority = n // 2 + 1
    below = (majority - 1) // 2
    grudge = {}
    for i, node in enumerate(nodes):
        sees = {nodes[(i + k) % n] for k in range(-below, majority - below)}
        grudge[node] = frozenset(nodes) - sees
    return grudge


def bridge(nodes: Sequence[str]) -> Grudge:
    """Two halves that cannot see each other, and one node in the middle seeing both."""
    mid = len(nodes) // 2
    left, right = nodes[:mid], nodes[mid + 1 :]
    cut = complete([left, right])
    return {**cut, nodes[mid]: frozenset()}


def explicit(spec: Mapping[str, Iterable[str]], nodes: Sequence[str]) -> Grudge:
    """A grudge given as `{node: [nodes it drops]}`, checked against the cluster."""
    grudge = {n: frozenset(drops) for n, drops in spec.items()}
    unknown = sorted((set(grudge) | set().union(*grudge.values())) - set(nodes))
    if unknown:
        raise ValueError(f"grudge names unknown nodes {unknown}; nodes are {list(nodes)}")
    return grudge


def grudge(
    name: str | Mapping[str, Iterable[str]],
    nodes: Sequence[str],
    roles: Mapping[str, str],
    rng: random.Random,
    targets: Sequence[str] = (),
) -> Grudge:
    """The grudge called `name` (or an explicit one) over `nodes`; `roles` maps each node
    to "zk", "bookie" or "client"; `targets` are the nodes `isolate` cuts off (one drawn
    from `nodes` if none)."""
    if not isinstance(name, str):
        return explicit(name, nodes)
    by_role = {r: [n for n in nodes if roles[n] == r] for r in ("zk", "bookie", "client")}
    if name == "halves":
        return halves(nodes)
    if name == "random-halves":
        return halves(rng.sample(list(nodes), len(nodes)))
    if name == "isolate":
        return isolate(nodes, targets or [rng.choice(list(nodes))])
    if name == "majorities-ring":
        return majorities_ring(rng.sample(list(nodes), len(nodes)))
    if name == "bridge":
        return bridge(rng.sample(list(nodes), len(nodes)))
    if name == "clients-vs-bookies":
        if not by_role["client"]:
            raise ValueError("clients-vs-bookies needs client nodes; this cluster has none")
        return complete([by_role["client"], by_role["bookie"]])
    if name == "isolate-zk":
        return isolate(nodes, by_role["zk"])
    raise ValueError(f"unknown grudge {name!r}; choose one of {NAMES} or give {{node: [...]}}")
