"""Network faults inside the nodes: partitions (iptables) and packet faults (tc netem for
delay, duplicate, reorder and corrupt; without them, loss through iptables' `statistic`
match and a rate limit through tbf/htb, which kernels without netem have).

Both need a node per network namespace, so the docker or ssh runtime (the local runtime's
processes share loopback and are refused at test validation). Where the Docker engine
refuses NET_ADMIN, a partition that isolates one node falls back to `docker network
disconnect` (recorded as the completion's `mechanism`); any finer grudge, and every packet
fault, is then unproven — never silently skipped. Rules go into a chain of
our own, BKCHAOS, jumped to from INPUT, so healing flushes exactly the rules the nemesis
added and nothing the image or docker put there; netem is the node's root qdisc, which a
container does not otherwise have.

Proofs are observations from the nodes themselves (`nemesis.nodeops.probe`): for a
partition, a TCP connect from every node to every other node's service port, each
`passed`, `refused` (the host answered; the process is down) or `dropped`, checked
against the grudge — both a drop that should pass and a pass that should drop make the
fault unproven; for netem, the qdisc as the kernel reports it and the connect time to the
node from a peer before and after.
"""

from __future__ import annotations

import asyncio
import re
import shlex
from dataclasses import dataclass
from typing import Any, Protocol

from nemesis.base import FaultNotProven, stream
from nemesis.grudge import Grudge, grudge
from nemesis.nodeops import NodeRuntime, on_node

CHAIN = "BKCHAOS"
PROBE_TIMEOUT_S = 1.0
SETTLE_PROBES = 5
SETTLE_PAUSE_S = 0.5
"""A partition's probes are repeated up to SETTLE_PROBES times, this far apart, before a
disagreement is final (a reconnected network interface takes a moment to carry traffic)."""
NETEM_DEFAULTS = {"delay_ms": 50, "jitter_ms": 10}
NETEM_KEYS = ("delay_ms", "jitter_ms", "loss_pct", "duplicate_pct", "reorder_pct", "corrupt_pct")
DELAY_SLACK_MS = 5.0
NO_TBF = (
    "the kernel has no tbf qdisc (CONFIG_NET_SCH_TBF / module sch_tbf): a rate limit cannot "
    "be injected on this host; load sch_tbf or use a kernel that has it"
)
TBF_LATENCY_MS = 500
"""How long a packet may wait in a rate limit's queue before tbf drops it (TCP resends)."""
TBF_MIN_BURST_BYTES = 1600
"""A token bucket must hold at least one full-size packet, or nothing ever leaves."""
NO_NETEM = (
    "the kernel has no netem qdisc (CONFIG_NET_SCH_NETEM / module sch_netem): delay, "
    "jitter, duplicate, reorder and corrupt cannot be injected on this host (loss and rate "
    "can, alone or together: iptables statistic and tbf); load sch_netem or use a kernel "
    "that has it"
)
NO_STATISTIC = (
    "iptables has no statistic match (CONFIG_NETFILTER_XT_MATCH_STATISTIC / module "
    "xt_statistic): packet loss cannot be injected on this host without netem"
)
LOSS_CHAIN = "BKCHAOS-LOSS"
"""Our own chain, jumped to from OUTPUT, holding a loss fault's random DROP rules (apart
from the partition's BKCHAOS chain, so either fault heals without touching the other)."""
NETEM_ONLY_KEYS = ("delay_ms", "jitter_ms", "duplicate_pct", "reorder_pct", "corrupt_pct")
"""Parameters only netem can do; loss and rate have a mechanism every kernel has."""


class NetRuntime(NodeRuntime, Protocol):
    nodes: list[Any]  # each with name, role ("zk" | "bookie" | "client"), ip, port


class DisconnectingRuntime(Protocol):
    """A runtime that can take a node off the network as a whole (docker without
    NET_ADMIN: `net_admin` is False there)."""

    net_admin: bool

    def disconnect(self, name: str) -> None: ...
    def reconnect(self, name: str) -> None: ...


def _has_net_admin(runtime: Any) -> bool:
    """Whether iptables / tc work on the nodes (runtimes that never lose them: True)."""
    return getattr(runtime, "net_admin", True)


