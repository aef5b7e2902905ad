"""`bkchaos search`: find a fault schedule that breaks the product, shrink it, store it.

With no --workload, --nemesis or --bug it is the "find me a bug" command: a corpus-steered
search (harness/sim/corpus.py) over every workload, every simulated fault kind and
BUGGIFY's perturbations, printing what its tests reach as it goes. `--strategy
hypothesis` is the older search (harness/sim/search.py): fresh draws of one workload.
`--bug` only switches a seeded bug on in the product; what the search draws is the same.

Exit codes as `bkchaos test`: 1 when an invalid history was found (the minimal one is in
the store), 0 when the budget ran out with every history valid, 254 for bad arguments.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from bookie_image import bugs as seeded_bugs
from harness.cli import verbosity
from harness.errors import UserError
from harness.testspec import WORKLOADS
from nemesis.kinds import SIM_NEMESES

if TYPE_CHECKING:
    from harness.runtime.sim import SimSpec
    from harness.sim.corpus import Space

WORKLOAD_SETTINGS = (
    *("workload", "bookies", "concurrency", "id_bits", "pipeline", "write_quorum", "ack_quorum"),
    *("takeovers", "writer_crashes", "buggify"),
)
"""What a search may set besides the workload and the bugs; `minimal.json` records them."""
SIMULATED_SETTINGS = ("latency", "checkpoint_interval")
"""What only the simulated cluster has that a search draws (`DRAWN_CHOICES`): `minimal.json`
records them too, and a replay of one stored before they were drawn takes the defaults."""

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|m|h)?\s*$")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, None: 1}


def space_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """The options that bound the space of simulated tests, shared by `search` and `farm`
    (they draw from one space): fault kinds, seeded bugs, faults per test, run length."""
    options = [
        click.option(
            "--nemesis",
            default=",".join(SIM_NEMESES),
            show_default=True,
            help="Comma-separated fault kinds the tests draw from.",
        ),
        click.option(
            "--bug", "bug_names", multiple=True, help="Seeded bug to switch on (repeatable)."
        ),
        click.option(
            "--max-faults", type=int, default=3, show_default=True, help="Most faults in one test."
        ),
        click.option(
            "--max-time",
            type=click.FloatRange(0.5, 3600),
            default=3.0,
            show_default=True,
            help="Longest simulated run (s).",
        ),
    ]
    for option in reversed(options):
        command = option(command)
    return command


def parse_budget(text: str) -> float:
    """'90', '90s', '10m', '1.5h' -> seconds."""
    match = _DURATION.match(text)
    if match is None or float(match.group(1)) <= 0:
        raise UserError(f"--budget {text!r}: give a positive duration like 90s, 10m or 1h")
    return float(match.group(1)) * _UNIT_S[match.group(2)]


@click.command()
@click.option(
    "--runtime",
    type=click.Choice(["sim"]),
    default="sim",
    show_default=True,
    help="Where tests run: the deterministic simulation only.",
)
@click.option(
    "--workload",
    type=click.Choice(WORKLOADS),
    default=None,
    help="The workload to run (default: every workload, drawn per test; the hypothesis "
    "strategy runs ledger).",
)
@click.option(
    "--id-bits",
    type=click.Choice(["64", "128"]),
    default="64",
    show_default=True,
    help="Ledger ids of the workload: 128 spreads them over BP-35 scopes.",
)
@click.option(
    "--bookies",
    type=click.IntRange(3, 9),
    default=None,
    help="Bookies in the simulated cluster (ledgers have an ensemble of 3): a fourth is a "
    "spare for ensemble changes (default: 3; the corpus strategy draws 3, 4 or 5).",
)
@click.option(
    "--wq",
    "write_quorum",
    type=int,
    default=None,
    help="Write quorum; with --aq it is fixed, else the quorums are drawn among "
    "(WQ, AQ) = (2, 2), (3, 2), (3, 3).",
)
@click.option("--aq", "ack_quorum", type=int, default=None, help="Ack quorum (see --wq).")
@click.option(
    "--concurrency",
    type=click.IntRange(1, 64),
    default=None,
    help="Workers (default: drawn among 4, 8, 16).",
)
@click.option(
    "--pipeline",
    type=int,
    default=None,
    help="ledger, log, unbounded workloads: appends in flight per ledger "
    "(default: drawn among 1, 2, 4, at most the workers of one agent).",
)
@click.option(
    "--takeovers",
    type=float,
    default=None,
    help="ledger, log, unbounded workloads: share of ops that take a ledger or stream over "
    "(default: drawn among the workload's own share, 0.1, 0.5).",
)
@click.option(
    "--writer-crashes",
    type=float,
    default=None,
    help="ledger workload: share of ops at which a writer crashes (default: drawn among 0, 0.05).",
)
@click.option("--budget", default="10m", show_default=True, help="Real time to spend: 90s, 10m…")
@click.option(
    "--max-examples",
    type=click.IntRange(min=1),
    default=10_000,
    show_default=True,
    help="Most simulated runs, drawn and shrinking alike (a machine-independent bound).",
)
@click.option(
    "--max-triggered",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="hypothesis strategy: up to N more faults that wait for a protocol probe (a kill "
    "as a recovery starts…) instead of a clock tick; the corpus strategy draws a third of "
    "its faults so.",
)
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the search itself.")
@click.option(
    "--jobs",
    type=click.IntRange(min=1),
    default=None,
    help="corpus strategy: simulated tests run side by side in N worker processes "
    "(default: the CPUs this process may use; 1: one at a time in this process). One "
    "--seed and one --jobs walk the same tests on any machine.",
)
@click.option(
    "--strategy",
    type=click.Choice(["corpus", "hypothesis"]),
    default="corpus",
    show_default=True,
    help="corpus: keep tests that reached something new and mutate them; hypothesis: "
    "fresh draws, shrunk by Hypothesis.",
)
@click.option(
    "--buggify/--no-buggify",
    default=True,
    show_default=True,
    help="corpus strategy: let tests turn on the simulation's perturbation points.",
)
@click.option(
    "--store",
    type=click.Path(path_type=Path),
    default=Path("store"),
    show_default=True,
    help="Directory the minimal failing run goes to.",
)
@click.option(
    "--replay",
    type=click.Path(path_type=Path, dir_okay=False),
    default=None,
    help="Run the test of a minimal.json a search stored, in the simulation, and stop.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the outcome as JSON.")
@space_options
def search(
    runtime: str,
    workload: str | None,
    id_bits: str,
    bookies: int | None,
    concurrency: int | None,
    pipeline: int | None,
    write_quorum: int | None,
    ack_quorum: int | None,
    takeovers: float | None,
    writer_crashes: float | None,
    nemesis: str,
    bug_names: tuple[str, ...],
    budget: str,
    max_examples: int,
    max_faults: int,
    max_triggered: int,
    max_time: float,
    seed: int,
    jobs: int | None,
    strategy: str,
    buggify: bool,
    store: Path,
    replay: Path | None,
    as_json: bool,
) -> int:
    """Search simulated fault schedules for an invalid history; shrink and store it."""
    from harness.sim.corpus import Space, steered_search
    from harness.sim.search import search as run_search
    from harness.sim.workers import usable_cpus

    if replay is not None:
        return _replay(replay, store, as_json)
    budget_s = parse_budget(budget)
    try:
        bugs = tuple(sorted(seeded_bugs.parse(",".join(bug_names))))
    except seeded_bugs.UnknownBugError as exc:
        raise UserError(str(exc)) from None
    if max_faults < 1 or max_time < 0.5:
        raise UserError("--max-faults must be >= 1 and --max-time >= 0.5")
    if max_triggered and strategy != "hypothesis":
        raise UserError(
            "--max-triggered is for --strategy hypothesis (the corpus strategy draws a third "
            "of its faults triggered by probes); add --strategy hypothesis or leave it out"
        )
    if jobs not in (None, 1) and strategy != "corpus":
        raise UserError(
            "--jobs is for --strategy corpus (the hypothesis strategy runs one test at a "
            "time); leave it out or give --jobs 1"
        )
    jobs = jobs or (usable_cpus() if strategy == "corpus" else 1)
    kinds = _fault_kinds(nemesis)
    base, draw = search_base(
        f"search-{'+'.join(bugs) or 'clean'}",
        bugs,
        workload,
        int(id_bits),
        bookies if strategy == "corpus" else (bookies or 3),
        concurrency=concurrency,
        pipeline=pipeline,
        write_quorum=write_quorum,
        ack_quorum=ack_quorum,
        takeovers=takeovers,
        writer_crashes=writer_crashes,
    )

    shown_quiet = as_json or verbosity().quiet  # -q: no progress lines, the outcome only

    def progress(spec: SimSpec, results: dict[str, Any]) -> None:
        click.echo(f"{_test_line(spec, results)}", err=True)

    if strategy == "corpus":
        space = Space(
            base,
            workloads=(workload,) if workload else WORKLOADS,
            kinds=kinds,
            draw=draw,
            buggify=buggify,
            max_time=max_time,
            max_faults=max_faults,
        )
        outcome = steered_search(
            space,
            budget_s,
            search_seed=seed,
            max_examples=max_examples,
            on_example=None if shown_quiet else _coverage_progress(),
            jobs=jobs,
        )
    else:
        outcome = run_search(
            base,
            budget_s,
            max_time=max_time,
            max_faults=max_faults,
            max_examples=max_examples,
            search_seed=seed,
            kinds=kinds,
            draw=draw,
            on_example=None if shown_quiet else progress,
            max_triggered=max_triggered,
        )
    summary: dict[str, Any] = {
        "strategy": strategy,
        "jobs": jobs,
        "bugs": list(bugs),
        "budget_s": budget_s,
        "examples": outcome.examples,
        "seconds_to_find": outcome.seconds_to_find,
        "seconds_total": round(outcome.seconds_total, 1),
        "anomaly": outcome.anomaly,
        "coverage": outcome.coverage,
    }
    if outcome.found is not None:
        stored = store_found(store, outcome.found)
        run_dir, minimal = Path(stored["run_dir"]), stored["minimal"]
        summary.update(
            **stored,
            shrink_steps=outcome.shrink_steps,
            first=asdict(outcome.first) if outcome.first is not None else None,
        )
        (run_dir / "search.json").write_text(json.dumps(summary, indent=2))
    if as_json:
        click.echo(json.dumps(summary, indent=2))
    elif outcome.found is None:
        click.echo(
            f"no invalid history in {outcome.examples} simulated tests "
            f"({summary['seconds_total']}s of a {budget_s:g}s budget)"
        )
    else:
        click.echo(
            f"{outcome.anomaly} after {outcome.examples} simulated tests "
            f"(found in {outcome.seconds_to_find:.1f}s, shrunk by {outcome.shrink_steps} steps; "
            f"{summary['seconds_total']}s in all)\n"
            f"minimal: seed {minimal['seed']}, {minimal['time_limit']}s, "
            f"{len(minimal['schedule'])} steps: {json.dumps(minimal['schedule'])}\n"
            f"stored in {run_dir} (minimal.json, history.jsonl, report.html)\n"
            f"replay in the simulation: {summary['replay_sim']}\n"
            + (
                f"replay on containers: {summary['replay']}"
                if summary["replay"]
                else "replay on containers: none (BUGGIFY exists only in the simulation, "
                "probe-triggered faults there and on --runtime local)"
            )
        )
    return 1 if outcome.found is not None else 0


@click.command("search")
@click.option("--budget", default="60s", show_default=True, help="Each search's budget: 60s, 5m…")
@click.option(
    "--jobs",
    "jobs_list",
    default=None,
    help="Comma-separated numbers of jobs, one search each (default: 1 and the CPUs this "
    "process may use).",
)
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of every search.")
@click.option("--json", "as_json", is_flag=True, help="Print the figures as JSON.")
def bench_search(budget: str, jobs_list: str | None, seed: int, as_json: bool) -> None:
    """The no-hint search on the correct build with 1 and N jobs, one after the other:
    tests per second and per CPU second of each (harness/bench/search.py)."""
    from harness.bench import search as bench
    from harness.sim.workers import usable_cpus

    budget_s = parse_budget(budget)
    try:
        jobs = tuple(int(n) for n in (jobs_list or f"1,{usable_cpus()}").split(","))
    except ValueError:
        jobs = ()
    if not jobs or min(jobs) < 1:
        raise UserError(f"--jobs {jobs_list!r}: give numbers of jobs >= 1 like 1,2")
    figures = bench.run(no_hint_space(None, ",".join(SIM_NEMESES), ()), budget_s, jobs, seed)
    if as_json:
        click.echo(json.dumps(figures, indent=2))
        return
    click.echo(
        f"no-hint search, correct build, seed {seed}, {budget_s:g} s each, {figures['cpus']} cpus"
    )
    for run in figures["searches"]:
        click.echo(
            f"jobs {run['jobs']:>2}: {run['tests']:>5} tests in {run['wall_s']:g} s = "
            f"{run['tests_per_s']:g} tests/s (x{run['speedup']:g}), {run['cpu_s']:g} cpu s = "
            f"{run['tests_per_cpu_s']} tests per cpu s; load before {run['load_before']}; "
            f"found {run['anomaly'] or 'nothing'}"
        )


def no_hint_space(
    workload: str | None,
    nemesis: str,
    bug_names: tuple[str, ...],
    buggify: bool = True,
    max_faults: int = 3,
    max_time: float = 3.0,
) -> Space:
    """The no-hint search's space (`bkchaos search` with no workload settings given), for
    the workload, fault kinds and seeded bugs asked for: what `bkchaos farm` and the
    benches draw from."""
    from harness.sim.corpus import Space

    try:
        bugs = tuple(sorted(seeded_bugs.parse(",".join(bug_names))))
    except seeded_bugs.UnknownBugError as exc:
        raise UserError(str(exc)) from None
    if max_faults < 1:
        raise UserError("--max-faults must be >= 1")
    base, draw = search_base(f"farm-{'+'.join(bugs) or 'clean'}", bugs, workload)
    return Space(
        base,
        workloads=(workload,) if workload else WORKLOADS,
        kinds=_fault_kinds(nemesis),
        draw=draw,
        buggify=buggify,
        max_time=max_time,
        max_faults=max_faults,
    )


def search_base(
    name: str,
    bugs: tuple[str, ...],
    workload: str | None,
    id_bits: int = 64,
    bookies: int | None = None,
    *,
    concurrency: int | None = None,
    pipeline: int | None = None,
    write_quorum: int | None = None,
    ack_quorum: int | None = None,
    takeovers: float | None = None,
    writer_crashes: float | None = None,
) -> tuple[SimSpec, frozenset[str]]:
    """The base test of a search and the settings it draws: those the user left open
    (None). With no hints at all, this is the no-hint search's space, which `bkchaos farm`
    draws from too. Bad settings: the same UserError (exit 254) as bkchaos test's."""
    from harness.runtime.sim import SimSpec

    given = {
        "bookies": bookies,
        "concurrency": concurrency,
        "pipeline": pipeline,
        "quorums": None if write_quorum is None and ack_quorum is None else "given",
        "takeovers": takeovers,
        "writer_crashes": writer_crashes,
        **dict.fromkeys(SIMULATED_SETTINGS),  # no option sets them: always drawn
    }
    draw = frozenset(name for name, value in given.items() if value is None)
    appends_in_flight = 1 if pipeline is None else pipeline
    if concurrency is None:  # drawn, from the fewest workers that feed the pipeline
        concurrency = max(SimSpec.concurrency, appends_in_flight * SimSpec.clients)
    base = SimSpec(
        name=name,
        bugs=bugs,
        workload=workload or "ledger",
        id_bits=id_bits,
        bookies=3 if bookies is None else bookies,
        concurrency=concurrency,
        pipeline=appends_in_flight,
        write_quorum=2 if write_quorum is None else write_quorum,
        ack_quorum=2 if ack_quorum is None else ack_quorum,
        takeovers=takeovers,
        writer_crashes=writer_crashes or 0.0,
    )
    base.as_test()
    return base, draw


