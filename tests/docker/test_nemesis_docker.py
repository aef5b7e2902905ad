"""Network and disk nemeses on the docker runtime: real containers, iptables and tc.

The image comes from the same session fixtures as the runtime's own tests (a snapshot of
the tree, built once). Each fault is observed from outside the nemesis — a client that
runs inside a node, connect times, the bookie's cookie decision — and the cluster serves
again after heal.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest

from harness.runtime.docker import DockerCluster
from nemesis.base import FaultNotProven
from nemesis.clock import ClockNemesis
from nemesis.disk import CorruptNemesis, PowerLossNemesis, WipeNemesis
from nemesis.net import PacketNemesis, PartitionNemesis, probe_all
from nemesis.process import KillNemesis, PauseNemesis
from tests.helpers.docker import add_from, transfer_s

pytestmark = pytest.mark.timeout(900)


async def test_isolated_node_is_cut_off_and_its_client_cannot_add_until_heal(cluster) -> None:
    assert add_from(cluster, "b1")[0] == 0
    nemesis = PartitionNemesis(cluster, seed=3)
    done = await nemesis.invoke({"f": "start-partition", "value": {"nodes": ["b1"]}})
    assert done["grudge"]["b1"] == ["b2", "b3", "zk1"]
    proof = done["proof"]
    assert {proof[f"b1->{n}"] for n in ("zk1", "b2", "b3")} == {"dropped"}
    assert {proof[f"{n}->b1"] for n in ("zk1", "b2", "b3")} == {"dropped"}
    assert proof["b2->b3"] == proof["zk1->b2"] == "passed"
    code, out = add_from(cluster, "b1")  # the minority: no ZooKeeper, no other bookie
    assert code != 0, out
    [healed] = await nemesis.heal()
    assert set(healed["proof"].values()) == {"passed"}
    code, out = add_from(cluster, "b1")
    assert code == 0 and out.strip().endswith("0"), out
    code, rules = cluster.exec("b1", ["iptables", "-S"])
    assert "BKCHAOS" not in rules and code == 0


async def test_named_grudges_are_proven_by_probes(cluster) -> None:
    nemesis = PartitionNemesis(cluster, seed=5)
    for name in ("halves", "majorities-ring", "bridge", "isolate-zk"):
        done = await nemesis.invoke({"f": "start-partition", "value": {"grudge": name}})
        dropped = {pair for pair, seen in done["proof"].items() if seen == "dropped"}
        expected = {f"{a}->{b}" for a, drops in done["grudge"].items() for b in drops}
        assert dropped == expected | {f"{b}->{a}" for a, b in (p.split("->") for p in expected)}
    stopped = await nemesis.invoke({"f": "stop-partition", "value": {}})
    assert set(stopped["proof"].values()) == {"passed"}
    with pytest.raises(ValueError, match="has none"):
        await nemesis.invoke({"f": "start-partition", "value": {"grudge": "clients-vs-bookies"}})


async def test_netem_delay_is_measured_and_removed(cluster) -> None:
    code, out = cluster.exec("b3", ["tc", "qdisc", "replace", "dev", "lo", "root", "netem"])
    if code != 0:  # the containers share the host's kernel
        pytest.skip(f"this kernel cannot do netem: {out.strip()}")
    assert cluster.exec("b3", ["tc", "qdisc", "del", "dev", "lo", "root"])[0] == 0
    nemesis = PacketNemesis(cluster)
    op = {"f": "start-packet", "value": {"nodes": ["b2"], "delay_ms": 200, "jitter_ms": 10}}
    proof = (await nemesis.invoke(op))["proof"]["b2"]
    assert "netem" in proof["qdisc"] and "delay 200ms" in proof["qdisc"]
    assert proof["connect_ms_after"] >= 180 > proof["connect_ms_before"]
    probes = await probe_all(cluster, repeat=3)  # seen from every other node too
    assert all(probes[f"{n}->b2"]["ms"] >= 180 for n in ("zk1", "b1", "b3"))
    [healed] = await nemesis.heal()
    assert "netem" not in healed["proof"]["b2"]["qdisc"]
    assert healed["proof"]["b2"]["connect_ms"] < 100
    assert add_from(cluster, "b3")[0] == 0


async def test_packet_faults_fail_clearly_without_netem(cluster) -> None:
    """On a kernel without netem the fault is unproven with the reason — never a no-op."""
    code, _ = cluster.exec("b3", ["tc", "qdisc", "replace", "dev", "lo", "root", "netem"])
    if code == 0:
        cluster.exec("b3", ["tc", "qdisc", "del", "dev", "lo", "root"])
        pytest.skip("this kernel has netem")
    with pytest.raises(FaultNotProven, match="no netem qdisc"):
        await PacketNemesis(cluster).invoke({"f": "start-packet", "value": {"nodes": ["b1"]}})


async def test_a_rate_limit_alone_is_a_token_bucket_that_slows_what_the_node_sends(
    cluster,
) -> None:
    """`rate` without netem's other parameters installs tbf, which this kernel has even
    where it lacks netem: 96 KB out of b2 take seconds at 200 kbit/s, and moments after
    stop-packet."""
    nemesis = PacketNemesis(cluster)
    done = await nemesis.invoke(
        {"f": "start-packet", "value": {"nodes": ["b2"], "rate": "200kbit"}}
    )
    assert "qdisc tbf" in done["proof"]["b2"]["qdisc"] and "200Kbit" in done["proof"]["b2"]["qdisc"]
    shaped = await transfer_s(cluster, "b2", "b1", 96_000)
    [healed] = await nemesis.heal()
    assert "tbf" not in healed["proof"]["b2"]["qdisc"]
    again = await nemesis.invoke({"f": "stop-packet", "value": {"nodes": ["b2"]}})
    assert "tbf" not in again["proof"]["b2"]["qdisc"]  # nothing left to remove: no error
    unshaped = await transfer_s(cluster, "b2", "b1", 96_000)
    assert shaped >= 2.5 > 0.5 > unshaped, (shaped, unshaped)  # 96 KB at 25 KB/s: ~3.8 s
    assert add_from(cluster, "b3")[0] == 0


async def test_a_shaped_link_slows_only_what_goes_to_its_destinations(cluster) -> None:
    """`to`: b2's packets to b1 queue at 200 kbit/s, its packets to b3 do not; the proof
    shows the filter on b1's address."""
    nemesis = PacketNemesis(cluster)
    op = {"f": "start-packet", "value": {"nodes": ["b2"], "rate": "200kbit", "to": ["b1"]}}
    await nemesis.invoke(op)
    done = await nemesis.invoke(op)  # again on a shaped node: a fresh root, not a clash
    shown = done["proof"]["b2"]["qdisc"]
    assert "qdisc htb 1: root" in shown and "qdisc tbf 2: parent 1:2" in shown, shown
    to_b1 = await transfer_s(cluster, "b2", "b1", 96_000)
    to_b3 = await transfer_s(cluster, "b2", "b3", 96_000)
    [healed] = await nemesis.heal()
    assert "htb" not in healed["proof"]["b2"]["qdisc"]
    assert to_b1 >= 2.5 > 0.5 > to_b3, (to_b1, to_b3)  # 96 KB at 25 KB/s: ~3.8 s