NO_NET_ADMIN = (
    "the Docker engine refused NET_ADMIN, so there is no iptables or tc in the containers"
)


async def _sh(runtime: NetRuntime, node: str, script: str) -> str:
    code, out = await asyncio.to_thread(runtime.exec, node, ["sh", "-c", script])
    if code != 0:
        raise FaultNotProven(f"on {node}: `{script}` failed (exit {code}): {out.strip()}")
    return out


async def probe_all(runtime: NetRuntime, repeat: int = 1) -> dict[str, dict[str, Any]]:
    """From every node, a TCP connect to every other node's service port:
    {"a->b": {"result", "ms"}}."""
    nodes = runtime.nodes

    async def from_node(src: Any) -> dict[str, dict[str, Any]]:
        targets = {n.name: [n.ip, n.port] for n in nodes if n.name != src.name}
        seen = await on_node(
            runtime, src.name, "probe", targets=targets, timeout=PROBE_TIMEOUT_S, repeat=repeat
        )
        return {f"{src.name}->{dst}": v for dst, v in seen.items()}

    results: dict[str, dict[str, Any]] = {}
    for part in await asyncio.gather(*(from_node(n) for n in nodes)):
        results.update(part)
    return results


class PartitionNemesis:
    """`start-partition` / `stop-partition`.

    Op value: `grudge` — a name from nemesis.grudge.NAMES or an explicit
    `{node: [nodes it drops]}` — and `nodes` (who `isolate` cuts off). With only `nodes`,
    those nodes are isolated. The grudge applied is recorded in the completion.
    """

    fs = frozenset({"start-partition", "stop-partition"})

    def __init__(self, runtime: NetRuntime, seed: int = 0) -> None:
        self.runtime = runtime
        self.rng = stream(seed, "partition")
        self.touched: set[str] = set()
        self.disconnected: set[str] = set()

    async def invoke(self, op: dict[str, Any]) -> dict[str, Any]:
        value = dict(op.get("value") or {})
        if op["f"] == "stop-partition":
            return {**value, "proof": await self._heal()}
        names = [n.name for n in self.runtime.nodes]
        roles = {n.name: n.role for n in self.runtime.nodes}
        cut = grudge(value.get("grudge", "isolate"), names, roles, self.rng, value.get("nodes", ()))
        net_admin = _has_net_admin(self.runtime)
        isolated = None if net_admin else _only_isolated(cut, names)  # refused before acting
        if self.touched or self.disconnected:  # one partition at a time: the new replaces it
            await self._heal()
        if isolated is not None:
            runtime: DisconnectingRuntime = self.runtime  # type: ignore[assignment]
            await asyncio.to_thread(runtime.disconnect, isolated)
            self.disconnected.add(isolated)
            value["mechanism"] = f"docker network disconnect ({NO_NET_ADMIN}: isolation only)"
        else:
            await self._drop(cut)
        probes = await _probe_until_settled(self.runtime, cut)
        value["grudge"] = {n: sorted(d) for n, d in sorted(cut.items())}
        return {**value, "proof": {pair: p["result"] for pair, p in sorted(probes.items())}}

    async def _drop(self, cut: Grudge) -> None:
        """iptables DROP rules in each node for the nodes it holds a grudge against."""
        ips = {n.name: n.ip for n in self.runtime.nodes}
        for node, drops in sorted(cut.items()):
            if not drops:
                continue
            self.touched.add(node)
            await _sh(self.runtime, node, drop_rules([ips[d] for d in sorted(drops)]))

    async def _heal(self) -> dict[str, Any]:
        """Remove our chain from every node we touched and reconnect every node we took
        off the network; probe that everything passes."""
        runtime: DisconnectingRuntime = self.runtime  # type: ignore[assignment]
        for node in sorted(self.disconnected):
            await asyncio.to_thread(runtime.reconnect, node)
        self.disconnected.clear()
        for node in sorted(self.touched):
            await _sh(
                self.runtime,
                node,
                f"iptables -D INPUT -j {CHAIN} && iptables -F {CHAIN} && iptables -X {CHAIN}",
            )
        self.touched.clear()
        probes = await _probe_until_settled(self.runtime, {})
        return {pair: p["result"] for pair, p in sorted(probes.items())}

    async def heal(self) -> list[dict[str, Any]]:
        if not self.touched and not self.disconnected:
            return []
        return [{"f": "stop-partition", "proof": await self._heal()}]