def store_found(store: Path, found: SimSpec) -> dict[str, Any]:
    """Run a shrunk failing test again into a run directory of `store` named after it
    (history, results, `minimal.json`, report; `latest` links) and say how to replay it:
    `run_dir`, `minimal`, `replay_valid`, `replay` (`bkchaos test` on containers, or None
    when the test needs what only the simulation has), `replay_sim`."""
    from harness.command_line import replay_command
    from harness.report import try_write_report
    from harness.runtime.sim import run_sim
    from harness.store import link_latest, new_run_dir

    run_dir = new_run_dir(store, found.name)
    result = run_sim(found, run_dir)
    minimal = {
        **{k: getattr(found, k) for k in (*WORKLOAD_SETTINGS, *SIMULATED_SETTINGS)},
        "seed": found.seed,
        "time_limit": found.time_limit,
        "bugs": list(found.bugs),
        "schedule": list(found.schedule),
    }
    (run_dir / "minimal.json").write_text(json.dumps(minimal, indent=2))
    try_write_report(run_dir)
    link_latest(run_dir)
    return {
        "run_dir": str(run_dir),
        "minimal": minimal,
        "replay_valid": result.results["valid"],
        "replay": replay_command(found.as_replay("docker"), run_dir)
        if _containers_can_replay(minimal)
        else None,
        "replay_sim": f"bkchaos search --replay {run_dir / 'minimal.json'}",
    }


