"""`bkchaos test`: run a chaos test, check it, leave a run directory behind."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.live import Live

from core.verdict import reasons
from harness.cli import verbosity
from harness.cli.cluster import inventory_option, ssh_accept_new_option, zk_option
from harness.errors import UserError
from harness.progress import plain_progress, progress_line
from harness.runner import exit_code, run_test
from harness.testspec import NEMESIS_ORDERS, RUNTIMES, TARGETS, WORKLOADS, TestSpec
from nemesis.disk import CORRUPT_MODES
from nemesis.kinds import KINDS, RUNTIME_NEMESES


def _csv(ctx: click.Context, param: click.Parameter, value: str) -> tuple[str, ...]:
    return tuple(v.strip() for v in value.split(",") if v.strip()) if value else ()


def _schedule(ctx: click.Context, param: click.Parameter, value: str | None) -> tuple[dict, ...]:
    """Steps from a JSON list, or from a run's test.json, so any recorded schedule replays."""
    if value is None:
        return ()
    hint = "pass a JSON list of steps or the test.json of a run that had a schedule"
    try:
        data = json.loads(Path(value).read_text())
    except (OSError, ValueError) as exc:
        raise UserError(f"--schedule {value}: {exc}; {hint}") from None
    steps = data.get("schedule") if isinstance(data, dict) else data
    if not isinstance(steps, list) or not steps:
        raise UserError(f"--schedule {value}: no schedule steps found; {hint}")
    return tuple(steps)


def fault_kinds_help() -> str:
    """Every fault kind and what it does, from nemesis.kinds, grouped by the runtimes that
    can inject it (so the help never lags behind the code)."""
    by_runtimes: dict[tuple[str, ...], list[str]] = {}
    for kind in KINDS.values():
        where = tuple(r for r, allowed in RUNTIME_NEMESES.items() if kind.name in allowed)
        by_runtimes.setdefault(where, []).append(f"{kind.name} ({kind.summary})")
    groups = []
    for where, described in by_runtimes.items():
        runtimes = "every runtime" if set(where) == set(RUNTIMES) else ", ".join(where)
        groups.append(f"{', '.join(described)} [{runtimes}]")
    return "Comma-separated fault kinds: " + "; ".join(groups) + "."


SOAK_EPOCH_S = 60.0
"""A soak's epoch when --soak is given without --soak-epoch."""


pipeline_option = click.option(
    "--pipeline",
    type=int,
    default=1,
    show_default=True,
    help="ledger, log, unbounded workloads: appends in flight per ledger (workers of one "
    "agent sharing it).",
)


