"""`bkchaos bench detect`: detection rate and time per seeded bug, false positives when clean."""

from __future__ import annotations

import json
from typing import Any

import click

from bookie_image import bugs
from harness.errors import UserError


def _bugs(ctx: click.Context, param: click.Parameter, value: str) -> tuple[str, ...]:
    if not value:
        return tuple(sorted(bugs.KNOWN))
    try:
        return tuple(sorted(bugs.parse(value)))
    except bugs.UnknownBugError as exc:
        raise UserError(f"--bugs: {exc}") from None


@click.command(name="detect")
@click.option(
    "--runs",
    type=click.IntRange(min=1),
    default=3,
    show_default=True,
    help="Runs per seeded bug, and as many clean twins.",
)
@click.option(
    "--bugs",
    "bug_names",
    default="",
    callback=_bugs,
    help="Comma-separated seeded bugs (default: all of them).",
)
@click.option(
    "--time-limit",
    type=click.FloatRange(min=1),
    default=20.0,
    show_default=True,
    help="Seconds of workload per run (each run adds ~15 s to start and check).",
)
@click.option(
    "--runtime",
    type=click.Choice(("sim", "local", "docker")),
    default=None,
    help="Run every exposing test here (default: each on its own, local or docker). "
    "Bugs whose faults this runtime cannot perform are left out, and named.",
)
@click.option(
    "--first-seed",
    type=click.IntRange(min=0),
    default=1,
    show_default=True,
    help="Seed of the first run (the runs take it and the next K-1): a matrix split over "
    "several commands, e.g. seeds 1-3 of every bug first and 4-10 later, adds up to one.",
)
@click.option("--store", default="store", show_default=True, help="Directory the runs go to.")
@click.option("--json", "as_json", is_flag=True, help="Print the figures as JSON.")
def bench_detect(
    runs: int,
    bug_names: tuple[str, ...],
    time_limit: float,
    runtime: str | None,
    first_seed: int,
    store: str,
    as_json: bool,
) -> None:
    """Run each seeded bug's exposing test K times (and K clean twins); print detection."""
    from harness.bench import detect

    if runtime is not None:
        elsewhere = [bug for bug in bug_names if not detect.runs_on(bug, runtime)]
        if elsewhere and len(bug_names) < len(bugs.KNOWN):
            raise UserError(
                f"--bugs: the exposing tests of {', '.join(elsewhere)} cannot run on "
                f"--runtime {runtime} (their faults need another runtime); leave them out"
            )
        if elsewhere:
            click.echo(f"left out (faults not on {runtime}): {', '.join(elsewhere)}", err=True)
        bug_names = tuple(bug for bug in bug_names if bug not in elsewhere)

    def show(bug: str, buggy: bool, run: dict[str, Any]) -> None:
        verdict = {True: "valid", False: "INVALID", "unknown": "unknown"}[run["valid"]]
        label = bug if buggy else f"(clean twin of {bug})"
        click.echo(
            f"  {label} seed {run['seed']}: {verdict} {' '.join(run['anomaly_types'])}", err=True
        )

    figures = detect.run(
        bug_names, runs, store, time_limit, first_seed, on_run=show, runtime=runtime
    )
    if as_json:
        click.echo(json.dumps(figures, indent=2))
        return
    click.echo(
        f"{'seeded bug':32} {'runtime':8} {'detected':>9} {'median s':>9} "
        f"{'clean twins':24} anomalies"
    )
    for bug, row in figures["bugs"].items():
        median = row["median_seconds_to_detect"]
        twins = " ".join(f"{n} {verdict}" for verdict, n in row["clean_twins"].items() if n)
        click.echo(
            f"{bug:32} {row['runtime']:8} {row['detected']:>4}/{row['runs']:<4} "
            f"{'-' if median is None else f'{median:.1f}':>9} {twins:24} "
            f"{', '.join(row['anomalies'])}"
        )
    for bug, row in figures["bugs"].items():
        lags = row["triggered"]
        if lags["fired"]:
            shown = "; ".join(
                f"{lag} {lags[f'{lag}_ms']['median']} ms (p90 {lags[f'{lag}_ms']['p90']})"
                for lag in ("read", "start", "proven")
                if f"{lag}_ms" in lags
            )
            click.echo(
                f"{bug}: {lags['fired']} faults triggered by probes, {lags['re_armed']} "
                f"reaches re-armed as late; median lag {shown}"
            )
    click.echo(
        f"false positives: {figures['false_positives']} of {figures['clean_runs']} clean runs"
        f" (targets: detection >= 90%, median <= 30 s, no false positive)"
    )