def _containers_can_replay(minimal: dict[str, Any]) -> bool:
    """A shrunk test replays on containers unless it needs what only the simulation has."""
    from nemesis.schedule import is_triggered

    return not minimal["buggify"] and not any(map(is_triggered, minimal["schedule"]))


def _replay(path: Path, store: Path, as_json: bool) -> int:
    """`--replay`: the stored minimal test, run again (deterministic: the same verdict)."""
    from harness.runtime.sim import SimSpec, run_sim
    from harness.store import new_run_dir

    try:
        minimal = json.loads(path.read_text())
        fields = {
            k: minimal[k] for k in (*WORKLOAD_SETTINGS, "seed", "time_limit") if k != "buggify"
        }
        simulated = {k: minimal.get(k, getattr(SimSpec, k)) for k in SIMULATED_SETTINGS}
        simulated["latency"] = tuple(simulated["latency"])
        spec = SimSpec(
            name="search-replay",
            bugs=tuple(minimal.get("bugs", ())),
            schedule=tuple(minimal["schedule"]),
            buggify=bool(minimal.get("buggify", False)),  # stored before BUGGIFY existed: off
            **fields,
            **simulated,
        )
        spec.as_replay("sim")  # the same checks as a test: settings and schedule steps
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise UserError(
            f"--replay {path}: not a minimal.json that bkchaos search stored ({exc!r})"
        ) from None
    run_dir = new_run_dir(store, "search-replay")
    results = run_sim(spec, run_dir).results
    if as_json:
        click.echo(
            json.dumps(
                {
                    "run_dir": str(run_dir),
                    "valid": results["valid"],
                    "anomaly_types": results["anomaly_types"],
                },
                indent=2,
            )
        )
    else:
        click.echo(f"{_test_line(spec, results)}\nstored in {run_dir}")
    return 1 if results["valid"] is False else 0


