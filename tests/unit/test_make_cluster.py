"""`make_cluster`: the spec picks the runtime, and seeded bugs reach every node."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.errors import UserError
from harness.runtime import make_cluster
from harness.runtime.docker import DockerCluster
from harness.runtime.local import LocalCluster
from harness.runtime.ssh import SshCluster
from harness.testspec import TestSpec


def test_docker_spec_builds_a_docker_cluster_with_agents_and_bugs(tmp_path: Path) -> None:
    spec = TestSpec(runtime="docker", bookies=4, clients=3, bugs=("no-cookie",))
    cluster = make_cluster(spec, tmp_path)
    assert isinstance(cluster, DockerCluster)
    assert (cluster.bookie_count, cluster.client_count) == (4, 3)
    assert cluster.extra_env == {"BKCHAOS_BUGS": "no-cookie"}
    assert cluster.image == ""  # the tree's own, built or reused as it comes up


def test_local_spec_fakes_clocks_only_for_clock_faults(tmp_path: Path) -> None:
    plain = make_cluster(TestSpec(nemesis=("kill",)), tmp_path)
    clocked = make_cluster(TestSpec(nemesis=("clock",)), tmp_path)
    assert isinstance(plain, LocalCluster) and isinstance(clocked, LocalCluster)
    assert (plain.faketime, clocked.faketime, plain.extra_env) == (False, True, {})


def test_docker_and_ssh_fake_the_bookies_clocks_for_clock_faults(tmp_path: Path) -> None:
    docker_cluster = make_cluster(TestSpec(runtime="docker", nemesis=("clock",)), tmp_path)
    inventory = tmp_path / "hosts.toml"
    spec = TestSpec(runtime="ssh", inventory=str(inventory), nemesis=("clock-strobe", "kill"))
    ssh_cluster = make_cluster(spec, tmp_path)
    assert isinstance(docker_cluster, DockerCluster) and isinstance(ssh_cluster, SshCluster)
    assert docker_cluster.faketime and ssh_cluster.faketime
    assert ssh_cluster.inventory == str(inventory)


def test_the_ssh_runtime_needs_an_inventory_and_only_it_takes_one() -> None:
    with pytest.raises(UserError, match="needs --inventory"):
        TestSpec(runtime="ssh")
    with pytest.raises(UserError, match="needs --inventory"):
        TestSpec(runtime="local", inventory="hosts.toml")


def test_the_sim_runtime_takes_only_what_the_simulation_can_do(tmp_path: Path) -> None:
    TestSpec(runtime="sim", nemesis=("pause", "partition"), targets="minority", grudge="bridge")
    TestSpec(runtime="sim", nemesis=("wipe", "packet", "clock-strobe"))
    with pytest.raises(UserError, match="not supported on the sim runtime"):
        TestSpec(runtime="sim", nemesis=("wipe-reset",))
    with pytest.raises(UserError, match="needs a real runtime"):
        TestSpec(runtime="sim", nemesis=("kill",), targets="writer")
    with pytest.raises(UserError, match="local and sim runtimes run one"):
        TestSpec(runtime="sim", zookeepers=3)
    with pytest.raises(ValueError, match="no cluster to make"):
        make_cluster(TestSpec(runtime="sim"), tmp_path)