async def test_disk_faults_run_inside_the_containers(cluster) -> None:
    """The same disk nemeses as on the local runtime, through `docker exec`."""
    assert add_from(cluster, "b1")[0] == 0
    wipe = WipeNemesis(cluster)
    proof = (await wipe.invoke({"f": "wipe", "value": {"nodes": ["b3"]}}))["proof"]["b3"]
    assert proof["cookie_check"] == "refused" and not proof["running"]
    restored = await wipe.invoke({"f": "restore", "value": {}})
    assert restored["proof"]["b3"]["cookie_check"] == "ok"
    power = PowerLossNemesis(cluster)
    dropped = (await power.invoke({"f": "power-loss", "value": {"nodes": ["b2"]}}))["proof"]
    assert dropped["b2"]["killed_pid"] and json.dumps(dropped)
    await power.heal()
    assert cluster.process_state("b2")[0] is not None
    await asyncio.to_thread(add_from, cluster, "b2")
    assert all(b["registered"] for b in cluster.status()["bookies"])


async def test_pause_and_kill_stop_the_bookie_answering_until_healed(cluster) -> None:
    """Seen from a client in another container: an add that needs every bookie's ack
    fails while one is paused or killed, and succeeds after resume / restart."""
    everyone = 3
    pause = PauseNemesis(cluster)
    proof = (await pause.invoke({"f": "pause", "value": {"nodes": ["b1"]}}))["proof"]["b1"]
    assert proof["state"] == "T" and proof["pid"]
    assert (await asyncio.to_thread(add_from, cluster, "zk1", everyone))[0] != 0
    [resumed] = await pause.heal()
    assert resumed["proof"]["b1"]["state"] != "T"
    assert (await asyncio.to_thread(add_from, cluster, "zk1", everyone))[0] == 0
    kill = KillNemesis(cluster)
    proof = (await kill.invoke({"f": "kill", "value": {"nodes": ["b2"]}}))["proof"]["b2"]
    assert proof["killed_pid"] and proof["gone"]
    assert (await asyncio.to_thread(add_from, cluster, "zk1", everyone))[0] != 0
    restarted = await kill.invoke({"f": "restart", "value": {}})
    assert restarted["proof"]["b2"]["new_pid"] != proof["killed_pid"]
    assert (await asyncio.to_thread(add_from, cluster, "zk1", everyone))[0] == 0