def _test_line(spec: SimSpec, results: dict[str, Any]) -> str:
    verdict = results["valid"]
    shown = ",".join(results["anomaly_types"]) if verdict is False else verdict
    return (
        f"seed {spec.seed:>5} {spec.time_limit:4.1f}s {len(spec.schedule)} steps "
        f"({spec.workload}, {_workload_settings(spec)}): {shown}"
    )


def _coverage_progress() -> Callable[..., None]:
    """The corpus search's progress on stderr: a line per test when stderr is a file or a
    pipe; on a terminal one status line rewritten in place, and a line of its own for each
    test that reached something new."""
    terminal = sys.stderr.isatty()

    def progress(
        number: int, spec: SimSpec, results: dict[str, Any], new: frozenset[str] | None, corpus: Any
    ) -> None:
        growth = f"coverage {len(corpus.seen)}, corpus {len(corpus.entries)}"
        if new:
            growth += f" (+{len(new)}: {', '.join(sorted(new))})"
        line = f"test {number:>4}: {_test_line(spec, results)}; {growth}"
        if not terminal:
            click.echo(line, err=True)
        elif new or results["valid"] is False:
            click.echo(f"\r\033[K{line}", err=True)
        else:
            click.echo(f"\r\033[K{line[:150]}", err=True, nl=False)

    return progress


