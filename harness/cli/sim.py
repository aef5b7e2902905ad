"""`bkchaos bench sim`: how fast the deterministic simulation runs (harness/bench/sim.py)."""

from __future__ import annotations

import json

import click

from harness.errors import UserError


@click.command("sim")
@click.option(
    "--seconds", type=float, default=60.0, show_default=True, help="Simulated seconds per run."
)
@click.option(
    "--rates",
    default="1,10,100",
    show_default=True,
    help="Comma-separated offered op rates (ops per simulated second), one run each.",
)
@click.option("--seed", type=int, default=1, show_default=True, help="Seed of the simulation.")
@click.option("--json", "as_json", is_flag=True, help="Print the figures as JSON.")
def bench_sim(seconds: float, rates: str, seed: int, as_json: bool) -> None:
    """Simulated seconds per real second for a small cluster, per offered op rate."""
    from harness.bench import sim as bench

    try:
        parsed = tuple(float(r) for r in rates.split(",") if r.strip())
    except ValueError:
        raise UserError(f"--rates {rates!r}: give rates like 1,10,100") from None
    if not parsed or min(parsed) <= 0 or seconds <= 0:
        raise UserError("--rates must be positive numbers and --seconds positive")
    figures = bench.run(seconds, parsed, seed)
    if as_json:
        click.echo(json.dumps(figures, indent=2))
        return
    click.echo(
        f"{figures['cluster']}; {figures['seconds']:g} simulated s per run, seed "
        f"{figures['seed']}, python {figures['python']}, {figures['cpus']} cpus, "
        f"load {figures['load_before']}"
    )
    for run in figures["runs"]:
        click.echo(
            f"{run['rate']:>7g} ops/s: {run['sim_s_per_real_s']:8.1f} sim s per real s, "
            f"{run['sim_s_per_cpu_s']:8.1f} per cpu s ({run['ops']} ops, "
            f"{run['simulated_s']:g} sim s in {run['real_s']:g} real s / {run['cpu_s']:g} cpu s; "
            f"{run['cpu_ms_per_op']} cpu ms per op; valid {run['valid']})"
        )