@click.command()
@click.option("--name", default=None, help="Test name in the store (default: the workload).")
@click.option(
    "--workload",
    type=click.Choice(WORKLOADS),
    default="ledger",
    show_default=True,
    help="What the clients do: append, tail, recover or take over ledgers or streams.",
)
@click.option(
    "--nemesis",
    default="",
    callback=_csv,
    help=fault_kinds_help(),
)
@click.option(
    "--nemesis-interval",
    type=float,
    default=5.0,
    show_default=True,
    help="Seconds between fault starts and stops.",
)
@click.option(
    "--nemesis-order",
    type=click.Choice(NEMESIS_ORDERS),
    default="shuffled",
    show_default=True,
    help="With several --nemesis kinds: draw them in a shuffled order (overlapping by "
    "chance), or nest them in the order given (each started, on other nodes, while the "
    "ones before it hold).",
)
@click.option(
    "--time-limit",
    type=float,
    default=30.0,
    show_default=True,
    help="Seconds of workload and faults (then heal and final reads).",
)
@click.option(
    "--soak",
    callback=lambda _ctx, _param, value: _duration(value),
    default=None,
    metavar="DURATION",
    help="A soak run: this long (90s, 30m, 8h; instead of --time-limit), faults all along, "
    "the workload started afresh every --soak-epoch, so the history is checked in "
    "segments (docs/history.md §9).",
)
@click.option(
    "--soak-epoch",
    type=click.FloatRange(min=0),
    default=0.0,
    show_default=True,
    help="Seconds of one soak epoch: fresh ledgers and streams, closed-read at its end "
    f"(with --soak: {SOAK_EPOCH_S:g} unless given); 0: one workload for the whole run.",
)
@click.option(
    "--concurrency", type=int, default=4, show_default=True, help="Client workers (processes)."
)
@click.option("--clients", type=int, default=2, show_default=True, help="Client agents (nodes).")
@click.option(
    "--rate", type=float, default=200.0, show_default=True, help="Client ops per second, in all."
)
@click.option(
    "--targets",
    type=click.Choice(TARGETS),
    default="one",
    show_default=True,
    help="What each seeded fault hits: one bookie, a minority of them, ZooKeeper, an agent.",
)
@click.option(
    "--grudge",
    default="",
    help='Partitions use this grudge (a name, or JSON {"b1": ["b2"]}) instead of drawing one.',
)
@click.option(
    "--corruption",
    default="",
    metavar="|".join(CORRUPT_MODES),
    help="What corrupt faults do: flip bits anywhere (default), truncate a file anywhere, or "
    "crash the bookie and lose the last write it fsynced to its newest entry logs.",
)
@click.option(
    "--packet",
    default="",
    metavar="KEY=VALUE,...",
    help="How packet faults shape a node's egress (ms, %, tc rates such as 200kbit): "
    '"rate=200kbit" or "loss_pct=5,rate=1mbit" (tbf and iptables: need no netem), '
    '"delay_ms=100,loss_pct=5" (netem), "rate=64kbit,to=b1" (only what it sends to b1), ... '
    "(default: a 50±10 ms delay).",
)
@click.option(
    "--op-timeout",
    type=float,
    default=10.0,
    show_default=True,
    help="Seconds before an op is given up (recorded as info).",
)
@click.option("--bookies", type=int, default=4, show_default=True, help="Bookies (nodes).")
@zk_option
@click.option("--ensemble", type=int, default=3, show_default=True, help="Bookies per ledger (E).")
@click.option(
    "--wq",
    "write_quorum",
    type=int,
    default=2,
    show_default=True,
    help="Bookies each entry is written to (WQ).",
)
@click.option(
    "--aq",
    "ack_quorum",
    type=int,
    default=2,
    show_default=True,
    help="Bookie acks an add waits for (AQ).",
)
@click.option(
    "--digest",
    type=click.Choice(["crc32", "crc32c", "hmac-sha1", "dummy"]),
    default="crc32c",
    show_default=True,
    help="Entry digest type.",
)
@click.option("--id-bits", type=int, default=64, show_default=True, help="64, or 128 (BP-35).")
@click.option(
    "--guaranteed-write-quorum",
    is_flag=True,
    help="Ledgers replace a bookie that misses an entry even after AQ acked it (all WQ copies).",
)
@click.option(
    "--entry-size", type=int, default=0, show_default=True, help="Pad payloads to this many bytes."
)
@click.option(
    "--takeovers",
    type=float,
    default=None,
    help="ledger, log, unbounded workloads (the others refuse it): share of ops that take "
    "over a ledger or stream another process is writing [default: 0.01 for ledger, 0.02 for "
    "log and unbounded].",
)
@click.option(
    "--writer-crashes",
    type=float,
    default=0.0,
    show_default=True,
    help="ledger workload (the others refuse it): share of ops at which a writer crashes, "
    "leaving its ledger open (its last entry beyond every LAC) for the next takeover to "
    "recover.",
)
@pipeline_option
@click.option("--bug", "bugs", multiple=True, help="Switch on a seeded bug (repeatable).")
@click.option("--seed", type=int, default=None, help="Seed (default: random, recorded).")
@click.option(
    "--runtime",
    type=click.Choice(RUNTIMES),
    default="docker",
    show_default=True,
    help="Where the cluster runs: containers, processes on loopback, ssh hosts, or the "
    "deterministic simulation (docs/runtimes.md).",
)
@inventory_option
@ssh_accept_new_option
@click.option(
    "--store", default="store", show_default=True, help="Directory the run directories go to."
)
@click.option(
    "--schedule",
    metavar="FILE",
    callback=_schedule,
    help="Replay these fault steps exactly (a JSON list, or a run's test.json).",
)
@click.option(
    "--test-count",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="Run the test this many times (seeds seed, seed+1, …); worst verdict wins.",
)
def test(name: str | None, test_count: int, seed: int | None, **options: object) -> int:
    """Run a workload under faults, heal, read everything back, and check the history."""
    first_seed = seed if seed is not None else int.from_bytes(os.urandom(3))
    soak_settings(options)
    console = Console(stderr=True)
    codes = []
    for i in range(test_count):
        spec = TestSpec(
            name=name or str(options["workload"]),
            seed=first_seed + i,
            argv=tuple(sys.argv[1:]),
            **options,
        )  # type: ignore[arg-type]
        codes.append(exit_code(run_shown(console, spec)[1]))
    return worst(codes)


def soak_settings(options: dict[str, Any]) -> None:
    """`--soak DURATION` as the TestSpec says it: a time limit and an epoch."""
    soak = options.pop("soak")
    if soak is not None:
        options.update(time_limit=soak, soak_epoch=options["soak_epoch"] or SOAK_EPOCH_S)


def _duration(value: str | None) -> float | None:
    from harness.nightly import parse_duration

    return None if value is None else parse_duration(value, "--soak")


def worst(codes: list[int]) -> int:
    """The most serious exit code: invalid over unknown over valid; errors above all."""
    return max(codes, key=lambda code: [0, 2, 1].index(code) if code in (0, 1, 2) else code)


def run_shown(console: Console, spec: TestSpec) -> tuple[Path, dict]:
    """Run one test with progress on `console` — a live line on a terminal, plain
    timestamped lines every few seconds elsewhere, none with -q — then its summary."""
    shown = verbosity()
    if not shown.quiet:
        console.print(
            f"[bold]{spec.name}[/] seed {spec.seed}: {spec.workload} workload, "
            f"nemesis {','.join(spec.nemesis) or 'none'}, {spec.time_limit:.0f}s"
        )
    if shown.quiet:
        run_dir, results = run_test(spec, None)
    elif console.is_terminal:
        with Live(console=console, refresh_per_second=4, transient=True) as live:
            run_dir, results = run_test(spec, lambda c, t: live.update(progress_line(c, t)))
    else:
        run_dir, results = run_test(spec, plain_progress(console.file))
    _summary(console, run_dir, results)
    return run_dir, results


def _summary(console: Console, run_dir: Path, results: dict) -> None:
    verdict = {True: "[green]VALID[/]", False: "[red]INVALID[/]", "unknown": "[yellow]UNKNOWN[/]"}[
        results["valid"]
    ]
    stats = results["stats"]
    console.print(
        f"{verdict}  ops {stats['ops']}  ok {stats['ok']}  fail {stats['fail']}  "
        f"info {stats['info']}  ledgers {stats['ledgers']}"
    )
    for colour, head, rest in reasons(results):
        console.print(f"  [{colour}]{head}[/]{rest}")
    console.print(f"run directory: {run_dir}")
    report = run_dir / "report.html"
    if report.exists():
        console.print(f"report: {report}")
