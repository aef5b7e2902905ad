"""`bkchaos gc`: stop and remove what runs left behind when their controller died."""

from __future__ import annotations

import os
from pathlib import Path

import click

from harness.cli.cluster import inventory_option
from harness.runtime.ownership import owner_alive, run_processes, stop_run

DEFAULT_DOCKER_SOCKET = "/var/run/docker.sock"


def _doomed(owners: dict[str, str], run_id: str | None, everything: bool) -> list[str]:
    """The runs to reap: `run_id`'s (or every run's) whose owner is gone, or all with
    `everything`. A run whose owner is unknown (labelled before owners were) or detached
    (`cluster up`) is reaped only with `everything`."""
    chosen = [run for run in sorted(owners) if run_id in (None, run)]
    return [run for run in chosen if everything or (owners[run] and not owner_alive(owners[run]))]


@click.command()
@click.option("--run", "run_id", default=None, help="Only this run id (default: every run).")
@click.option(
    "--all",
    "everything",
    is_flag=True,
    help="Also runs whose controller still runs and clusters started by `cluster up`.",
)
@inventory_option
def gc(run_id: str | None, everything: bool, inventory: str) -> None:
    """Reap runs whose controller is gone: local node processes (found by the run id
    every node carries) and docker containers, networks and volumes (labelled
    bkchaos.run); a run whose controller still runs is left alone unless --all. With
    --inventory, instead stop every node and delete its data on those ssh hosts."""
    if inventory:
        from harness.runtime.ssh import SshCluster

        hosts = SshCluster.reset_inventory(inventory)
        click.echo(f"reset {len(hosts)} hosts: {', '.join(hosts)}")
        return
    local = run_processes()
    owners = {run: next(iter(pids.values())) for run, pids in local.items()}
    for run in sorted(owners):
        if run_id in (None, run) and run not in _doomed(owners, run_id, everything):
            click.echo(f"local run {run}: controller still running, left alone (--all reaps it)")
    for run in _doomed(owners, run_id, everything):
        click.echo(f"local run {run}: stopped {len(stop_run(run))} processes")
    _gc_docker(run_id, everything)


def _gc_docker(run_id: str | None, everything: bool) -> None:
    from harness.runtime.docker import docker_client, run_owners
    from harness.runtime.docker import gc as remove_labelled

    if not os.environ.get("DOCKER_HOST") and not Path(DEFAULT_DOCKER_SOCKET).exists():
        click.echo("docker: no engine on this machine, nothing to remove there")
        return
    client = docker_client(timeout=60)  # an engine that should be there but is not: 254
    owners = run_owners(client)
    doomed = _doomed(owners, run_id, everything)
    for run in sorted(set(owners) - set(doomed)):
        if run_id in (None, run):
            click.echo(f"docker run {run}: controller still running, left alone (--all reaps it)")
    for run in doomed:
        removed = remove_labelled(client, run)
        click.echo(
            f"docker run {run}: removed {removed['containers']} containers, "
            f"{removed['networks']} networks, {removed['volumes']} volumes"
        )
