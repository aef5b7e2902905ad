"""The ssh runtime, for real: sshd in containers of the base image, driven over ssh.

The hosts are containers of `bkchaos-base` (Debian with python3, java, zookeeper,
iptables, sshd — but *not* the project) running only sshd, on a labelled network, so the
runtime's own install step is what puts bkchaos on them. The ssh runtime then resets,
starts and faults the cluster exactly as it would on real machines.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import docker
import paramiko
import pytest

from bookie_image.image.build import BASE_REPO, base_key
from harness.errors import UserError
from harness.runner import run_test
from harness.runtime.docker import RUN_LABEL, gc
from harness.runtime.ssh import INSTALLED_MARK, SshCluster
from harness.testspec import TestSpec
from tests.integration.test_docker_runtime import client, image, source_snapshot

pytestmark = [pytest.mark.docker, pytest.mark.timeout(900)]
__all__ = ["client", "image", "source_snapshot"]  # session fixtures, shared

HOSTS = 5  # zk1, b1-b3, c1
SSHD = (
    "mkdir -p /root/.ssh /run/sshd && printf '%s\\n' \"$AUTHORIZED_KEY\" > "
    "/root/.ssh/authorized_keys && chmod 700 /root/.ssh && chmod 600 /root/.ssh/authorized_keys"
    " && ssh-keygen -A >/dev/null && exec /usr/sbin/sshd -D -e"
)
BKCHAOS = [sys.executable, "-c", "from harness.cli import main; main()"]


def _wait_for_sshd(address: str, key: Path) -> None:
    deadline = time.monotonic() + 30
    while True:
        probe = paramiko.SSHClient()
        probe.set_missing_host_key_policy(paramiko.AutoAddPolicy())
        try:
            probe.connect(address, username="root", key_filename=str(key), timeout=3)
            return
        except (paramiko.SSHException, OSError):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
        finally:
            probe.close()


@pytest.fixture(scope="module")
def inventory(
    client: docker.DockerClient, image: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Path]:
    """An inventory of HOSTS fresh sshd containers (root, key auth), removed at the end.
    `image` is only needed for its side effect: the base image exists once it is built."""
    folder = tmp_path_factory.mktemp("ssh-hosts")
    key = paramiko.RSAKey.generate(2048)
    key.write_private_key_file(str(folder / "id_rsa"))
    run_id = f"ssh-{uuid.uuid4().hex[:8]}"
    labels = {RUN_LABEL: run_id}
    network = client.networks.create(f"bkchaos-{run_id}", driver="bridge", labels=labels)
    try:
        addresses = []
        for i in range(1, HOSTS + 1):
            container = client.containers.run(
                f"{BASE_REPO}:{base_key()}",
                entrypoint=["sh", "-c", SSHD],
                command=[],
                environment={"AUTHORIZED_KEY": f"ssh-rsa {key.get_base64()}"},
                labels=labels,
                name=f"bkchaos-{run_id}-h{i}",
                hostname=f"h{i}",
                cap_add=["NET_ADMIN"],
                network=network.name,
                detach=True,
            )
            container.reload()
            addresses.append(container.attrs["NetworkSettings"]["Networks"][network.name])
        hosts = [a["IPAddress"] for a in addresses]
        for address in hosts:
            _wait_for_sshd(address, folder / "id_rsa")
        entries = "".join(f'\n[[hosts]]\nhost = "{address}"\n' for address in hosts)
        path = folder / "inventory.toml"
        known = folder / "known_hosts"  # fresh containers: their keys are new, and recorded
        path.write_text(
            f'user = "root"\nkey = "{folder / "id_rsa"}"\nknown_hosts = "{known}"\n'
            f'host_keys = "accept-new"\n{entries}'
        )
        yield path
    finally:
        gc(client, run_id)


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
    """The docker runtime's nemeses work unchanged on ssh hosts: each kind is proven."""
    spec = TestSpec(
        runtime="ssh",
        inventory=str(inventory),
        bookies=3,
        clients=1,
        nemesis=("kill", "partition", "power-loss", "clock"),
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
