"""`bkchaos farm`: the steered search's simulated tests on Spark executors (harness/farm.py),
and `bkchaos bench farm`."""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from harness.cli.analyze import _conf, _spark
from harness.cli.search import no_hint_space, parse_budget, space_options
from harness.errors import UserError
from harness.testspec import WORKLOADS
from nemesis.kinds import SIM_NEMESES

if TYPE_CHECKING:
    from harness.sim.corpus import Space

TASKS_PER_SLOT = 2
"""Tasks per executor slot in a round: a slot that finishes its batch early takes the
next, so one slow batch idles fewer slots at the round's end."""
DEFAULT_BATCH = 20
"""Tests per Spark task unless --batch-size says: measured on 2 cores, a task's fixed cost
was 19 % of the tests' own CPU at 8 tests a task and within noise of zero at 20
(docs/performance.md, "bench farm on the quiet machine")."""
FLUSH_ROWS = 20_000
"""Rows kept on the driver before they are appended to the store's Parquet: few files
per night, and a driver's memory that does not grow with the farm."""


def start_spark(
    master: str, conf: dict[str, str], ship: str, workdir: Path
) -> tuple[Any, Path | None]:
    """A SparkSession for the farm, with bkchaos shipped to its executors as `ship` says:
    `none` (the executors import the driver's installation: local masters), `wheel`
    (build it from this checkout), a path to a built wheel, or `auto` (`none` for
    `local[…]`, `wheel` for anything else). Returns the session and the wheel shipped."""
    from harness import farm

    spark = _spark()
    if ship == "auto":
        ship = "none" if master.startswith("local[") else "wheel"
    wheel = None
    if ship == "wheel":
        wheel = farm.build_wheel(workdir)
    elif ship != "none":
        wheel = Path(ship)
        if not wheel.is_file():
            raise UserError(f"--ship {ship}: no such file; give auto, wheel, none or a .whl path")
    try:
        session = spark.session(master, {"spark.app.name": "bkchaos farm", **conf})
    except spark.AnalysisError as exc:
        raise UserError(str(exc)) from exc
    if wheel is not None:
        farm.ship(session.sparkContext, wheel, workdir)
    return session, wheel


@click.command("farm")
@space_options
@click.option(
    "--master",
    default="local[*]",
    show_default=True,
    help="Spark master URL (local[N], local-cluster[N,cores,mb], spark://host:7077, …).",
)
@click.option("--budget", default="10m", show_default=True, help="Real time: 90s, 10m, 1h…")
@click.option(
    "--tests",
    type=click.IntRange(min=1),
    default=1_000_000,
    show_default=True,
    help="Most simulated tests (a machine-independent bound; shrinking not counted).",
)
@click.option(
    "--batch-size",
    type=click.IntRange(min=1),
    default=DEFAULT_BATCH,
    show_default=True,
    help="Tests per Spark task: more spreads a task's fixed cost over more tests.",
)
@click.option(
    "--workload",
    type=click.Choice(WORKLOADS),
    default=None,
    help="The workload to run (default: every workload, drawn per test).",
)
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the farm's draws.")
@click.option(
    "--buggify/--no-buggify",
    default=True,
    show_default=True,
    help="Let tests turn on the simulation's perturbation points.",
)
@click.option(
    "--store",
    type=click.Path(path_type=Path),
    default=Path("store"),
    show_default=True,
    help="Store the farm's rows and failing runs go to.",
)
@click.option(
    "--ship",
    default="auto",
    show_default=True,
    help="How bkchaos reaches the executors: wheel (built from this checkout and sent as "
    "--py-files does), none (they have it installed), PATH of a built wheel, or auto "
    "(none for local[…], wheel otherwise). See docs/farm.md.",
)
@click.option("--conf", multiple=True, metavar="KEY=VALUE", help="Extra Spark setting.")
@click.option("--json", "as_json", is_flag=True, help="Print the outcome as JSON.")
def farm(
    master: str,
    budget: str,
    tests: int,
    batch_size: int,
    workload: str | None,
    nemesis: str,
    bug_names: tuple[str, ...],
    seed: int,
    buggify: bool,
    max_faults: int,
    max_time: float,
    store: Path,
    ship: str,
    conf: tuple[str, ...],
    as_json: bool,
) -> int:
    """Run simulated tests on Spark, steered by what they reach; shrink and store failures.

    Rows (one per test) land in STORE/farm/night=DATE/ as Parquet, which `bkchaos analyze`
    reads. Exit 1 if a test failed."""
    budget_s = parse_budget(budget)
    space = no_hint_space(workload, nemesis, bug_names, buggify, max_faults, max_time)
    summary = run(
        space,
        master=master,
        conf=_conf(conf),
        ship=ship,
        budget_s=budget_s,
        max_tests=tests,
        batch_size=batch_size,
        seed=seed,
        store=store,
        progress=not as_json,
    )
    click.echo(json.dumps(summary, indent=2) if as_json else _text(summary))
    if summary["interrupted"]:
        return 130
    return 1 if summary["failures"] else 0