def drop_rules(addresses: list[str]) -> str:
    """Shell that creates our chain, jumps to it from INPUT and drops what `addresses`
    send (each quoted: an address reaches a root shell on the node)."""
    rules = "".join(f" && iptables -A {CHAIN} -s {shlex.quote(ip)} -j DROP" for ip in addresses)
    return f"iptables -N {CHAIN} && iptables -I INPUT -j {CHAIN}{rules}"


def _only_isolated(cut: Grudge, names: list[str]) -> str:
    """Without iptables only a node's whole network can go: the grudge must cut one node
    off from every other node (and nothing else), or it is refused as unproven."""
    isolated = [n for n in names if set(cut.get(n, ())) == set(names) - {n}]
    others = set(names) - set(isolated)
    if len(isolated) != 1 or any(set(cut.get(n, ())) != set(isolated) for n in others):
        raise FaultNotProven(
            f"{NO_NET_ADMIN}; docker network disconnect can only isolate one node "
            f"from all others, not this grudge { ({n: sorted(d) for n, d in cut.items()}) }"
        )
    return isolated[0]


async def _probe_until_settled(runtime: NetRuntime, cut: Grudge) -> dict[str, dict[str, Any]]:
    """Probe until every pair behaves as `cut` says, a few times at most: a node put back
    on the network (`docker network connect`) answers a moment later, not at once."""
    for _ in range(SETTLE_PROBES - 1):
        probes = await probe_all(runtime)
        try:
            _check(probes, cut)
            return probes
        except FaultNotProven:
            await asyncio.sleep(SETTLE_PAUSE_S)
    probes = await probe_all(runtime)
    _check(probes, cut)
    return probes


def _check(probes: dict[str, dict[str, Any]], cut: Grudge) -> None:
    """Every pair the grudge separates (either way) drops; every other pair gets an
    answer (`passed`, or `refused` from a host whose process is down)."""
    wrong = []
    for pair, seen in probes.items():
        src, dst = pair.split("->")
        cut_off = dst in cut.get(src, ()) or src in cut.get(dst, ())
        if (seen["result"] == "dropped") != cut_off:
            wrong.append(
                f"{pair} {seen['result']} (expected {'dropped' if cut_off else 'an answer'})"
            )
    if wrong:
        raise FaultNotProven("partition probes disagree with the grudge: " + "; ".join(wrong))


