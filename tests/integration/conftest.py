"""The integration tier's fixtures: a real ZooKeeper for the session and a fresh local
cluster of real bookie processes per test."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from bookie_image import bugs
from harness.runtime.local import LocalCluster
from harness.runtime.zookeeper import LocalZooKeeper


@pytest.fixture(scope="session")
def zookeeper(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Connect string of one real ZooKeeper (Debian's package) shared by the session."""
    server = LocalZooKeeper(tmp_path_factory.mktemp("zookeeper")).start()
    try:
        yield server.connect_string
    finally:
        server.stop()


@pytest.fixture
def ledgers_root() -> str:
    """A ZooKeeper root of its own, so tests sharing one ZooKeeper do not interfere."""
    return f"/t-{uuid.uuid4().hex[:12]}/ledgers"


@pytest.fixture
def local_cluster(
    request: pytest.FixtureRequest, zookeeper: str, ledgers_root: str, tmp_path: Path
) -> Iterator[LocalCluster]:
    """Three real bookie processes on loopback, registered under a fresh ledgers root.

    `@pytest.mark.parametrize("local_cluster", ["bug-a,bug-b"], indirect=True)` starts the
    bookies with those seeded bugs switched on."""
    seeded_bugs = getattr(request, "param", "")
    cluster = LocalCluster(
        tmp_path / "cluster",
        bookie_count=3,
        zk=zookeeper,
        ledgers_root=ledgers_root,
        extra_env={bugs.ENV_VAR: seeded_bugs} if seeded_bugs else {},
    )
    cluster.up()
    try:
        yield cluster
    finally:
        cluster.down()
