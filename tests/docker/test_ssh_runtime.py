"""The ssh runtime, for real: sshd in containers of the base image, driven over ssh.

The hosts are containers of `bkchaos-base` (Debian with python3, java, zookeeper,
iptables, sshd — but *not* the project) running only sshd, on a labelled network, so the
runtime's own install step is what puts bkchaos on them. The ssh runtime then resets,
starts and faults the cluster exactly as it would on real machines.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import docker
import pytest

from harness.errors import UserError
from harness.runner import run_test
from harness.runtime.docker import RUN_LABEL
from harness.runtime.probe_tail import LATE_S
from harness.runtime.ssh import INSTALLED_MARK, SshCluster
from harness.testspec import TestSpec
from nemesis.kinds import START_STOP
from tests.helpers.cli import BKCHAOS
from tests.helpers.runs import (
    KILL_AND_PAUSE_ON_RECOVERIES,
    assert_fired_on_the_named_bookies,
    proven_faults,
)

pytestmark = pytest.mark.timeout(900)


def _on_host(client: docker.DockerClient, address: str, script: str) -> tuple[int, str]:
    """Look at a host from outside the runtime (docker exec into its container)."""
    for container in client.containers.list(filters={"label": RUN_LABEL}):
        networks = container.attrs["NetworkSettings"]["Networks"].values()
        if any(n["IPAddress"] == address for n in networks):
            result = container.exec_run(["sh", "-c", script])
            return result.exit_code, result.output.decode(errors="replace")
    raise AssertionError(f"no container has address {address}")


def test_up_installs_the_project_over_ssh_and_down_leaves_the_hosts_clean(
    client: docker.DockerClient, inventory: Path, tmp_path: Path
) -> None:
    cluster = SshCluster(tmp_path / "c", bookie_count=3, client_count=1, inventory=str(inventory))
    with cluster.running():
        state = cluster.status()
        assert state["runtime"] == "ssh" and state["zk_serving"]
        assert all(b["alive"] and b["registered"] for b in state["bookies"])
        assert state["clients"][0]["alive"] and state["clients"][0]["ssh"].startswith("root@")
        code, mark = cluster.exec("b1", ["cat", INSTALLED_MARK])
        assert code == 0 and mark.strip()
        killed = cluster.kill("b2")
        assert cluster.process_state("b2") == (None, None)
        assert not cluster.runs_unstopped("b2")  # what a triggered fault reads of its target
        cluster.start("b2")
        assert cluster.process_state("b2")[0] not in (None, killed)
        assert cluster.runs_unstopped("b2")
        cluster.pause("b1")
        assert not cluster.runs_unstopped("b1")
        cluster.resume("b1")
        assert cluster.runs_unstopped("b1")
        loaded = SshCluster.load(tmp_path / "c")  # what `bkchaos cluster …` sees
        assert loaded.hosts == cluster.hosts and loaded.status()["bookies"][1]["registered"]
    assert (tmp_path / "c" / "b1" / "bookie.log").stat().st_size > 0  # logs collected
    for node in cluster.nodes:
        code, out = _on_host(
            client, node.ip, "ls /run/bkchaos /var/lib/bkchaos 2>&1; pgrep -f [b]ookie_image"
        )
        assert code != 0 and "No such file" in out, (node.name, out)


B1_CUT_OFF = {"b1": ["b2", "b3", "c1"], "b2": ["b1"], "b3": ["b1"], "c1": ["b1"]}
"""b1 cut off from the other bookies and the client, never from ZooKeeper: a bookie cut off
ZooKeeper cannot register, so a restart inside that partition would be unproven and the run
unknown (seen with a drawn grudge: random-halves cut b1 off zk1 just before its restart)."""

SSH_FAULTS = (
    {"at": 1, "f": "start-partition", "value": {"nodes": ["b1"], "grudge": B1_CUT_OFF}},
    {"at": 2, "f": "kill", "value": {"nodes": ["b2"]}},
    {"at": 3, "f": "clock-bump", "value": {"nodes": ["b1"]}},
    {"at": 4, "f": "restart", "value": {"nodes": ["b2"]}},
    {"at": 5, "f": "stop-partition", "value": {"nodes": ["b1"]}},
    {"at": 6, "f": "power-loss", "value": {"nodes": ["b3"]}},
    {"at": 7, "f": "clock-reset", "value": {"nodes": ["b1"]}},
    {"at": 8, "f": "power-on", "value": {"nodes": ["b3"]}},
)
"""A process, a network, a disk and a clock fault, each while another holds."""


def test_a_short_run_under_process_network_disk_and_clock_faults_checks_valid(
    inventory: Path, tmp_path: Path
) -> None:
    """The docker runtime's nemeses work unchanged on ssh hosts: each fault is proven and a
    correct build checks valid. The steps are given, so every kind runs in every run (30 s
    of drawn faults once drew no partition). The nemesis runs one op at a time and a
    restart (boot, register) takes 5-8 s: the last start comes after one restart and two
    partition changes; a stop the time limit cuts off is done by the final heal (proven:
    the nemesis checker says so)."""
    spec = TestSpec(
        runtime="ssh",
        inventory=str(inventory),
        bookies=3,
        clients=1,
        schedule=SSH_FAULTS,
        time_limit=30,
        concurrency=4,
        rate=50,
        seed=11,
        store=str(tmp_path),
    )
    run_dir, results = run_test(spec)
    assert results["valid"] is True, (results["anomaly_types"], results["checkers"]["nemesis"])
    assert results["stats"]["ok"] > 0
    proven = proven_faults(run_dir / "history.jsonl")
    starts = {START_STOP[kind][0] for kind in spec.nemesis}
    assert len(starts) == 4 and starts <= proven, proven


def test_a_kill_and_a_pause_fire_on_recovery_started_over_ssh(
    inventory: Path, tmp_path: Path
) -> None:
    """Steps triggered by probes replay on ssh hosts as on docker: a follower on each node
    streams its probe lines over an ssh channel (tests/helpers/runs.py says what is
    checked). These hosts share this machine's clock, so `written_s` is comparable."""
    spec = TestSpec(
        runtime="ssh",
        inventory=str(inventory),
        bookies=3,
        clients=1,
        schedule=KILL_AND_PAUSE_ON_RECOVERIES,
        time_limit=15,
        writer_crashes=0.1,
        takeovers=0.1,
        seed=3,
        store=str(tmp_path),
    )
    run_dir, results = run_test(spec)
    assert results["valid"] is True, (results["anomaly_types"], results["checkers"]["nemesis"])
    for op in assert_fired_on_the_named_bookies(run_dir, LATE_S):
        print(op["f"], op["value"]["probe_timing"], op["time"] / 1e9)


