"""Elle-style dependency-graph checker (docs/history.md §4, DESIGN §8).

Nodes are calls: appends that did not fail, and ok reads. Edges:
- ww: successive writers in a ledger's version order (its closed read, else acks and
  tail reads), and from a stream ledger's last writer to the next ledger's first;
- wr: the writer of the highest entry a read returned -> the read (lower entries follow
  through ww, as Elle infers list-append dependencies from the last element);
- rw: a closed read -> each ok append of its ledger it did not return (tail reads add
  none: a reader may legally lag the LAC);
- process: successive calls of one process; realtime: a call that completed ok before
  another was invoked (info calls never complete, so they have no outgoing realtime edge).

Near-linear on valid histories: order calls by the history position of their completion.
Realtime and process edges always go forward in that order, so every cycle contains a
data edge that goes backward, and lies within the span its backward edges cover (to
come back from its highest call to its lowest, the cycle must cross every position in
between on a backward edge). Only the calls in the merged spans of backward data edges
go into the networkx graph, with realtime edges linked to the frontier of latest
completions (Elle's trick); its strongly connected components are then each explained
by one short cycle (`shortest_cycle`: BFS from its first nodes, detours replaced by
direct edges, realtime ones included), one sentence per step. A cycle whose rw edges
all come from a ledger's authoritative closed read only restates the lost appends they
rest on: its case says so (`derived_from`).
"""

from __future__ import annotations

import bisect
from collections import deque
from collections.abc import Iterator
from itertools import compress, islice, pairwise, repeat
from operator import attrgetter, eq, ge, invert, is_
from typing import TYPE_CHECKING, Any, NamedTuple

from checkers.history import Append, Call, History
from checkers.ledger import Content, authoritative, content_order, in_entry_order, unmatched
from checkers.result import Case, case, collect
from checkers.stream import stream_orders

if TYPE_CHECKING:  # loaded when the graph is built: `import checkers` stays light
    import networkx as nx

Edge = tuple[Call, Call, str, tuple[Any, ...]]  # from, to, kind, what it rests on
_KEY, _TYPE = attrgetter("key"), attrgetter("type")


class Writers(NamedTuple):
    """A ledger's writers in its version order: appends not failed, a run of entries
    carrying one append's payload counted once, with the run's first and last entry."""

    calls: list[Call]
    keys: list[int]  # the calls' keys: where they completed
    firsts: list[int]
    lasts: list[int]

    def ww(self, ledger: Any, i: int) -> Edge:
        """The ww edge from writer i to writer i + 1."""
        why = (ledger, self.lasts[i], ledger, self.firsts[i + 1])
        return self.calls[i], self.calls[i + 1], "ww", why


def ledger_writers(h: History, auth: dict[Any, Content]) -> dict[Any, Writers]:
    """Ledger -> its writers, for ledgers with at least one."""
    appends = h.appends
    ordered = content_order(h, auth)
    found: dict[Any, Writers] = {}
    for ledger, at in _version_orders(h, auth).items():
        calls: list[Call] = []
        keys: list[int] = []
        firsts: list[int] = []
        lasts: list[int] = []
        prev: Append | None = None
        entries, apps = ordered[ledger] if ledger in auth else in_entry_order(at, appends)
        if _one_writer_an_entry(apps):  # nearly always: the lists at C speed
            found[ledger] = Writers(list(apps), list(map(_KEY, apps)), entries[:], entries[:])
            continue
        for e, a in zip(entries, apps, strict=True):
            if a is None or a.type == "fail":
                continue
            if a is not prev:
                calls.append(a)  # an Append is its own call
                keys.append(a.key)
                firsts.append(e)
                lasts.append(e)
                prev = a
            else:
                lasts[-1] = e
        if calls:
            found[ledger] = Writers(calls, keys, firsts, lasts)
    return found


def _one_writer_an_entry(apps: list[Append | None]) -> bool:
    """Whether every entry has its own append, not failed: then each is a writer."""
    return bool(apps) and not (
        any(map(is_, apps, repeat(None)))
        or "fail" in map(_TYPE, apps)
        or any(map(is_, apps, islice(apps, 1, None)))
    )


def data_edges(h: History, auth: dict[Any, Content]) -> Iterator[Edge]:
    """ww, wr and rw edges, each with the (ledger, entry…) it rests on."""
    writers = ledger_writers(h, auth)
    for ledger, w in writers.items():
        for i in range(len(w.calls) - 1):
            yield w.ww(ledger, i)
    yield from _linking_edges(h, auth, writers)


