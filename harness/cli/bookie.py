"""`bkchaos bookie --config FILE`: run one bookie in the foreground."""

from __future__ import annotations

import json

import click


@click.command(context_settings={"ignore_unknown_options": True})
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def bookie(args: tuple[str, ...]) -> int:
    """Run a bookie (the same as `python -m bookie_image.bookie ARGS`)."""
    from bookie_image.bookie.__main__ import main as bookie_main

    return bookie_main(list(args))


@click.command(name="bookie")
@click.option("--json", "as_json", is_flag=True, help="Print the figures as JSON.")
@click.option(
    "--adds",
    type=click.IntRange(min=100),
    default=20_000,
    show_default=True,
    help="Adds per in-flight level (each level is also capped at 15 s).",
)
def bench_bookie(as_json: bool, adds: int) -> None:
    """One bookie (fsync on) vs an echo server: adds/s, p50/p99, fsyncs/s, and the ratio."""
    from harness.bench import bookie as bench

    figures = bench.run(adds=adds)
    if as_json:
        click.echo(json.dumps(figures, indent=2))
        return
    click.echo(f"1 KiB adds, fsync on, {figures['cpus']} cpus")
    click.echo(
        f"{'server':8} {'in flight':>9} {'adds/s':>10} {'p50 ms':>8} {'p99 ms':>8} {'fsyncs/s':>9}"
    )
    for server in ("echo", "bookie"):
        for level in figures[server]:
            fsyncs = level["fsyncs_per_s"]
            click.echo(
                f"{server:8} {level['in_flight']:>9} {level['adds_per_s']:>10.0f} "
                f"{level['p50_ms']:>8.2f} {level['p99_ms']:>8.2f} "
                f"{'-' if fsyncs is None else f'{fsyncs:.0f}':>9}"
            )
    click.echo(
        f"ratio bookie/echo at {max(figures['levels'])} in flight: "
        f"{figures['ratio_at_max_in_flight']:.3f} (target >= {figures['target_ratio']})"
    )