async def test_corruption_changes_the_bytes_it_reports_and_the_bookie_restarts(cluster) -> None:
    assert (await asyncio.to_thread(add_from, cluster, "zk1", 3))[0] == 0  # data on b3
    corrupt = CorruptNemesis(cluster, seed=4)
    done = await corrupt.invoke({"f": "corrupt", "value": {"nodes": ["b3"], "count": 2}})
    changes = done["proof"]["b3"]["changes"]
    assert done["proof"]["b3"]["bytes_changed"] == len(changes) == 2
    for change in changes:  # read back from outside the nemesis: the flipped byte is there
        read = f"dd if={change['file']} bs=1 skip={change['offset']} count=1 2>/dev/null"
        script = f"{read} | od -An -tx1"
        code, out = cluster.exec("b3", ["sh", "-c", script], 10)
        assert code == 0 and out.split()[-1] == change["after"], (change, out)
    restarted = await corrupt.invoke({"f": "corrupt-restart", "value": {}})
    assert restarted["proof"]["b3"]["registered"]
    assert (await asyncio.to_thread(add_from, cluster, "zk1", 3))[0] == 0


def _journal_stats_ts(cluster: DockerCluster, node: str) -> list[float]:
    """The bookie's own clock as its log shows it: the `ts` of each `journal-stats` line."""
    code, log = cluster.exec(node, ["cat", cluster.node(node).log_path], 10)
    assert code == 0, log
    lines = [json.loads(line) for line in log.splitlines() if line.startswith("{")]
    return [e["ts"] for e in lines if e["event"] == "journal-stats"]


def _clock_lead(cluster: DockerCluster, node: str) -> float:
    """How far `node`'s own clock runs ahead of the real one: the `journal-stats` line it
    logs within 0.5 s of an add to a ledger on all three bookies."""
    seen = len(_journal_stats_ts(cluster, node))
    code, out = add_from(cluster, "zk1", ensemble=3)
    assert code == 0, out
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        now, stamps = time.time(), _journal_stats_ts(cluster, node)
        if len(stamps) > seen:
            return stamps[-1] - now
        time.sleep(0.1)
    raise AssertionError(f"{node} logged no journal-stats line after an add")


