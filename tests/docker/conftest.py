"""The docker tier's session fixtures: the engine, a snapshot of the tree and the image
built from it, once per session for every module of tests/docker."""

from __future__ import annotations

import shutil
from pathlib import Path

import docker
import pytest

from bookie_image.image.build import build_image, project_root, source_files
from harness.errors import UserError
from harness.runtime.docker import docker_client


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
def image(client: docker.DockerClient, source_snapshot: Path) -> str:
    """The project image of the tree (built from scratch on a fresh machine)."""
    return build_image(client, root=source_snapshot).tag
