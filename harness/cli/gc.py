"""`bkchaos gc`: remove what a killed controller left behind (Docker engine, ssh hosts)."""

from __future__ import annotations

import click

from harness.cli.cluster import inventory_option


@click.command()
@click.option("--run", "run_id", default=None, help="Only this run id (default: every run).")
@inventory_option
def gc(run_id: str | None, inventory: str) -> None:
    """Remove every container, network and volume labelled bkchaos.run (or one run's);
    with --inventory, instead stop every node and delete its data on those ssh hosts."""
    if inventory:
        from harness.runtime.ssh import SshCluster

        hosts = SshCluster.reset_inventory(inventory)
        click.echo(f"reset {len(hosts)} hosts: {', '.join(hosts)}")
        return
    from harness.runtime.docker import docker_client
    from harness.runtime.docker import gc as remove_labelled

    removed = remove_labelled(docker_client(), run_id)
    scope = f"run {run_id}" if run_id else "all runs"
    click.echo(
        f"{scope}: removed {removed['containers']} containers, "
        f"{removed['networks']} networks, {removed['volumes']} volumes"
    )
