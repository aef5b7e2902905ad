"""`bkchaos test-all`: every workload under every nemesis set, and `bkchaos bench harness`.

Each cell of the matrix is one `bkchaos test` run with the same settings (every option
of `bkchaos test` applies to all cells); a failing or crashing cell never stops the
others, a Ctrl-C stops the matrix after healing the run in progress. The exit code is
the worst of the cells'.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from harness.cli import test as test_cli
from harness.errors import UserError
from harness.runner import exit_code
from harness.testspec import WORKLOADS, TestSpec

DEFAULT_NEMESIS_SETS = "none;kill;pause;kill,pause"
SHARED_WITH_TEST = ("name", "workload", "nemesis", "schedule", "test_count")
"""Options of `bkchaos test` that the matrix sets itself, so test-all does not take them."""
VERDICTS = {True: "[green]VALID[/]", False: "[red]INVALID[/]", "unknown": "[yellow]UNKNOWN[/]"}


def _workloads(ctx: click.Context, param: click.Parameter, value: str) -> tuple[str, ...]:
    names = tuple(v.strip() for v in value.split(",") if v.strip())
    unknown = [n for n in names if n not in WORKLOADS]
    if unknown or not names:
        raise UserError(f"--workloads {value!r}: choose from {', '.join(WORKLOADS)}")
    return names


def _nemesis_sets(
    ctx: click.Context, param: click.Parameter, value: str
) -> tuple[tuple[str, ...], ...]:
    """`none;kill;kill,pause` -> ((), ("kill",), ("kill", "pause")); the names themselves
    are checked by TestSpec, for the runtime chosen, before any cell runs."""
    sets = tuple(
        () if text == "none" else tuple(k.strip() for k in text.split(",") if k.strip())
        for text in (s.strip() for s in value.split(";") if s.strip())
    )
    if not sets:
        raise UserError("--nemeses needs at least one set, e.g. 'none;kill,pause'")
    return sets


@click.command("test-all")
@click.option(
    "--workloads",
    default=",".join(WORKLOADS),
    show_default=True,
    callback=_workloads,
    help="Comma-separated workloads to run.",
)
@click.option(
    "--nemeses",
    default=DEFAULT_NEMESIS_SETS,
    show_default=True,
    callback=_nemesis_sets,
    help="Nemesis sets separated by ';' (a set is comma-separated; 'none' for no faults).",
)
def test_all(
    workloads: tuple[str, ...],
    nemeses: tuple[tuple[str, ...], ...],
    seed: int | None,
    **options: Any,
) -> int:
    """Run every workload under every nemesis set; print a summary table."""
    first_seed = seed if seed is not None else int.from_bytes(os.urandom(3))
    test_cli.soak_settings(options)
    specs = [  # all built first: bad input is refused before anything runs
        TestSpec(
            name=f"{workload}-{'+'.join(kinds) or 'none'}",
            workload=workload,
            nemesis=kinds,
            seed=first_seed,
            argv=tuple(sys.argv[1:]),
            **options,
        )
        for workload in workloads
        for kinds in nemeses
    ]
    console = Console(stderr=True)
    rows = []
    for spec in specs:
        started = time.monotonic()
        try:
            run_dir, results = test_cli.run_shown(console, spec)
        except Exception as exc:  # a crashed cell is recorded; the matrix goes on
            console.print(f"[red]crashed[/]: {type(exc).__name__}: {exc}")
            code = exc.exit_code if isinstance(exc, UserError) else 255
            rows.append((spec, None, None, code, time.monotonic() - started))
            continue
        rows.append((spec, run_dir, results, exit_code(results), time.monotonic() - started))
        if results.get("interrupted"):
            break
    console.print(_table(rows))
    for spec, run_dir, *_ in rows:  # below the table: paths would not fit in a column
        console.print(f"{spec.name}: {run_dir or 'no run directory'}", soft_wrap=True)
    return test_cli.worst([code for *_, code, _ in rows])


def _table(rows: list[tuple[TestSpec, Any, dict[str, Any] | None, int, float]]) -> Table:
    """One row per cell: what ran and what the checkers said."""
    table = Table(title="bkchaos test-all")
    for column in ("workload", "nemesis", "seed", "verdict", "ok/fail/info", "s"):
        table.add_column(column, no_wrap=True)
    table.add_column("anomalies", overflow="fold")
    for spec, _, results, code, seconds in rows:
        if results is None:
            verdict, anomalies, counts = f"[red]CRASHED ({code})[/]", "", ""
        else:
            s = results["stats"]
            verdict = VERDICTS[results["valid"]]
            anomalies = ", ".join(results["anomaly_types"])
            counts = f"{s['ok']}/{s['fail']}/{s['info']}"
            if results.get("interrupted"):
                verdict += " (interrupted)"
        table.add_row(
            spec.workload,
            ",".join(spec.nemesis) or "none",
            str(spec.seed),
            verdict,
            counts,
            f"{seconds:.0f}",
            anomalies,
        )
    return table


test_all.params.extend(p for p in test_cli.test.params if p.name not in SHARED_WITH_TEST)


@click.command("harness")
@click.option(
    "--workers",
    default="1,8,32",
    show_default=True,
    help="Comma-separated worker counts, one run each.",
)
@click.option(
    "--seconds", type=float, default=15.0, show_default=True, help="Seconds each run lasts."
)
@click.option(
    "--workload",
    type=click.Choice(WORKLOADS),
    default="ledger",
    show_default=True,
    help="The workload measured.",
)
@click.option(
    "--runtime",
    type=click.Choice(["docker", "local"]),
    default="docker",
    show_default=True,
    help="Where the cluster runs.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the figures as JSON.")
def bench_harness(workers: str, seconds: float, workload: str, runtime: str, as_json: bool) -> None:
    """Ops/s the controller records end to end with no faults, per worker count."""
    from harness.bench import harness as bench

    try:
        counts = [int(w) for w in workers.split(",") if w.strip()]
    except ValueError:
        raise UserError(f"--workers {workers!r}: give worker counts like 1,8,32") from None
    if not counts or min(counts) < 1 or seconds <= 0:
        raise UserError("--workers must be counts >= 1 and --seconds positive")
    figures = bench.run(counts, seconds, workload, runtime)
    if as_json:
        click.echo(json.dumps(figures, indent=2))
        return
    click.echo(
        f"{figures['workload']} workload, {figures['seconds']:g}s per run, runtime "
        f"{figures['runtime']} ({figures['note']}), {figures['cpus']} cpus, "
        f"load {figures['load_before']}"
    )
    for run in figures["runs"]:
        cpu = ", ".join(f"{k} {v:.1f}" for k, v in run["cpu_seconds"].items())
        click.echo(
            f"{run['workers']:>3} workers: {run['ops_per_s']:8.1f} ops/s "
            f"({run['completions']} completions in {run['measured_s']:.1f}s; "
            f"ok {run['ok']} fail {run['fail']} info {run['info']}); cpu s: {cpu}"
        )
    click.echo(f"target: >= {figures['target_ops_per_s']} ops/s at 32 workers")
