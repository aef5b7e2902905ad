"""What the docker tier's tests look up in the engine."""

from __future__ import annotations

import docker

from harness.runtime.docker import RUN_LABEL


def labelled(client: docker.DockerClient, run_id: str) -> dict[str, list]:
    label = {"label": f"{RUN_LABEL}={run_id}"}
    return {
        "containers": client.containers.list(all=True, filters=label),
        "networks": client.networks.list(filters=label),
        "volumes": client.volumes.list(filters=label),
    }
