"""Packet loss without netem, on real containers: iptables' statistic match drops what a
node sends (to one link, or on its whole interface), TCP resends it, the proof names the
mechanism and the rule as the kernel lists it, and stop-packet leaves nothing behind.

Loss alone never uses netem, so this runs on every kernel, this machine's (no sch_netem)
included. The kernel counts what a rule drops in packets as they leave the stack, and with
segmentation offload a 96 KB transfer can be only a few large ones, so the link test sends
until the counter rises (at most ten transfers: none dropped has probability < 0.7^20).
"""

from __future__ import annotations

import re

import pytest

from harness.runtime.docker import DockerCluster
from nemesis.net import LOSS_CHAIN, PacketNemesis
from tests.helpers.docker import add_from, transfer_s

pytestmark = [pytest.mark.docker, pytest.mark.timeout(900)]


def dropped(cluster: DockerCluster, node: str) -> dict[str, int]:
    """Packets each of `node`'s loss rules dropped so far, by destination ("*": any)."""
    code, out = cluster.exec(node, ["iptables", "-L", LOSS_CHAIN, "-v", "-n", "-x"])
    assert code == 0, out
    counts = {}
    for line in out.splitlines():
        fields = line.split()
        if "DROP" in fields and "statistic" in line:
            destination = fields[8]  # pkts bytes target prot opt in out source destination
            counts["*" if destination == "0.0.0.0/0" else destination] = int(fields[0])
    return counts


async def test_loss_on_a_link_drops_only_what_goes_there_and_tcp_resends_it(cluster) -> None:
    nemesis = PacketNemesis(cluster)
    b1 = next(n.ip for n in cluster.nodes if n.name == "b1")
    op = {"f": "start-packet", "value": {"nodes": ["b2"], "loss_pct": 30, "to": ["b1"]}}
    done = await nemesis.invoke(op)
    assert done["mechanism"] == "iptables statistic"
    proof = done["proof"]["b2"]
    assert proof["mechanism"] == "iptables statistic"
    rule = re.search(rf"-d {b1}/32 .*--probability ([0-9.]+)", proof["iptables"])
    assert rule and float(rule.group(1)) == pytest.approx(0.3), proof  # as iptables stores it
    assert "netem" not in proof["qdisc"] and "tbf" not in proof["qdisc"]
    before = dropped(cluster, "b2")  # the proof's probes from b1 may have lost some
    assert list(before) == [b1]  # one rule, for the link to b1: other links pass
    await transfer_s(cluster, "b2", "b3", 96_000)  # another link: every byte arrives
    before = dropped(cluster, "b2")
    for _ in range(10):  # every byte arrives each time, resent by TCP
        await transfer_s(cluster, "b2", "b1", 96_000)
        if dropped(cluster, "b2")[b1] > before[b1]:
            break
    assert dropped(cluster, "b2")[b1] > before[b1]
    [healed] = await nemesis.heal()
    assert "b2" in healed["proof"]
    code, out = cluster.exec("b2", ["iptables", "-S", "OUTPUT"])
    assert code == 0 and LOSS_CHAIN not in out, out
    assert add_from(cluster, "b3")[0] == 0


async def test_loss_and_rate_together_need_no_netem(cluster) -> None:
    """Loss on the whole interface with a rate: iptables plus tbf, both in the proof."""
    nemesis = PacketNemesis(cluster)
    op = {"f": "start-packet", "value": {"nodes": ["b3"], "loss_pct": 30, "rate": "1mbit"}}
    done = await nemesis.invoke(op)
    assert done["mechanism"] == "iptables statistic + tc tbf"
    assert "qdisc tbf" in done["proof"]["b3"]["qdisc"]
    for _ in range(10):  # as above: offloaded segments are few
        await transfer_s(cluster, "b3", "b1", 96_000)
        if dropped(cluster, "b3")["*"] > 0:
            break
    assert dropped(cluster, "b3")["*"] > 0
    stopped = await nemesis.invoke({"f": "stop-packet", "value": {"nodes": ["b3"]}})
    assert "tbf" not in stopped["proof"]["b3"]["qdisc"]
    assert add_from(cluster, "b1")[0] == 0
