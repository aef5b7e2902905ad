"""Docker exec output that the engine loses is read back from the node's copy
(harness.runtime.docker: docker-py #2042, moby #27289)."""

from __future__ import annotations

import subprocess
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from harness.runtime import docker as docker_runtime
from harness.runtime import make_cluster
from harness.testspec import TestSpec


def wrapped(argv: list[str], path: Path) -> str:
    """What the node's shell prints for `argv` under the exec wrapper (run here, locally)."""
    script = docker_runtime.exec_script(str(path))
    done = subprocess.run(["sh", "-c", script, "sh", *argv], capture_output=True, text=True)
    return done.stdout


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["echo", "hello"], (0, "hello\n")),
        (["sh", "-c", "printf 'no newline'; exit 3"], (3, "no newline")),
        (["true"], (0, "")),
        (["sh", "-c", "echo to stderr >&2; exit 1"], (1, "to stderr\n")),
        (["echo", "bkchaos-exec-exit 7"], (0, "bkchaos-exec-exit 7\n")),
    ],
)
def test_the_wrapper_keeps_output_and_exit_code(
    argv: list[str], expected: tuple[int, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(docker_runtime, "EXEC_OUTPUT_DIR", str(tmp_path))
    printed = wrapped(argv, tmp_path / "out")
    assert docker_runtime.split_exec_output(printed) == expected
    assert (tmp_path / "out").read_text() == printed


@pytest.mark.parametrize("lost", ["", "hello\n", "hello\n\nbkchaos-exec-exit "])
def test_output_without_its_end_mark_is_lost(lost: str) -> None:
    assert docker_runtime.split_exec_output(lost) is None


class LosingContainer:
    """Runs execs with the local shell; the first `losses` replies come back empty, as
    the engine's do now and then."""

    def __init__(self, losses: int) -> None:
        self.losses = losses
        self.calls: list[list[str]] = []

    def exec_run(self, argv: list[str]) -> Any:
        self.calls.append(argv)
        done = subprocess.run(argv, capture_output=True)
        output = b"" if len(self.calls) <= self.losses else done.stdout
        return SimpleNamespace(exit_code=done.returncode, output=output)


def cluster_with(
    container: LosingContainer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> docker_runtime.DockerCluster:
    monkeypatch.setattr(docker_runtime, "EXEC_OUTPUT_DIR", str(tmp_path / "exec"))
    cluster = make_cluster(TestSpec(runtime="docker"), tmp_path)
    monkeypatch.setattr(cluster, "_container", lambda name: container)
    return cluster


def test_a_lost_reply_is_read_back_from_the_node(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    container = LosingContainer(losses=2)
    cluster = cluster_with(container, tmp_path, monkeypatch)
    assert cluster._run("b1", ["sh", "-c", "echo proof; exit 4"]) == (4, "proof\n")
    assert [argv[0] for argv in container.calls] == ["sh", "cat", "cat"]


def test_a_reply_lost_every_time_is_returned_as_the_engine_gave_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    container = LosingContainer(losses=99)
    cluster = cluster_with(container, tmp_path, monkeypatch)
    assert cluster._run("b1", ["echo", "proof"]) == (0, "")
    assert len(container.calls) == 1 + docker_runtime.EXEC_READBACKS