def _workload_settings(spec: SimSpec) -> str:
    """The drawn settings of a test, short: '16 workers, pipeline 4, WQ 3 AQ 2, takeovers 0.5'
    (and the simulated cluster's, where they are not the defaults)."""
    from harness.runtime.sim import SimSpec

    shares = [
        f"{name} {share:g}"
        for name, share in (("takeovers", spec.takeovers), ("writer crashes", spec.writer_crashes))
        if share
    ]
    low, high = spec.latency
    cluster = [
        *(
            [f"latency {low * 1000:g}-{high * 1000:g} ms"]
            if spec.latency != SimSpec.latency
            else []
        ),
        *(
            [f"checkpoints every {spec.checkpoint_interval:g} s"]
            if spec.checkpoint_interval != SimSpec.checkpoint_interval
            else []
        ),
    ]
    return ", ".join(
        [
            f"{spec.concurrency} workers",
            *(["buggify"] if spec.buggify else []),
            f"pipeline {spec.pipeline}",
            f"WQ {spec.write_quorum} AQ {spec.ack_quorum}",
            *shares,
            *cluster,
        ]
    )


def _fault_kinds(nemesis: str) -> tuple[str, ...]:
    """--nemesis as the kinds to draw, in SIM_NEMESES's order (the order shrinking follows)."""
    named = {kind.strip() for kind in nemesis.split(",") if kind.strip()}
    unknown = sorted(named - set(SIM_NEMESES))
    if not named or unknown:
        raise UserError(
            f"--nemesis {nemesis!r}: name one or more of {', '.join(SIM_NEMESES)} "
            f"(unknown: {', '.join(unknown) or 'none given'})"
        )
    return tuple(kind for kind in SIM_NEMESES if kind in named)