class PacketNemesis:
    """`start-packet` / `stop-packet`: on each target node's interface, tc netem — or,
    for loss and rate alone, iptables' statistic match and tbf (packet_plan).

    Op value (all optional): `delay_ms`, `jitter_ms`, `loss_pct`, `duplicate_pct`,
    `reorder_pct`, `corrupt_pct` and `rate` (e.g. "1mbit"); defaults to a 50±10 ms delay.
    `to` (node names) shapes only the packets sent to those nodes, as Jepsen's `shape!`
    does for a link: an htb root sends them (u32 filters on their addresses) to a class
    whose qdisc is the one the whole interface would get; everything else passes as before.
    """

    fs = frozenset({"start-packet", "stop-packet"})

    def __init__(self, runtime: NetRuntime) -> None:
        self.runtime = runtime
        self.shaped: set[str] = set()

    def _peer(self, node: str) -> Any:
        return next(n for n in self.runtime.nodes if n.name != node)

    def _dev(self, node: str) -> str:
        """Shell that sets $dev to the node's interface on the run's network."""
        route = f"ip -o route get {shlex.quote(self._peer(node).ip)}"
        return f"dev=$({route} | sed 's/.* dev \\([^ ]*\\).*/\\1/')"

    async def _connect_ms(self, node: str, peer: str | None = None) -> float | None:
        """Median TCP connect time from `peer` (by default some other node) to `node`: a
        SYN-ACK leaves through the node's netem, so a delay there shows in full."""
        target = next(n for n in self.runtime.nodes if n.name == node)
        seen = await on_node(
            self.runtime,
            peer or self._peer(node).name,
            "probe",
            targets={node: [target.ip, target.port]},
            timeout=5.0,
            repeat=5,
        )
        return seen[node]["ms"]

    async def invoke(self, op: dict[str, Any]) -> dict[str, Any]:
        value = dict(op.get("value") or {})
        if op["f"] == "stop-packet":
            nodes = value.get("nodes") or sorted(self.shaped)
            return {"nodes": nodes, "proof": await self._clear(nodes)}
        nodes = value.get("nodes")
        if not nodes:
            raise ValueError("start-packet needs value.nodes (a list of node names)")
        params = netem_params(value)
        plan = packet_plan(params)
        to = packet_destinations(value, [n.name for n in self.runtime.nodes])
        if not _has_net_admin(self.runtime):
            raise FaultNotProven(
                f"{NO_NET_ADMIN}: packet faults ({plan.mechanism}) are unavailable"
            )
        addresses = [n.ip for n in self.runtime.nodes if n.name in to]
        peer = to[0] if to else None  # a shaped link's far end sees the shaping
        proof = {}
        for node in nodes:
            before = await self._connect_ms(node, peer)
            self.shaped.add(node)  # whatever part took effect is undone by heal
            shown = await self._shape(node, plan, addresses)
            after = await self._connect_ms(node, peer)
            proof[node] = {
                "mechanism": plan.mechanism,
                **shown,
                "connect_ms_before": before,
                "connect_ms_after": after,
            }
            floor = params.get("delay_ms", 0) - params.get("jitter_ms", 0) - DELAY_SLACK_MS
            if "delay_ms" in params and (after is None or after < floor):
                raise FaultNotProven(f"connects to {node} take {after} ms under {plan.qdisc}")
        return {**value, **params, "mechanism": plan.mechanism, "proof": proof}

    async def _shape(self, node: str, plan: PacketPlan, addresses: list[str]) -> dict[str, str]:
        """Install `plan` on `node` (replacing any earlier packet fault there) and return
        what the kernel reports of it: the qdisc (and filter) listing, the loss rules."""
        if plan.qdisc is None:
            tc = DELETE_ROOT
        elif addresses:
            tc = _link_shaping(plan.qdisc, addresses)
        else:
            tc = f"tc qdisc replace dev $dev root {plan.qdisc}"
        loss = (
            DELETE_LOSS
            if plan.loss_probability is None
            else loss_rules(plan.loss_probability, addresses)
        )
        show = "tc qdisc show dev $dev" + (" && tc filter show dev $dev" if addresses else "")
        try:
            shown = await _sh(
                self.runtime,
                node,
                f"{self._dev(node)} && {tc} && {loss} && {show} && echo {MARK} && "
                f"{{ iptables -S {LOSS_CHAIN} 2>/dev/null || true; }}",
            )
        except FaultNotProven as exc:
            if "qdisc kind is unknown" in str(exc):
                kind = (plan.qdisc or "").split()[0]
                raise FaultNotProven(NO_NETEM if kind == "netem" else NO_TBF) from None
            if "match `statistic'" in str(exc):
                raise FaultNotProven(f"{NO_STATISTIC}: {exc}") from None
            raise
        qdiscs, _, rules = shown.partition(MARK)
        if plan.qdisc is not None:
            kind = plan.qdisc.split()[0]
            if f"qdisc {kind} " not in qdiscs:
                raise FaultNotProven(f"no {kind} qdisc on {node} after adding it: {qdiscs.strip()}")
            unfiltered = [ip for ip in addresses if _u32_match(ip) not in qdiscs]
            if unfiltered:
                raise FaultNotProven(
                    f"no tc filter on {node} sends its packets to {unfiltered} through the "
                    f"shaping: {qdiscs.strip()}"
                )
        if plan.loss_probability is not None:
            check_loss_rules(rules, plan.loss_probability, addresses)
        return {"qdisc": qdiscs.strip(), "iptables": rules.strip()}

    async def _clear(self, nodes: list[str]) -> dict[str, Any]:
        """Unshape `nodes`, proven by their root qdisc and OUTPUT chain: none of ours is
        left. A node with nothing to remove (its start-packet never took effect) is simply
        proven unshaped."""
        proof = {}
        for node in nodes:
            shown = await _sh(
                self.runtime,
                node,
                f"{self._dev(node)} && {DELETE_ROOT} && {DELETE_LOSS} && "
                f"tc qdisc show dev $dev && echo {MARK} && iptables -S OUTPUT",
            )
            qdiscs, _, output_chain = shown.partition(MARK)
            left = [kind for kind in SHAPING_QDISCS if f"qdisc {kind} " in qdiscs]
            if LOSS_CHAIN in output_chain:
                left.append(f"iptables {LOSS_CHAIN}")
            if left:
                raise FaultNotProven(f"{node} still shapes its packets ({left}): {shown.strip()}")
            self.shaped.discard(node)
            proof[node] = {"qdisc": qdiscs.strip(), "connect_ms": await self._connect_ms(node)}
        return proof

    async def heal(self) -> list[dict[str, Any]]:
        if not self.shaped:
            return []
        return [{"f": "stop-packet", "proof": await self._clear(sorted(self.shaped))}]


