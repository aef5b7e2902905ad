"""`bkchaos bench mutants`: the no-hint search's score on mutants of the protocol modules
(harness/bench/mutants.py)."""

from __future__ import annotations

import json
from pathlib import Path

import click

from harness.cli.search import parse_budget
from harness.errors import UserError


@click.command("mutants")
@click.option(
    "--sample",
    "count",
    type=click.IntRange(1),
    default=10,
    show_default=True,
    help="How many mutants to try (drawn with --seed, spread over the kinds).",
)
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the sample.")
@click.option(
    "--budget", default="60s", show_default=True, help="The search's budget per mutant: 90s, 5m…"
)
@click.option(
    "--search-seed",
    type=int,
    default=0,
    show_default=True,
    help="Seed of each search (--seed of bkchaos search).",
)
@click.option(
    "--jobs",
    type=click.IntRange(min=1),
    default=None,
    help="Worker processes of each search (--jobs of bkchaos search; default: the CPUs it "
    "may use). Mutants are tried one at a time, so this is all the bench runs at once.",
)
@click.option(
    "--match",
    default=None,
    help="Try only the mutants (or defects) whose name contains this text, e.g. "
    "'journal.py:' or 'entrylog-roll' (the sample is then every match).",
)
@click.option("--list", "list_only", is_flag=True, help="List every mutant and stop.")
@click.option(
    "--defects",
    is_flag=True,
    help="Try the hand-written realistic defects (harness/bench/mutants.py DEFECTS) instead "
    "of a sample of generated mutants.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the figures as JSON.")
def bench_mutants(
    count: int,
    seed: int,
    budget: str,
    search_seed: int,
    jobs: int | None,
    match: str | None,
    list_only: bool,
    defects: bool,
    as_json: bool,
) -> None:
    """Mutate the protocol modules one mutant at a time (in a copy of the source tree) and
    run the no-hint search on each: the share caught, the time to catch, the survivors."""
    from harness.bench import mutants as bench

    parse_budget(budget)  # a bad budget is refused before anything runs
    root = Path(bench.__file__).resolve().parents[2]
    every: list[bench.Mutant | bench.Defect] = list(
        bench.DEFECTS if defects else bench.mutants(root)
    )
    if match is not None:
        every = [m for m in every if match in m.name]
        if not every:
            raise UserError(f"--match {match!r}: no mutant's name contains it (see --list)")
    if list_only:
        for mutant in every:
            click.echo(mutant.name)
        click.echo(f"{len(every)} {'defects' if defects else 'mutants'}", err=True)
        return
    tried = every if defects or match else bench.sample(every, count, seed)  # type: ignore[arg-type]
    count = len(tried)
    search_args = ("--seed", str(search_seed), *(("--jobs", str(jobs)) if jobs else ()))
    results = []
    for number, mutant in enumerate(tried, 1):
        result = bench.run_mutant(root, mutant, budget, search_args)
        results.append(result)
        if not as_json:
            when = (
                f" in {result.seconds_to_catch:.1f}s ({result.anomaly})"
                if result.seconds_to_catch is not None
                else ""
            )
            extra = f" — {result.detail}" if result.detail else ""
            click.echo(
                f"{number:>3}/{count} {result.outcome}{when}, {result.tests} tests, "
                f"{result.seconds}s: {mutant.name}{extra}",
                err=True,
            )
    summary = bench.summarise(results)
    summary.update(
        of=len(every), budget=budget, seed=seed, search_seed=search_seed, jobs=jobs or "cpus"
    )
    if as_json:
        click.echo(json.dumps(summary, indent=2))
        return
    what = "realistic defects" if defects else f"mutants (a sample of {len(every)}, seed {seed})"
    click.echo(
        f"caught {summary['caught']} of {summary['mutants']} {what}: score {summary['score']}; "
        f"{summary['crashed']} crashed the search; median time to catch "
        f"{summary['median_s_to_catch']} s; budget {budget} each"
    )
    for result in results:
        if result.outcome != "caught":
            click.echo(f"survivor: {result.mutant.name}")
