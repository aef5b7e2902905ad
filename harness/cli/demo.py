"""`bkchaos demo`: what `make run` does until the chaos run lands.

It starts a local cluster (real ZooKeeper + 3 bookie processes), drives entries through a
ledger with the project's own client (E=3, WQ=2, AQ=2), kills a bookie mid-stream so the
writer must change its ensemble, closes the ledger, re-opens it with recovery, reads every
entry back and checks each one, then stops the cluster. Exit 0 only if every acknowledged
entry was read back intact.
"""

from __future__ import annotations

import asyncio
import shutil
import time
from pathlib import Path

import click

from harness.runtime.local import LocalCluster

PASSWORD = b"demo"


async def _drive(cluster: LocalCluster, entries: int) -> tuple[int, list[int]]:
    """Write `entries` across a bookie kill, recover, read back; (ledger id, bad entry ids)."""
    from bookie_image.client import BookKeeper

    async with BookKeeper(zk=cluster.zk, ledgers_root=cluster.ledgers_root) as bk:
        lh = await bk.create_ledger(
            ensemble=3, write_quorum=2, ack_quorum=2, password=PASSWORD, digest="crc32c"
        )
        click.echo(f"created ledger {lh.id} on {', '.join(lh.metadata.ensembles[0][1])}")
        payloads = [f"demo-{lh.id}-{i}".encode() for i in range(entries)]
        for i, payload in enumerate(payloads):
            if i == entries // 2:  # kill a bookie the ledger writes to: forces a new fragment
                victim = cluster.node(lh.metadata.ensembles[-1][1][0]).name
                pid = cluster.kill(victim)
                click.echo(f"killed {victim} (pid {pid}) after {i} entries")
            await lh.append(payload)
        await lh.close()
        ensembles = lh.metadata.ensembles
        click.echo(f"closed at entry {lh.metadata.last_entry_id}; {len(ensembles)} fragment(s)")
        rh = await bk.open_ledger(lh.id, password=PASSWORD, recovery=True)
        read = [data async for _, data in rh.read(0, rh.last_add_confirmed)]
        bad = [i for i, p in enumerate(payloads) if i >= len(read) or read[i] != p]
        return lh.id, bad


@click.command()
@click.option(
    "--entries",
    type=click.IntRange(min=2, max=100_000),
    default=200,
    show_default=True,
    help="Entries the demo appends.",
)
@click.option(
    "--dir",
    "state_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path(".bkchaos/demo"),
    show_default=True,
    help="Directory for the demo cluster's state, data and logs.",
)
def demo(entries: int, state_dir: Path) -> int:
    """Start a local cluster, write and read back a ledger across a bookie crash, stop."""
    if state_dir.exists():
        shutil.rmtree(state_dir)
    started = time.monotonic()
    cluster = LocalCluster(state_dir.resolve(), bookie_count=4)
    click.echo(f"starting ZooKeeper and 4 bookies under {state_dir} ...")
    cluster.up()
    try:
        ledger, missing = asyncio.run(_drive(cluster, entries))
    finally:
        cluster.down()
    elapsed = time.monotonic() - started
    if missing:
        click.echo(f"FAILED: {len(missing)} acknowledged entries of ledger {ledger} not read back")
        return 1
    click.echo(
        f"ok: {entries} entries written and read back intact in {elapsed:.1f}s; cluster stopped"
    )
    return 0