MARK = "--bkchaos--"
"""Printed between the tc listing and the iptables listing of one shell command."""
DELETE_ROOT = "{ tc qdisc del dev $dev root 2>/dev/null || true; }"
"""Remove the root qdisc of $dev if there is one (none to remove is no error)."""
SHAPING_QDISCS = ("netem", "tbf", "htb")
"""The qdiscs a packet fault installs; none may be left once it stops."""
LINK_CLASS = "1:2"
"""The htb class a link-shaping fault (`to`) sends its destinations' packets to; 1:1, the
default, passes everything else unshaped."""
UNSHAPED_RATE = "10gbit"
HTB_QUANTUM_BYTES = 1514
"""One full Ethernet frame per round: htb's default quantum (rate / r2q) is far off for
both a 10gbit class and a slow one, and tc warns about it."""


def _link_shaping(qdisc: str, addresses: list[str]) -> str:
    """tc commands that shape only the packets sent to `addresses` with `qdisc` (a fresh
    root: an htb kept from an earlier fault would refuse the classes again)."""
    commands = [
        DELETE_ROOT,
        "tc qdisc add dev $dev root handle 1: htb default 1",
        *(
            f"tc class add dev $dev parent 1: classid {classid} htb rate {UNSHAPED_RATE} "
            f"quantum {HTB_QUANTUM_BYTES}"
            for classid in ("1:1", LINK_CLASS)
        ),
        f"tc qdisc add dev $dev parent {LINK_CLASS} handle 2: {qdisc}",
        *(
            "tc filter add dev $dev parent 1: protocol ip prio 1 u32 match ip dst "
            f"{shlex.quote(ip + '/32')} "
            f"flowid {LINK_CLASS}"
            for ip in addresses
        ),
    ]
    return " && ".join(commands)


def _u32_match(ip: str) -> str:
    """How `tc filter show` prints a u32 match on destination `ip` (offset 16 of the IP
    header): `match 0a000003/ffffffff at 16`."""
    hexed = "".join(f"{int(part):02x}" for part in ip.split("."))
    return f"match {hexed}/ffffffff at 16"


def packet_destinations(value: dict[str, Any], nodes: list[str]) -> list[str]:
    """A start-packet op's `to`: the nodes whose packets it shapes (empty: all), checked
    against the cluster's `nodes` before any node is touched."""
    to = value.get("to") or []
    if not isinstance(to, list) or not all(isinstance(n, str) for n in to):
        raise ValueError(f"value.to must be a list of node names, got {to!r}")
    unknown = sorted(set(to) - set(nodes))
    if unknown:
        raise ValueError(f"value.to names {unknown}, which are not nodes of {sorted(nodes)}")
    return sorted(set(to))