def run(
    space: Space,
    *,
    master: str,
    conf: dict[str, str],
    ship: str,
    budget_s: float,
    max_tests: int,
    batch_size: int,
    seed: int,
    store: Path,
    progress: bool,
) -> dict[str, Any]:
    """One farm: Spark started, the rounds run, the rows written, failures shrunk and
    stored; returns the summary `--json` prints."""
    from checkers.spark.farm import FARM_DIR, write_rows
    from harness import farm
    from harness.cli.search import store_found

    started = time.gmtime()
    name = time.strftime("%Y%m%dT%H%M%S", started)
    night = time.strftime("%Y-%m-%d", started)
    pending: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="bkchaos-farm-ship-") as workdir:
        session, wheel = start_spark(master, conf, ship, Path(workdir))

        def keep(number: int, rows: list[dict[str, Any]], outcome: farm.FarmOutcome) -> None:
            pending.extend(rows)
            if len(pending) >= FLUSH_ROWS:
                write_rows(session, pending, store)
                pending.clear()
            if progress:
                _progress(number, rows, outcome)

        try:
            runner = farm.SparkRunner(session.sparkContext, batch_size)
            code = sorted(set(farm.executor_origin(session.sparkContext, runner.slots)))
            outcome = farm.run_farm(
                space,
                runner,
                round_size=runner.slots * batch_size * TASKS_PER_SLOT,
                budget_s=budget_s,
                max_tests=max_tests,
                seed=seed,
                farm=name,
                night=night,
                on_round=keep,
            )
            write_rows(session, pending, store)
            slots = runner.slots
        finally:
            session.stop()
    if not outcome.interrupted:
        farm.shrink_failures(outcome, space, budget_s)
    failures = []
    for failure in outcome.failures.values():
        stored = store_found(store, (failure.shrunk or failure.candidate).to_spec())
        entry = {
            "anomaly": failure.anomaly,
            "test": failure.row["test"],
            "shrink_steps": failure.shrink_steps,
            "shrink_runs": failure.shrink_runs,
            **stored,
        }
        Path(stored["run_dir"], "farm.json").write_text(json.dumps(entry, indent=2))
        failures.append(entry)
    return {
        "farm": name,
        "night": night,
        "master": master,
        "slots": slots,
        "shipped": None if wheel is None else wheel.name,
        "executor_code": code,
        "batch_size": batch_size,
        "tests": outcome.tests,
        "rounds": outcome.rounds,
        "seconds": round(outcome.seconds, 1),
        "tests_per_s": round(outcome.tests / outcome.seconds, 2) if outcome.seconds else 0,
        "cpu_s": round(outcome.cpu_s, 1),
        "invalid": outcome.verdicts["invalid"],
        "unknown": outcome.verdicts["unknown"],
        "corpus": len(outcome.corpus.entries),
        "coverage": sorted(outcome.corpus.seen),
        "rows": str(store / FARM_DIR / f"night={night}"),
        "interrupted": outcome.interrupted,
        "failures": failures,
    }


