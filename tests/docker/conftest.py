"""The docker tier's fixtures, each built once per session for every module of tests/docker:
the engine, a snapshot of the tree and the image built from it, a cluster, and ssh hosts in
containers."""

from __future__ import annotations

import fcntl
import shutil
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import docker
import paramiko
import pytest

from bookie_image.image.build import BASE_REPO, base_key, build_image, project_root, source_files
from harness.errors import UserError
from harness.runtime.docker import RUN_LABEL, DockerCluster, docker_client, remove_run
from tests.helpers.docker import HOSTS


@pytest.fixture(scope="session")
def client() -> docker.DockerClient:
    try:
        return docker_client(timeout=900)
    except UserError as exc:
        pytest.skip(f"no Docker engine: {exc}")


@pytest.fixture(scope="session")
def source_snapshot(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the source tree, so that edits made meanwhile in a shared working tree
    neither change the image under test nor force rebuilds."""
    root, snapshot = project_root(), tmp_path_factory.mktemp("src")
    for rel in source_files(root):
        (snapshot / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(root / rel, snapshot / rel)
    return snapshot


@pytest.fixture(scope="session")
def image(
    client: docker.DockerClient, source_snapshot: Path, tmp_path_factory: pytest.TempPathFactory
) -> str:
    """The project image of the tree (built from scratch on a fresh machine). pytest-xdist
    workers (`make test`) take turns: the first builds, the others find every step cached
    (two debootstraps at once would share one `.partial` directory)."""
    shared = tmp_path_factory.getbasetemp().parent  # the workers' common temporary folder
    with open(shared / "bkchaos-image.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        return build_image(client, root=source_snapshot).tag


@pytest.fixture(scope="session")
def cluster(image: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[DockerCluster]:
    """ZooKeeper and three bookies in containers, libfaketime preloaded into the bookies
    (the clock nemesis needs it; the other faults ignore it), shared by every test of the
    tier that drives a cluster directly: each leaves it serving and healed."""
    with DockerCluster(
        tmp_path_factory.mktemp("docker-cluster"), bookie_count=3, image=image, faketime=True
    ).running() as c:
        yield c


SSHD = (
    "mkdir -p /root/.ssh /run/sshd && printf '%s\\n' \"$AUTHORIZED_KEY\" > "
    "/root/.ssh/authorized_keys && chmod 700 /root/.ssh && chmod 600 /root/.ssh/authorized_keys"
    " && ssh-keygen -A >/dev/null && exec /usr/sbin/sshd -D -e"
)


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


@pytest.fixture(scope="session")
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
        remove_run(client, run_id)
