"""`bkchaos nightly MATRIX.toml`: the matrix within a budget, then the summary page."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import click
from rich.console import Console

from harness.cli import verbosity
from harness.nightly import (
    final_exit_code,
    load_matrix,
    night_coverage,
    parse_duration,
    run_analysis,
    run_farm_stage,
    run_nightly,
    write_summary,
)
from harness.testspec import RUNTIMES

COLOURS = {"valid": "green", "invalid": "red", "unknown": "yellow", "error": "red"}


@click.command()
@click.argument("matrix", type=click.Path(path_type=Path))
@click.option("--store", default=None, help="Store to run into (default: the matrix's, or store).")
@click.option(
    "--budget", default=None, help="Total time for runs: 900, 90s, 45m, 2h (default: the matrix's)."
)
@click.option(
    "--date",
    "night",
    type=click.DateTime(formats=["%Y-%m-%d"]),
    default=None,
    help="Run as this night (seeds, summary directory); default: today.",
)
@click.option(
    "--no-analyze",
    is_flag=True,
    help="Skip `bkchaos analyze` (e.g. when the Spark analysis runs elsewhere).",
)
@click.option(
    "--runtime",
    type=click.Choice(RUNTIMES),
    default=None,
    help="Run the cells that name no runtime of their own on this one (sim: the night simulated).",
)
@click.option(
    "--rounds",
    type=click.IntRange(min=1),
    default=None,
    help="Stop after this many rounds of the matrix (every cell once per round).",
)
def nightly(
    matrix: Path,
    store: str | None,
    budget: str | None,
    night: Any,
    no_analyze: bool,
    runtime: str | None,
    rounds: int | None,
) -> int:
    """Run a test matrix within a time budget and write STORE/nightly/<date>/index.html.

    Exit code 1 if a clean configuration was invalid, 255 if a run crashed, else 0.
    """
    loaded = load_matrix(matrix, runtime)
    budget_s = parse_duration(budget, "--budget") if budget is not None else None
    store_dir = Path(store or loaded.store)
    day = night.date() if night is not None else dt.date.today()
    console = Console(stderr=True, soft_wrap=True)  # paths stay whole for scripts
    if not verbosity().quiet:  # -q: each run's verdict only
        console.print(
            f"[bold]nightly {day}[/]: {len(loaded.cells)} cells, budget "
            f"{budget_s or loaded.budget_s:g}s, {loaded.run_length_s:g}s per run, "
            f"store {store_dir}"
        )

    def show(run: dict[str, Any]) -> None:
        colour = COLOURS[run["verdict"]]
        anomalies = ", ".join(run["anomaly_types"]) or run.get("error", "")
        console.print(
            f"  {run['cell']} seed {run['seed']}: [{colour}]{run['verdict'].upper()}[/] "
            f"{anomalies} ({run['seconds']:g}s)"
        )

    summary = run_nightly(loaded, store_dir, day, budget_s, on_run=show, rounds=rounds)
    if loaded.farm is not None and not summary["interrupted"]:
        console.print(f"bkchaos farm ({loaded.farm.budget_s:g}s) …")
        summary["farm"] = run_farm_stage(loaded.farm, store_dir, day)
        summary["exit_code"] = final_exit_code(summary)
        summary["coverage"] = night_coverage(summary["runs"], summary["farm"])
    cov = summary["coverage"]
    console.print(
        f"protocol coverage: {cov['reached']} of {cov['probes']} probes reached; must-reach "
        f"probes never reached: {', '.join(cov['unreached']) or 'none'}"
    )
    analyze = not (no_analyze or summary["interrupted"])
    summary["analysis"] = {"status": "running" if analyze else "skipped"}
    page = write_summary(summary, store_dir)  # a night whose analysis dies still has a page
    if analyze:
        console.print(f"bkchaos analyze {store_dir} …")
        summary["analysis"] = run_analysis(store_dir)
        summary["exit_code"] = final_exit_code(summary)
        write_summary(summary, store_dir)
    console.print(
        f"{len(summary['runs'])} runs, {len(summary['failures'])} clean failures, "
        f"{len(summary['new'])} new since {summary['previous_date'] or 'the first night'}; "
        f"analysis {summary['analysis']['status']}"
    )
    console.print(f"summary: {page}")
    return final_exit_code(summary)