def _linking_edges(
    h: History, auth: dict[Any, Content], writers: dict[Any, Writers]
) -> Iterator[Edge]:
    """The data edges other than ww within a ledger: ww from a stream ledger's last
    writer to the next ledger's first, wr, and rw."""
    appends = h.appends
    for ledgers in stream_orders(h, auth).values():
        linked = [ledger for ledger in ledgers if ledger in writers]
        for before, after in pairwise(linked):
            w, x = writers[before], writers[after]
            yield w.calls[-1], x.calls[0], "ww", (before, w.lasts[-1], after, x.firsts[0])
    for r in h.reads:
        if r.entries:
            e, p = max(r.entries)
            a = appends.get(p)
            if a is not None and a.type != "fail":
                yield a.call, r.call, "wr", (r.ledger, e)
    missing = unmatched(h, auth)
    for ledger, reads in h.closed.items():
        acked = h.acked.get(ledger, ())
        yield from (
            (reads[0].call, a.call, "rw", (ledger, a.entry)) for a in missing.get(ledger, ())
        )
        for r in reads[1:]:
            at = {e: p for e, p in r.entries}
            for a in acked:
                if at.get(a.entry) != a.payload:
                    yield r.call, a.call, "rw", (ledger, a.entry)


def _version_orders(h: History, auth: dict[Any, Content]) -> dict[Any, dict[int, str]]:
    """Ledger -> {entry: payload} of its log: the closed read if any, else what acks
    and tail reads say (where they conflict, the ledger checker reports divergence)."""
    orders: dict[Any, dict[int, str]] = {}
    for ledger, acked in h.acked.items():
        if ledger not in auth:
            orders[ledger] = {a.entry: a.payload for a in reversed(acked)}
    for r in h.reads:
        at = orders.get(r.ledger)
        if at is not None and r.entries and r.ledger not in auth:
            for e, p in r.entries:
                at.setdefault(e, p)
    for ledger, content in auth.items():
        orders[ledger] = content.at
    return orders