def parsed_packet(text: str) -> dict[str, Any]:
    """`--packet` ("rate=200kbit", "delay_ms=100,loss_pct=5", "rate=64kbit,to=b1+b2") as
    a start-packet op's parameters, checked as the op itself is (`to`'s node names by the
    test, which knows the cluster)."""
    params: dict[str, Any] = {}
    destinations: list[str] = []
    for item in text.split(","):
        key, sep, raw = (part.strip() for part in item.partition("="))
        if not sep or key not in (*NETEM_KEYS, "rate", "to"):
            raise ValueError(
                f"give key=value pairs, keys among {[*NETEM_KEYS, 'rate', 'to']} "
                f'(e.g. "rate=200kbit" or "delay_ms=100,loss_pct=5"), got {item.strip()!r}'
            )
        if key == "to":
            destinations = [name.strip() for name in raw.split("+") if name.strip()]
            if not destinations:
                raise ValueError('to names the nodes whose packets are shaped: "to=b1+b2"')
            continue
        if key == "rate":
            params[key] = raw
            continue
        try:
            number = float(raw)
        except ValueError:
            raise ValueError(f"{key} must be a number, got {raw!r}") from None
        params[key] = int(number) if number.is_integer() else number
    shaping = netem_params(params)  # ranges checked as every start-packet op's are
    return {**shaping, "to": destinations} if destinations else shaping


def netem_params(value: dict[str, Any]) -> dict[str, Any]:
    """A `start-packet` op's shaping parameters (NETEM_DEFAULTS when it gives none),
    checked before any node is touched — by the real nemesis and the simulation alike."""
    params = {k: value[k] for k in (*NETEM_KEYS, "rate") if k in value} or dict(NETEM_DEFAULTS)
    netem_arguments(params)
    return params


@dataclass(frozen=True)
class PacketPlan:
    """How a packet fault is injected: a root qdisc (netem, or tbf for a rate) and/or a
    random DROP in iptables for loss — netem when any parameter needs it (it then does
    everything, loss included), the portable mechanisms otherwise, on every kernel alike
    so a run means the same wherever it ran."""

    qdisc: str | None
    loss_probability: float | None

    @property
    def mechanism(self) -> str:
        """What the proof names: e.g. "tc netem", "iptables statistic + tc tbf"."""
        parts = ["iptables statistic"] if self.loss_probability is not None else []
        if self.qdisc:
            parts.append(f"tc {self.qdisc.split()[0]}")
        return " + ".join(parts)


def packet_plan(params: dict[str, Any]) -> PacketPlan:
    """The mechanisms for checked shaping `params` (netem_params' result)."""
    if any(key in params for key in NETEM_ONLY_KEYS):
        return PacketPlan(shaping_qdisc(params), None)
    qdisc = shaping_qdisc({"rate": params["rate"]}) if "rate" in params else None
    loss = params.get("loss_pct")
    return PacketPlan(qdisc, None if loss is None else loss / 100)


def loss_rules(probability: float, addresses: list[str]) -> str:
    """Shell that (re)creates LOSS_CHAIN with a random DROP of the packets $dev sends —
    to `addresses` only, if any — and jumps to it from OUTPUT once. A dropped outgoing
    TCP segment is resent by TCP as a lost one is."""
    match = [f"-d {shlex.quote(ip + '/32')} " for ip in addresses] or [""]
    drops = " && ".join(
        f"iptables -A {LOSS_CHAIN} -o $dev {dst}-m statistic --mode random "
        f"--probability {probability:.10f} -j DROP"
        for dst in match
    )
    return (
        f"{{ iptables -N {LOSS_CHAIN} 2>/dev/null || iptables -F {LOSS_CHAIN}; }} && "
        f"{{ iptables -C OUTPUT -j {LOSS_CHAIN} 2>/dev/null || "
        f"iptables -I OUTPUT -j {LOSS_CHAIN}; }} && {drops}"
    )


DELETE_LOSS = (
    f"{{ iptables -D OUTPUT -j {LOSS_CHAIN} 2>/dev/null; iptables -F {LOSS_CHAIN} 2>/dev/null; "
    f"iptables -X {LOSS_CHAIN} 2>/dev/null; true; }}"
)
"""Remove a loss fault's chain if there is one (none to remove is no error)."""

_PROBABILITY = re.compile(r"--probability ([0-9.]+)")


