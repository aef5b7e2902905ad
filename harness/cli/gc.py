"""`bkchaos gc`: remove what a killed controller left behind in the Docker engine."""

from __future__ import annotations

import click


@click.command()
@click.option("--run", "run_id", default=None, help="Only this run id (default: every run).")
def gc(run_id: str | None) -> None:
    """Remove every container, network and volume labelled bkchaos.run (or one run's)."""
    from harness.runtime.docker import docker_client
    from harness.runtime.docker import gc as remove_labelled

    removed = remove_labelled(docker_client(), run_id)
    scope = f"run {run_id}" if run_id else "all runs"
    click.echo(
        f"{scope}: removed {removed['containers']} containers, "
        f"{removed['networks']} networks, {removed['volumes']} volumes"
    )
