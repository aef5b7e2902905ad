"""Which processes run under libfaketime on the supervised runtimes, and how."""

from __future__ import annotations

from pathlib import Path

from harness.runtime.docker import DockerCluster
from harness.runtime.supervised import Node


def _env(command: list[str]) -> list[str]:
    """The `VAR=value` words `env` is given before the command it execs."""
    assert command[0] == "env", command
    return [word for word in command[1:] if "=" in word and not word.startswith("-")]


def test_zookeeper_runs_faked_without_the_monotonic_fix_that_makes_a_jvm_spin(
    tmp_path: Path,
) -> None:
    nodes = [Node("zk1", "zk", "10.0.0.2", 2181), Node("b1", "bookie", "10.0.0.3", 3181)]
    cluster = DockerCluster(tmp_path, faketime=True, nodes=nodes)
    zk, _ = cluster._role_files(nodes[0])
    bookie, _ = cluster._role_files(nodes[1])
    assert "FAKETIME_FORCE_MONOTONIC_FIX=0" in _env(zk)
    assert any(w.startswith("LD_PRELOAD=") for w in _env(zk))  # still faked: clock faults
    assert not any("MONOTONIC_FIX" in w for w in _env(bookie))
    assert any(w.startswith("LD_PRELOAD=") for w in _env(bookie))