ORPHAN = """
import os, sys
from pathlib import Path
from harness.runtime.ssh import SshCluster
cluster = SshCluster(Path(sys.argv[1]), bookie_count=1, inventory=sys.argv[2]).up()
print(cluster.run_id, flush=True)
os._exit(0)  # no teardown: its hosts are left to a controller that is gone
"""


def test_gc_resets_only_the_hosts_of_runs_whose_controller_is_gone(
    client: docker.DockerClient, inventory: Path, tmp_path: Path
) -> None:
    """Each host marks the run it serves and that run's controller. A run whose
    controller died (found through the store's unfinished ssh run) is reset by `gc`; a
    live run keeps its hosts: `gc` leaves it, and another `up` on them is refused."""
    text = inventory.read_text()
    head, *entries = text.split("[[hosts]]")
    rest = tmp_path / "rest.toml"  # the last three hosts: the first two stay ours
    rest.write_text(head + "".join(f"[[hosts]]{entry}" for entry in entries[2:]))
    ours = SshCluster(tmp_path / "ours", bookie_count=1, inventory=str(inventory))
    with ours.running():
        orphan_dir = tmp_path / "store" / "t" / "1" / "nodes"  # as `bkchaos test` leaves it
        made = subprocess.run(
            [sys.executable, "-c", ORPHAN, str(orphan_dir), str(rest)],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert made.returncode == 0, made.stderr[-2000:]
        orphan_id = made.stdout.split()[-1]
        orphan_host = SshCluster.load(orphan_dir).nodes[0].ip
        assert _on_host(client, orphan_host, "test -s /run/bkchaos/supervisor.pid")[0] == 0

        with pytest.raises(UserError, match=f"run the nodes of run {ours.run_id}"):
            SshCluster(tmp_path / "d", bookie_count=1, inventory=str(inventory)).up()
        gc = [*BKCHAOS, "gc", "--store", str(tmp_path / "store"), "--inventory", str(inventory)]
        live = subprocess.run([*gc, "--run", ours.run_id], capture_output=True, text=True)
        assert live.returncode == 0 and "is running; left alone" in live.stdout, live.stderr
        state = ours.status()  # its nodes still run
        assert state["zk_serving"] and state["bookies"][0]["alive"], (state, ours.log_tail("b1"))

        reaped = subprocess.run([*gc, "--run", orphan_id], capture_output=True, text=True)
        assert reaped.returncode == 0 and "is gone; reset 2 hosts" in reaped.stdout, (
            reaped.stdout + reaped.stderr
        )
        code, out = _on_host(client, orphan_host, "ls /run/bkchaos 2>&1; pgrep -f [b]ookie_image")
        assert code != 0 and "No such file" in out, out