async def test_clock_bump_moves_the_containers_bookie_clock_and_reset_restores_it(
    cluster,
) -> None:
    """Seen from outside: the bookie's log timestamps run an hour ahead, the cluster still
    serves, and after heal they agree with real time again — across a restart too."""
    nemesis = ClockNemesis(cluster, seed=2)
    bump = {"f": "clock-bump", "value": {"nodes": ["b1", "b2", "b3"], "delta_s": 3600}}
    proof = (await nemesis.invoke(bump))["proof"]
    # The nemesis proves each offset within half its probe's round trip; a docker exec on
    # a loaded machine can take seconds, so these bounds only tell 3600 s from none.
    assert all(abs(proof[n]["observed_offset_s"] - 3600) < 10 for n in ("b1", "b2", "b3"))
    assert proof["b1"]["libfaketime_mapped"]
    assert proof["b1"]["offset_file"] == "/etc/bkchaos/faketime"
    assert abs(await asyncio.to_thread(_clock_lead, cluster, "b2") - 3600) < 10
    await asyncio.to_thread(cluster.kill, "b2")
    await asyncio.to_thread(cluster.start, "b2")  # the offset file outlives the process
    assert abs(await asyncio.to_thread(_clock_lead, cluster, "b2") - 3600) < 10
    [healed] = await nemesis.heal()
    assert all(abs(p["observed_offset_s"]) < 10 for p in healed["proof"].values())
    assert abs(await asyncio.to_thread(_clock_lead, cluster, "b2")) < 10


async def test_without_net_admin_partitions_isolate_by_disconnecting(
    image: str, tmp_path: Path
) -> None:
    """An engine that refuses NET_ADMIN (here: containers created without it) is detected;
    isolating a node falls back to `docker network disconnect`, proven by the same probes,
    and what needs iptables or tc is unproven, never a silent no-op."""
    with DockerCluster(tmp_path, bookie_count=2, image=image, capabilities=[]).running() as c:
        assert not c.net_admin and "NET_ADMIN refused" in c.status()["network_faults"]
        nemesis = PartitionNemesis(c, seed=1)
        done = await nemesis.invoke({"f": "start-partition", "value": {"nodes": ["b1"]}})
        assert "docker network disconnect" in done["mechanism"]
        assert {done["proof"][pair] for pair in ("b1->zk1", "zk1->b1", "b2->b1")} == {"dropped"}
        assert done["proof"]["zk1->b2"] == "passed"
        with pytest.raises(FaultNotProven, match="can only isolate one node"):
            await nemesis.invoke({"f": "start-partition", "value": {"grudge": {"b1": ["b2"]}}})
        with pytest.raises(FaultNotProven, match="packet faults"):
            await PacketNemesis(c).invoke({"f": "start-packet", "value": {"nodes": ["b1"]}})
        await nemesis.invoke({"f": "start-partition", "value": {"nodes": ["b2"]}})
        [healed] = await nemesis.heal()
        assert set(healed["proof"].values()) == {"passed"}
        code, out = await asyncio.to_thread(add_from, c, "b2")
        assert code == 0, out


def _zookeeper_clock_lead(cluster: DockerCluster) -> float:
    """How far ZooKeeper's own clock runs ahead: the ctime it stamps on a new znode."""
    with cluster.zk_client() as zk:
        path = zk.create("/clock-probe-", b"", ephemeral=True, sequence=True)
        return zk.exists(path).ctime / 1000 - time.time()


async def test_clock_bump_on_zookeeper_moves_the_servers_own_clock(cluster) -> None:
    """ZooKeeper (a JVM) runs under the same preload: the znodes it creates carry its
    skewed clock, and it keeps serving."""
    nemesis = ClockNemesis(cluster, seed=3)
    done = await nemesis.invoke({"f": "clock-bump", "value": {"nodes": ["zk1"], "delta_s": 3600}})
    assert done["proof"]["zk1"]["libfaketime_mapped"]
    assert abs(await asyncio.to_thread(_zookeeper_clock_lead, cluster) - 3600) < 5
    await nemesis.heal()
    assert abs(await asyncio.to_thread(_zookeeper_clock_lead, cluster)) < 5
    assert (await asyncio.to_thread(add_from, cluster, "zk1"))[0] == 0
