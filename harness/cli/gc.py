"""`bkchaos gc`: stop and remove what runs left behind when their controller died.

Every runtime lists its runs with their owners (harness/runtime/ownership.py) and reaps
one run on request; one rule, `_reap`, decides for all of them which runs go.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import click

from harness.cli.cluster import inventory_option
from harness.runtime.base import STATE_FILE
from harness.runtime.ownership import owner_state, run_processes, stop_run
from harness.store import RUN_RECORD

DEFAULT_DOCKER_SOCKET = "/var/run/docker.sock"


@dataclass
class Runs:
    """The runs one runtime finds here: {run id: owner}, and how to reap one (returns
    what it removed, in words)."""

    runtime: str
    owners: dict[str, str]
    reap: Callable[[str], str]


def _reap(runs: Runs, run_id: str | None, everything: bool) -> None:
    """Reap the runs (only `run_id`, if given) whose controller is proven gone. One whose
    controller cannot be told from here is reaped only when `--run` names it; a running
    or detached one only with `--all`. Each run is named with what happened to it."""
    for run in sorted(runs.owners):
        if run_id not in (None, run):
            continue
        verdict = owner_state(runs.owners[run])
        named = verdict.state == "unknown" and run_id == run
        if everything or verdict.state == "gone" or named:
            click.echo(f"{runs.runtime} run {run}: {verdict.why}; {runs.reap(run)}")
        else:
            hint = f"--run {run}" if verdict.state == "unknown" else "--all"
            click.echo(f"{runs.runtime} run {run}: {verdict.why}; left alone ({hint} reaps it)")


@click.command()
@click.option("--run", "run_id", default=None, help="Only this run id (default: every run).")
@click.option(
    "--all",
    "everything",
    is_flag=True,
    help="Also runs whose controller still runs and clusters started by `cluster up`.",
)
@inventory_option
@click.option(
    "--store",
    type=click.Path(file_okay=False, path_type=Path),
    default="store",
    show_default=True,
    help="The store whose unfinished ssh runs (their hosts) and `current` link to check.",
)
def gc(run_id: str | None, everything: bool, inventory: str, store: Path) -> None:
    """Reap runs whose controller is gone, on every runtime: local node processes (found
    by the run id every node carries), docker containers, networks and volumes (labelled
    bkchaos.run), and the nodes on ssh hosts (each host marks the run it serves) of the
    inventory given and of the store's unfinished ssh runs. A run whose controller still
    runs is left alone unless --all; one whose controller cannot be seen from here (another
    machine or container) unless --run names it."""
    _reap(_local_runs(), run_id, everything)
    docker_runs = _docker_runs()
    if docker_runs is None:
        click.echo("docker: no engine on this machine, nothing to remove there")
    else:
        _reap(docker_runs, run_id, everything)
    _reap(_ssh_runs(inventory, store), run_id, everything)
    _unlink_stale_current(store, run_id)


def _local_runs() -> Runs:
    processes = run_processes()
    owners = {run: next(iter(pids.values())) for run, pids in processes.items()}
    return Runs("local", owners, lambda run: f"stopped {len(stop_run(run))} processes")


def _docker_runs() -> Runs | None:
    """The docker engine's runs, or None without an engine on this machine."""
    if not os.environ.get("DOCKER_HOST") and not Path(DEFAULT_DOCKER_SOCKET).exists():
        return None
    from harness.runtime.docker import docker_client, remove_run, run_owners

    client = docker_client(timeout=60)  # an engine that should be there but is not: 254

    def reap(run: str) -> str:
        removed = remove_run(client, run)
        return (
            f"removed {removed['containers']} containers, "
            f"{removed['networks']} networks, {removed['volumes']} volumes"
        )

    return Runs("docker", run_owners(client), reap)


def _ssh_runs(inventory: str, store: Path) -> Runs:
    """The runs on the hosts of `inventory` and of the store's unfinished ssh runs (a
    finished run removed its nodes/ directory)."""
    from harness.runtime.ssh import SshCluster, read_inventory

    hosts = {(h.host, h.port): h for h in read_inventory(inventory)} if inventory else {}
    for state in sorted(store.glob(f"*/*/nodes/{STATE_FILE}")):
        try:
            if json.loads(state.read_text()).get("runtime") != "ssh":
                continue
            cluster = SshCluster.load(state.parent)
        except (OSError, ValueError, TypeError, KeyError):
            click.echo(f"ssh: cannot read {state}, skipped")
            continue
        hosts.update({(h.host, h.port): h for h in cluster.hosts})
    found, unreachable = SshCluster.host_runs(list(hosts.values())) if hosts else ({}, {})
    for host, why in unreachable.items():
        click.echo(f"ssh host {host}: not reached, skipped ({why})")

    def reap(run: str) -> str:
        on = found[run][1]
        SshCluster.reset_hosts(on, run)
        return f"reset {len(on)} hosts: {', '.join(map(str, on))}"

    return Runs("ssh", {run: owner for run, (owner, _) in found.items()}, reap)


def _unlink_stale_current(store: Path, run_id: str | None) -> None:
    """The store's `current` link outlives a controller that was killed: remove it once
    that run's controller (its RUN_RECORD) is proven gone (with `run_id`, only if it is
    that run's)."""
    link = store / "current"
    if not link.is_symlink():
        return
    try:
        record = json.loads((link / RUN_RECORD).read_text())
        owner, run = str(record["owner"]), record.get("run_id")
    except (OSError, ValueError, KeyError, TypeError):
        owner, run = "", None
    if run_id not in (None, run) or (link.exists() and owner_state(owner).state != "gone"):
        return
    target = os.readlink(link)
    link.unlink(missing_ok=True)
    click.echo(f"store: removed `current`: the controller of {target} is gone")