def check_loss_rules(shown: str, probability: float, addresses: list[str]) -> None:
    """`iptables -S LOSS_CHAIN` as the kernel reports it must hold one random DROP per
    destination (or one for the interface) at `probability`: the proof of a loss fault."""
    rules = [line for line in shown.splitlines() if line.startswith(f"-A {LOSS_CHAIN} ")]
    wanted = addresses or [None]
    for ip in wanted:
        found = [
            rule
            for rule in rules
            if "-j DROP" in rule
            and (ip is None or f"-d {ip}/32" in rule)
            and (m := _PROBABILITY.search(rule))
            and abs(float(m.group(1)) - probability) < 1e-6
        ]
        if not found:
            where = f"to {ip}" if ip else "on the interface"
            raise FaultNotProven(
                f"no iptables random DROP {where} at probability {probability} in "
                f"{LOSS_CHAIN}: {shown.strip()}"
            )


def shaping_qdisc(params: dict[str, Any]) -> str:
    """The root qdisc (kind and arguments) for a packet fault. A rate limit alone is tbf's
    job — a token bucket every kernel has, where netem is often not built (this machine's
    kernel has none); anything else, rate included, is netem's."""
    if set(params) != {"rate"}:
        return f"netem {netem_arguments(params)}"
    bytes_per_s = rate_bits_per_second(params["rate"]) / 8
    burst = max(TBF_MIN_BURST_BYTES, int(bytes_per_s / 250))  # 4 ms of the rate
    return f"tbf rate {tc_rate(params['rate'])} burst {burst} latency {TBF_LATENCY_MS}ms"


def netem_arguments(params: dict[str, Any]) -> str:
    """tc netem arguments for the op's parameters (reorder needs a delay to act on)."""
    for key in NETEM_KEYS:
        if key in params:
            _check_number(key, params[key])
    parts = []
    if "delay_ms" in params:
        parts.append(f"delay {params['delay_ms']}ms {params.get('jitter_ms', 0)}ms")
    for key, word in (
        ("loss_pct", "loss"),
        ("duplicate_pct", "duplicate"),
        ("reorder_pct", "reorder"),
        ("corrupt_pct", "corrupt"),
    ):
        if key in params:
            parts.append(f"{word} {params[key]}%")
    if "rate" in params:
        parts.append(f"rate {tc_rate(params['rate'])}")  # refused before touching a node
    if "reorder_pct" in params and "delay_ms" not in params:
        raise ValueError("netem reorders by delaying the other packets: give delay_ms too")
    return " ".join(parts)


MAX_DELAY_MS = 3_600_000


def _check_number(key: str, value: object) -> None:
    """A percentage from 0 to 100, or milliseconds from 0 to an hour (NaN refused too)."""
    top = 100 if key.endswith("_pct") else MAX_DELAY_MS
    number = isinstance(value, int | float) and not isinstance(value, bool)
    if not number or not 0 <= value <= top:  # type: ignore[operator]
        raise ValueError(f"{key} must be a number from 0 to {top}, got {value!r}")


RATE_UNITS = {
    "bit": 1,
    "kbit": 1e3,
    "mbit": 1e6,
    "gbit": 1e9,
    "tbit": 1e12,
    "bps": 8,
    "kbps": 8e3,
    "mbps": 8e6,
    "gbps": 8e9,
    "tbps": 8e12,
}
"""tc's rate units (tc(8), "RATES"): `…bit` are bits per second, `…bps` bytes per second."""
_RATE = re.compile(r"(\d+(?:\.\d+)?)([a-z]*)")


def rate_bits_per_second(rate: object) -> float:
    """A netem `rate` ("1mbit", "200kbps", a bare number of bits per second) in bits per
    second, so the real nemesis can refuse a typo before running tc and the simulation
    can serialise writes at that rate. Digits and a unit only: it reaches a shell script."""
    match = _RATE.fullmatch(str(rate).strip().lower())
    value = float(match[1]) * RATE_UNITS.get(match[2] or "bit", 0) if match else 0.0
    if not value > 0:
        raise ValueError(
            f"rate must be a positive number with one of tc's units {sorted(RATE_UNITS)} "
            f'(e.g. "1mbit"), got {rate!r}'
        )
    return value


def tc_rate(rate: object) -> str:
    """`rate` as tc's scripts spell it, once checked (so nothing else reaches the shell)."""
    rate_bits_per_second(rate)
    return str(rate).strip().lower()