def _merge(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Merged key ranges covered by backward edges: the only places a cycle can be."""
    merged: list[list[int]] = []
    for lo, hi in sorted(spans):
        if merged and lo <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], hi)
        else:
            merged.append([lo, hi])
    return [(lo, hi) for lo, hi in merged]


def _window_links(calls: list[Call], edges: list[Edge]) -> Iterator[Edge]:
    """One span's edges: its data edges, then process and realtime edges (realtime
    ones to the frontier of latest completions, Elle's trick)."""
    yield from edges
    last: dict[Any, Call] = {}
    for c in calls:
        prev = last.get(c.inv.process)
        if prev is not None:
            yield prev, c, "process", (c.inv.process,)
        last[c.inv.process] = c
    events = [(c.inv.index, c) for c in calls]
    events += [(c.done.index, c) for c in calls if c.type == "ok"]
    events.sort(key=lambda ev: ev[0])
    frontier: dict[int, Call] = {}  # completed calls not yet implied by a later one
    preds: dict[int, list[Call]] = {}
    for at, c in events:
        if at == c.inv.index:
            preds[at] = list(frontier.values())
            for p in preds[at]:
                yield p, c, "realtime", ()
        else:
            for p in preds[c.inv.index]:
                frontier.pop(p.inv.index, None)
            frontier[c.inv.index] = c


def _cyclic(calls: list[Call], links: list[Edge]) -> bool:
    """Whether a span's edges close a cycle (Kahn's algorithm): most spans have none
    and need no graph at all."""
    into = dict.fromkeys(map(id, calls), 0)
    out: dict[int, list[int]] = {}
    for u, v, _, _ in links:
        if u is not v:
            into[id(v)] += 1
            out.setdefault(id(u), []).append(id(v))
    ready = [n for n, k in into.items() if k == 0]
    done = 0
    while ready:
        n = ready.pop()
        done += 1
        for m in out.get(n, ()):
            into[m] -= 1
            if into[m] == 0:
                ready.append(m)
    return done < len(into)


def _add_window(g: nx.DiGraph, calls: list[Call], links: list[Edge]) -> None:
    """Add one span's calls and edges to the graph (spans are disjoint, so one graph
    holds them all without linking them)."""
    g.add_nodes_from(c.inv.index for c in calls)
    for u, v, kind, why in links:
        # the first kind wins: data edges come first, so a cycle needs the fewest
        # ordering assumptions
        if u is not v and not g.has_edge(u.inv.index, v.inv.index):
            g.add_edge(u.inv.index, v.inv.index, kind=kind, why=why, calls=(u, v))


START_LIMIT = 20
"""BFS starts per strongly connected component: the shortest cycle through any of its
first nodes (by index) is searched for, then shortened by direct edges."""
SHORTCUT_LIMIT = 200
"""Cycles longer than this are reported as found (shortening one is cubic in its length)."""


def _cycle_through(g: nx.DiGraph, component: set[int], start: int, below: int) -> list[int]:
    """A shortest cycle through `start` within `component` with fewer than `below` edges
    (BFS), or [] if there is none that short."""
    parent: dict[int, int] = {start: start}
    depth = {start: 0}
    queue = deque([start])
    while queue:
        u = queue.popleft()
        if depth[u] + 1 >= below:
            return []
        for v in g.successors(u):
            if v == start:
                path = [u]
                while path[-1] != start:
                    path.append(parent[path[-1]])
                return path[::-1]
            if v in component and v not in parent:
                parent[v] = u
                depth[v] = depth[u] + 1
                queue.append(v)
    return []


def _realtime(u: Call, v: Call) -> bool:
    """u completed ok before v was invoked: a realtime dependency, edge or not."""
    return u.type == "ok" and u.done.index < v.inv.index


def _hop(g: nx.DiGraph, calls: dict[int, Call], u: int, v: int) -> dict[str, Any] | None:
    """The edge u -> v: the graph's, or a realtime one the graph only implies (its
    realtime edges link each call to the frontier of latest completions, Elle's trick)."""
    if g.has_edge(u, v):
        return g.edges[u, v]
    if _realtime(calls[u], calls[v]):
        return {"kind": "realtime", "why": (), "calls": (calls[u], calls[v])}
    return None


def _shortcut(g: nx.DiGraph, calls: dict[int, Call], cycle: list[int]) -> list[int]:
    """The cycle with every detour replaced by a direct edge where one exists, farthest
    jumps first: a lost append acknowledged long before the closed read that missed it is
    two steps (realtime, rw), not a chain of realtime hops through everything between."""
    if len(cycle) > SHORTCUT_LIMIT:
        return cycle
    shortened = True
    while shortened and len(cycle) > 2:
        shortened = False
        k = len(cycle)
        for i in range(k):
            for skip in range(k - 1, 1, -1):
                if _hop(g, calls, cycle[i], cycle[(i + skip) % k]) is not None:
                    cycle = [cycle[(i + t) % k] for t in (0, *range(skip, k))]
                    shortened = True
                    break
            if shortened:
                break
    return cycle


def shortest_cycle(g: nx.DiGraph, calls: dict[int, Call], component: set[int]) -> list[int]:
    """A shortest cycle of a strongly connected component, as Elle reports one: BFS from
    its first START_LIMIT nodes, each cycle shortened by direct edges, the shortest kept
    (ties: the one through the lowest index)."""
    best: list[int] = []
    for start in sorted(component)[:START_LIMIT]:
        cycle = _cycle_through(g, component, start, len(best) or len(component) + 1)
        if cycle:
            cycle = _shortcut(g, calls, cycle)
            if not best or len(cycle) < len(best):
                best = cycle
            if len(best) == 2:
                break
    if not best:
        raise AssertionError("a strongly connected component has a cycle")  # pragma: no cover
    return best


def classify(kinds: list[str]) -> str:
    """Adya's name for a cycle with these edge kinds, suffixed with the order it needs."""
    rw = kinds.count("rw")
    name = ("G1c" if "wr" in kinds else "G0") if rw == 0 else "G-single" if rw == 1 else "G2"
    if "realtime" in kinds:
        return name + "-realtime"
    if "process" in kinds:
        return name + "-process"
    return name


def _describe(c: Call) -> str:
    v = c.inv.value
    if c.inv.f == "append":
        return f"op {c.inv.index} (append of {v.payload!r})"
    return f"op {c.inv.index} ({v.mode} read of ledger {v.ledger})"


def _because(kind: str, why: tuple[Any, ...], u: Call, v: Call) -> str:
    """Why u precedes v, in words that name both ops."""
    a, b = f"op {u.inv.index}", f"op {v.inv.index}"
    if kind == "ww":
        l1, e1, l2, e2 = why
        after = f"entry {e2}" if l1 == l2 else f"entry {e2} of ledger {l2}, next in the stream"
        return f"{a} wrote entry {e1} of ledger {l1} and {b} wrote {after} (ww)"
    if kind == "wr":
        return f"{b} read entry {why[1]} of ledger {why[0]}, written by {a} (wr)"
    if kind == "rw":
        return f"{a} read ledger {why[0]} closed without {b}'s acked entry {why[1]} (rw)"
    if kind == "process":
        return f"process {why[0]} ran {a}, then {b} (process)"
    return f"{a} completed (op {u.done.index}) before {b} was invoked (realtime)"


def _cycle_case(
    g: nx.DiGraph, calls: dict[int, Call], cycle: list[int], auth: dict[Any, Content]
) -> tuple[str, Case]:
    hops = [_hop(g, calls, u, v) for u, v in zip(cycle, cycle[1:] + cycle[:1], strict=True)]
    steps = [
        f"{_describe(e['calls'][0])} precedes {_describe(e['calls'][1])}: "
        f"{_because(e['kind'], e['why'], *e['calls'])}"
        for e in hops
    ]
    name = classify([e["kind"] for e in hops])
    where: dict[str, Any] = {}
    rws = [e for e in hops if e["kind"] == "rw"]
    if rws and all(auth[e["why"][0]].read.call is e["calls"][0] for e in rws):
        # each rw edge is an acked append its ledger's closed content lacks: lost-append
        where["derived_from"] = [
            {"anomaly": "lost-append", "ledger": e["why"][0], "entry": e["why"][1]} for e in rws
        ]
    return name, case(
        "; ".join(steps) + ": a contradiction!",
        sorted(i for e in hops for i in e["calls"][0].ops),
        **where,
        cycle=[
            {
                "from": e["calls"][0].inv.index,
                "to": e["calls"][1].inv.index,
                "kind": e["kind"],
                "step": step,
            }
            for e, step in zip(hops, steps, strict=True)
        ],
    )


def _explain_cycles(
    cyclic: list[tuple[list[Call], list[Edge]]], auth: dict[Any, Content]
) -> dict[str, list[Case]]:
    """The cases of the spans that close a cycle, by name: their calls and edges go into
    one networkx graph (imported here: most histories have no cycle to explain), each
    strongly connected component explained by one short cycle."""
    import networkx as nx

    g = nx.DiGraph()
    for calls, span_links in cyclic:
        _add_window(g, calls, span_links)
    by_index = {c.inv.index: c for calls, _ in cyclic for c in calls}
    found: dict[str, list[Case]] = {}
    for component in nx.strongly_connected_components(g):
        if len(component) > 1:
            cycle = shortest_cycle(g, by_index, component)
            name, c = _cycle_case(g, by_index, cycle, auth)
            found.setdefault(name, []).append(c)
    return found


def graph_anomalies(h: History) -> tuple[dict[str, list[Case]], dict[str, int]]:
    """Dependency cycles by name (sorted), and the sizes of what was looked at.

    The ww edges within a ledger (nearly all of them) stay implicit, as its writers'
    keys: backward ones are found by comparing neighbours, and only those inside a span
    are built, in the order `data_edges` gives them."""
    auth = authoritative(h)
    writers = ledger_writers(h, auth)
    keys = {ledger: w.keys for ledger, w in writers.items()}
    links = list(_linking_edges(h, auth, writers))
    backward = [(v.key, u.key) for u, v, _, _ in links if u.key >= v.key]
    for ks in keys.values():
        for i in compress(range(len(ks) - 1), map(ge, ks, islice(ks, 1, None))):
            backward.append((ks[i + 1], ks[i]))
    spans = _merge(backward)
    eligible = h.nodes
    eligible_keys = [c.key for c in eligible]  # increasing: calls are in completion order
    window_of: dict[int, int] = {}  # key -> its span's number
    members: list[list[Call]] = []
    for n, (lo, hi) in enumerate(spans):
        lo_at = bisect.bisect_left(eligible_keys, lo)
        members.append(eligible[lo_at : bisect.bisect_right(eligible_keys, hi)])
        window_of.update(dict.fromkeys(eligible_keys[lo_at : lo_at + len(members[-1])], n))
    inside: list[list[Edge]] = [[] for _ in spans]
    for ledger, ks in keys.items():
        # outside every span, a key maps to its own negative: no two neighbours match
        windows = list(map(window_of.get, ks, map(invert, ks)))
        for i in compress(range(len(ks) - 1), map(eq, windows, islice(windows, 1, None))):
            inside[windows[i]].append(writers[ledger].ww(ledger, i))
    for edge in links:
        n = window_of.get(edge[0].key)
        if n is not None and window_of.get(edge[1].key) == n:
            inside[n].append(edge)
    cyclic: list[tuple[list[Call], list[Edge]]] = []
    for calls, window_edges in zip(members, inside, strict=True):
        span_links = list(_window_links(calls, window_edges))
        if _cyclic(calls, span_links):
            cyclic.append((calls, span_links))
    found = _explain_cycles(cyclic, auth) if cyclic else {}
    ww_edges = sum(len(ks) - 1 for ks in keys.values())
    sizes = {"nodes": len(eligible), "data_edges": ww_edges + len(links), "windows": len(spans)}
    sizes["window_nodes"] = sum(map(len, members))
    return dict(sorted(found.items())), sizes


def check_graph(h: History) -> dict[str, Any]:
    """Dependency cycles under Adya's names, e.g. G0, G1c, G-single-realtime."""
    found, sizes = graph_anomalies(h)
    return collect({name: iter(cases) for name, cases in found.items()}) | sizes
