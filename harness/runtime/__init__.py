"""Runtimes (DESIGN §5): `make_cluster` builds the cluster a test spec asks for."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from bookie_image import bugs

if TYPE_CHECKING:
    from harness.runtime.local import LocalCluster
    from harness.runtime.supervised import SupervisedCluster
    from harness.testspec import TestSpec


SMALL_DISK_MB = 256
"""A local bookie's ledger disk when the run fills disks: room for minutes of a busy
workload (a longer run may fill it by itself, and its bookie turns read-only, as it should)."""


def make_cluster(spec: TestSpec, nodes_dir: Path) -> LocalCluster | SupervisedCluster:
    """The spec's cluster (not started), keeping its state and node logs in `nodes_dir`.

    Seeded bugs reach every bookie and agent through BKCHAOS_BUGS. Docker's image is the
    tree's own, built or reused (cached by content) as the cluster comes up.
    """
    if spec.runtime == "sim":
        raise ValueError("the sim runtime has no cluster to make: run_test simulates it")
    env = {bugs.ENV_VAR: ",".join(spec.bugs)} if spec.bugs else {}
    faketime = any(kind.startswith("clock") for kind in spec.nemesis)
    sizes = {"bookie_count": spec.bookies, "client_count": spec.clients}
    if spec.runtime == "local":
        from harness.runtime.local import LocalCluster

        disks = SMALL_DISK_MB if "disk-full" in spec.nemesis else 0  # drawn or scheduled
        return LocalCluster(
            nodes_dir, **sizes, extra_env=env, faketime=faketime, small_disks_mb=disks
        )
    supervised = {**sizes, "zk_count": spec.zookeepers, "extra_env": env, "faketime": faketime}
    if spec.runtime == "ssh":
        from harness.runtime.ssh import SshCluster

        return SshCluster(
            nodes_dir, **supervised, inventory=spec.inventory, accept_new=spec.ssh_accept_new
        )
    from harness.runtime.docker import DockerCluster  # the docker SDK only when needed

    return DockerCluster(nodes_dir, **supervised)