def _progress(number: int, rows: list[dict[str, Any]], outcome: Any) -> None:
    bad = sum(r["verdict"] == "invalid" for r in rows)
    rate = outcome.tests / outcome.seconds if outcome.seconds else 0
    click.echo(
        f"round {number:>3}: {len(rows)} tests, {bad} invalid; {outcome.tests} in all "
        f"({rate:.1f} tests/s), corpus {len(outcome.corpus.entries)}, "
        f"coverage {len(outcome.corpus.seen)}",
        err=True,
    )


def _text(s: dict[str, Any]) -> str:
    lines = [
        f"{s['tests']} simulated tests in {s['rounds']} rounds on {s['master']} "
        f"({s['slots']} slots, {s['batch_size']} per task): {s['seconds']}s, "
        f"{s['tests_per_s']} tests/s, {s['cpu_s']} CPU s in the tests; "
        f"{s['invalid']} invalid, {s['unknown']} unknown; corpus {s['corpus']}, "
        f"coverage {len(s['coverage'])}",
        f"rows: {s['rows']}",
    ]
    for f in s["failures"]:
        lines += [
            f"{f['anomaly']}: first at test {f['test']}, shrunk by {f['shrink_steps']} steps "
            f"({f['shrink_runs']} runs); stored in {f['run_dir']}",
            f"  replay in the simulation: {f['replay_sim']}",
            f"  replay on containers: {f['replay']}"
            if f["replay"]
            else "  replay on containers: none (BUGGIFY and probe-triggered faults exist only "
            "in the simulation)",
        ]
    if not s["failures"]:
        lines.append("no invalid history")
    return "\n".join(lines)


@click.command("farm")
@click.option(
    "--tests",
    type=click.IntRange(min=4),
    default=160,
    show_default=True,
    help="Tests in the draw every master runs.",
)
@click.option(
    "--batch-size",
    type=click.IntRange(min=1),
    default=DEFAULT_BATCH,
    show_default=True,
    help="Tests per Spark task.",
)
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the draw.")
@click.option("--json", "as_json", is_flag=True, help="Print the figures as JSON.")
def bench_farm(tests: int, batch_size: int, seed: int, as_json: bool) -> None:
    """Farm tests/s on local[1], local[2] and local-cluster, and its per-test overhead."""
    from harness.bench import farm as bench

    _spark()

    def started(master: str, workdir: Path) -> Any:
        return start_spark(master, bench.QUIET, "auto", workdir)[0]

    space = no_hint_space(None, ",".join(SIM_NEMESES), ())
    f = bench.run(space, started, tests, batch_size, seed)
    if as_json:
        click.echo(json.dumps(f, indent=2))
        return
    alone = f["one_process"]
    click.echo(
        f"{f['tests']} simulated tests (seed {f['seed']}), {f['batch_size']} per task, "
        f"{f['cpus']} cpus, load {f['load_before']} before / {f['load_after']} after"
    )
    click.echo(
        f"one process:  {alone['seconds']:7.2f} s, {alone['tests_per_s']:6.2f} tests/s, "
        f"{alone['cpu_s']} CPU s"
    )
    for master, m in f["masters"].items():
        click.echo(
            f"{master:<24} {m['seconds']:7.2f} s, {m['tests_per_s']:6.2f} tests/s on "
            f"{m['slots']} slots, {m['farm_cpu_s']} CPU s in all, tests' CPU per slot-second "
            f"{m['cpu_efficiency']:.0%} (warm-up "
            f"{m['warm_up_s']} s); same histories: {m['same_histories']}"
        )
    click.echo(
        f"speedup local[2]/local[1]: {f['speedup_local2']}x; farm overhead on one slot: "
        f"{f['overhead_cpu_ms_per_test']} CPU ms per test, {f['overhead']:.1%} of the tests' "
        f"own CPU ({f['overhead_wall']:.1%} by wall time)"
    )
