"""The ssh runtime, for real: sshd in containers of the base image, driven over ssh.

The hosts are containers of `bkchaos-base` (Debian with python3, java, zookeeper,
iptables, sshd — but *not* the project) running only sshd, on a labelled network, so the
runtime's own install step is what puts bkchaos on them. The ssh runtime then resets,
starts and faults the cluster exactly as it would on real machines.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import docker
import pytest

from harness.errors import UserError
from harness.runner import run_test
from harness.runtime.docker import RUN_LABEL
from harness.runtime.ssh import INSTALLED_MARK, SshCluster
from harness.testspec import TestSpec
from tests.helpers.cli import BKCHAOS
from tests.helpers.docker import HOSTS

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
        cluster.start("b2")
        assert cluster.process_state("b2")[0] not in (None, killed)
        loaded = SshCluster.load(tmp_path / "c")  # what `bkchaos cluster …` sees
        assert loaded.hosts == cluster.hosts and loaded.status()["bookies"][1]["registered"]
    assert (tmp_path / "c" / "b1" / "bookie.log").stat().st_size > 0  # logs collected
    for node in cluster.nodes:
        code, out = _on_host(
            client, node.ip, "ls /run/bkchaos /var/lib/bkchaos 2>&1; pgrep -f [b]ookie_image"
        )
        assert code != 0 and "No such file" in out, (node.name, out)


def test_a_short_run_under_process_network_disk_and_clock_faults_checks_valid(
    inventory: Path, tmp_path: Path
) -> None:
    """The docker runtime's nemeses work unchanged on ssh hosts: each kind is proven.

    Partitions cut b1 off from the other bookies and the client, never from ZooKeeper: a
    bookie a drawn grudge cuts off ZooKeeper cannot register, so a restart that falls
    inside that partition is unproven and the run unknown (seen here: random-halves cut b1
    off zk1 just before its restart), as in the docker tier's two-minute run."""
    others = ["b2", "b3", "c1"]
    spec = TestSpec(
        runtime="ssh",
        inventory=str(inventory),
        bookies=3,
        clients=1,
        nemesis=("kill", "partition", "power-loss", "clock"),
        grudge=json.dumps({"b1": others, **{node: ["b1"] for node in others}}),
        nemesis_interval=3,
        # The nemesis runs one op at a time and a restart or power-on (boot, register)
        # takes 5-8 s: four kinds need ~40 s of fault ops; 30 s once drew no partition.
        time_limit=60,
        concurrency=4,
        rate=50,
        seed=11,
        store=str(tmp_path),
    )
    run_dir, results = run_test(spec)
    assert results["valid"] is True, (results["anomaly_types"], results["checkers"]["nemesis"])
    assert results["stats"]["ok"] > 0
    faults = [
        json.loads(line)
        for line in (run_dir / "history.jsonl").read_text().splitlines()
        if '"nemesis"' in line
    ]
    proven = {op["f"] for op in faults if op["type"] == "info" and "proof" in (op["value"] or {})}
    assert {"kill", "start-partition", "power-loss", "clock-bump"} <= proven, proven


def test_gc_resets_hosts_that_a_gone_controller_left_running(
    client: docker.DockerClient, inventory: Path, tmp_path: Path
) -> None:
    state_dir = tmp_path / "c"
    up = [*BKCHAOS, "cluster", "up", "--runtime", "ssh", "--inventory", str(inventory)]
    done = subprocess.run(
        [*up, "--bookies", "2", "--dir", str(state_dir)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    first = SshCluster.load(state_dir).nodes[0].ip
    assert _on_host(client, first, "test -s /run/bkchaos/supervisor.pid")[0] == 0
    with pytest.raises(UserError, match="hosts"):
        SshCluster(tmp_path / "d", bookie_count=9, inventory=str(inventory)).up()
    gc_run = subprocess.run(
        [*BKCHAOS, "gc", "--inventory", str(inventory)], capture_output=True, text=True, timeout=120
    )
    assert gc_run.returncode == 0 and f"reset {HOSTS} hosts" in gc_run.stdout, gc_run.stderr
    code, out = _on_host(client, first, "ls /run/bkchaos 2>&1; pgrep -f [b]ookie_image")
    assert code != 0 and "No such file" in out, out
