"""`bkchaos cluster up|status|down|kill|stop|start|pause|resume`: the lifecycle on its own."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import click

from harness.errors import UserError
from harness.runtime.base import STATE_FILE, Cluster
from harness.runtime.local import LocalCluster
from harness.runtime.ownership import DETACHED

DEFAULT_DIR = Path(".bkchaos/cluster")
RUNTIMES = ("local", "docker", "ssh")

dir_option = click.option(
    "--dir",
    "state_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=DEFAULT_DIR,
    show_default=True,
    help="Directory holding the cluster's state, configs, data and logs.",
)

inventory_option = click.option(
    "--inventory",
    type=click.Path(exists=True, dir_okay=False, resolve_path=True),
    default=None,
    callback=lambda _ctx, _param, value: value or "",
    help="ssh: the TOML file naming the hosts (see docs/runtimes.md).",
)

ssh_accept_new_option = click.option(
    "--ssh-accept-new",
    is_flag=True,
    help="ssh: record the key of a host not yet in known_hosts instead of refusing it "
    '(as host_keys = "accept-new" in the inventory); a changed key is always refused.',
)

zk_option = click.option(
    "--zk",
    "zookeepers",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="ZooKeeper servers: 1, or an odd ensemble such as 3 (docker, ssh).",
)


@click.group()
def cluster() -> None:
    """Start, inspect and stop a cluster outside of a test."""


@cluster.command()
@click.option(
    "--runtime",
    type=click.Choice(RUNTIMES),
    default="docker",
    show_default=True,
    help="Where the nodes run: containers, processes on loopback, or ssh hosts.",
)
@click.option(
    "--bookies",
    type=click.IntRange(min=1, max=32),
    default=3,
    show_default=True,
    help="Bookies (b1…).",
)
@click.option(
    "--clients",
    type=click.IntRange(min=0, max=32),
    default=0,
    show_default=True,
    help="Client agents (c1…), reached by the controller on 127.0.0.1.",
)
@zk_option
@click.option("--json", "as_json", is_flag=True, help="Print the endpoints as JSON.")
@click.option("--image", default="", help="docker: run this image instead of the tree's own.")
@inventory_option
@ssh_accept_new_option
@dir_option
def up(
    runtime: str,
    bookies: int,
    clients: int,
    zookeepers: int,
    as_json: bool,
    image: str,
    inventory: str,
    ssh_accept_new: bool,
    state_dir: Path,
) -> None:
    """Start ZooKeeper, BOOKIES bookies and CLIENTS agents, print their endpoints, return."""
    started: Cluster
    sizes = {"bookie_count": bookies, "client_count": clients}
    if (runtime == "ssh") != bool(inventory):
        raise UserError("--runtime ssh needs --inventory FILE (its hosts), and only it takes one")
    if ssh_accept_new and runtime != "ssh":
        raise UserError("--ssh-accept-new is for --runtime ssh only")
    if zookeepers != 1 and runtime == "local":
        raise UserError("--zk: the local runtime runs one ZooKeeper; use --runtime docker or ssh")
    if runtime == "docker":
        from harness.cli.image import build_with_progress
        from harness.runtime.docker import DockerCluster

        tag = image or build_with_progress().tag
        started = DockerCluster(
            state_dir.resolve(), image=tag, zk_count=zookeepers, owner=DETACHED, **sizes
        )
    elif runtime == "ssh":
        from harness.runtime.ssh import SshCluster

        started = SshCluster(
            state_dir.resolve(),
            inventory=inventory,
            accept_new=ssh_accept_new,
            zk_count=zookeepers,
            owner=DETACHED,
            **sizes,
        )
    else:
        started = LocalCluster(state_dir.resolve(), **sizes, detached=True)
    started.up()
    _print_status(started.status(), as_json)


def _load(state_dir: Path) -> Cluster:
    """The cluster in `state_dir`, of whichever runtime started it."""
    runtime = "local"
    with contextlib.suppress(OSError, ValueError):
        runtime = json.loads((state_dir / STATE_FILE).read_text()).get("runtime", "local")
    if runtime == "docker":
        from harness.runtime.docker import DockerCluster

        return DockerCluster.load(state_dir)
    if runtime == "ssh":
        from harness.runtime.ssh import SshCluster

        return SshCluster.load(state_dir)
    return LocalCluster.load(state_dir)


@cluster.command()
@click.option("--json", "as_json", is_flag=True, help="Print the state as JSON.")
@dir_option
def status(as_json: bool, state_dir: Path) -> int:
    """Show each node's pid, liveness and registration (exit 1 if any is down)."""
    state = _load(state_dir).status()
    _print_status(state, as_json)
    healthy = state["zk_serving"] and all(b["alive"] and b["registered"] for b in state["bookies"])
    healthy = healthy and all(c["alive"] for c in state["clients"])
    return 0 if healthy else 1


@cluster.command()
@dir_option
def down(state_dir: Path) -> None:
    """Stop every process of the cluster; leaves none behind."""
    _load(state_dir).down()
    click.echo(f"cluster in {state_dir} is down")


def _node_command(name: str, help_text: str):
    @cluster.command(name=name, help=help_text)
    @click.argument("node")
    @dir_option
    def command(node: str, state_dir: Path) -> None:
        action = getattr(_load(state_dir), name)
        result = action(node)
        suffix = f" (pid {result})" if isinstance(result, int) else ""
        click.echo(f"{name} {node}: done{suffix}")

    return command


for _name, _help in (
    ("kill", "SIGKILL a bookie (proven gone before returning)."),
    ("stop", "Stop a bookie gracefully."),
    ("start", "Start a stopped bookie and wait until it is registered."),
    ("pause", "SIGSTOP a bookie."),
    ("resume", "SIGCONT a paused bookie."),
):
    _node_command(_name, _help)


def _print_status(state: dict, as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps(state, indent=2))
        return
    zk_state = "serving" if state["zk_serving"] else "DOWN"
    click.echo(f"zookeeper {state['zk']} ({zk_state}), ledgers root {state['ledgers_root']}")
    for b in state["bookies"]:
        health = "up" if b["alive"] and b["registered"] else ("starting" if b["alive"] else "down")
        click.echo(f"  {b['name']:4} {b['id']:22} pid {b['pid'] or '-':>7}  {health}")
    for c in state["clients"]:
        address, health = f"{c['host']}:{c['port']}", "up" if c["alive"] else "down"
        click.echo(f"  {c['name']:4} {address:22} pid {c['pid'] or '-':>7}  {health}")
