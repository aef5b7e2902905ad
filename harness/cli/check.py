"""`bkchaos check HISTORY|RUN_DIR` and `bkchaos bench checker`."""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import click

from harness.errors import UserError

EXIT = {True: 0, False: 1, "unknown": 2}
_SHOWN = 3  # cases printed per anomaly in the readable summary


def _locate(target: Path) -> tuple[Path, Path | None]:
    """The history to check and where results.json goes by default (run dirs only)."""
    if target.is_dir():
        history = target / "history.jsonl"
        if not history.is_file():
            raise UserError(f"{target} has no history.jsonl: pass a run directory or a history")
        return history, target / "results.json"
    if not target.is_file():
        raise UserError(f"{target}: no such history (pass a history.jsonl or a run directory)")
    return target, None


@click.command("check")
@click.argument("target", type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@click.option(
    "--out", type=click.Path(path_type=Path), help="Write results.json here (run dirs: beside)."
)
def check(target: Path, as_json: bool, out: Path | None) -> int:
    """Check a history; exit 0 valid, 1 invalid, 2 unknown, 254 bad input."""
    from checkers import HistoryError
    from checkers import check as run_check

    history, default_out = _locate(target)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            result = run_check(history)
        except HistoryError as exc:
            raise UserError(f"{history}: {exc}") from exc
    for w in caught:
        click.echo(f"warning: {w.message}", err=True)
    destination = out or default_out
    if default_out is not None and default_out.is_file():
        result = _with_coverage(result, default_out)
    text = json.dumps(result, indent=2)
    if destination is not None:
        destination.write_text(text + "\n")
    click.echo(text if as_json else _summary(history, result))
    return EXIT[result["valid"]]


def _with_coverage(result: dict[str, Any], previous: Path) -> dict[str, Any]:
    """`result` with the run's protocol coverage kept from its results.json: a history
    does not hold it (the run counted it from its nodes' logs or in the simulation)."""
    try:
        coverage = json.loads(previous.read_text()).get("coverage")
    except (OSError, ValueError, AttributeError):
        return result
    return result if coverage is None else {**result, "coverage": coverage}


def _summary(history: Path, result: dict[str, Any]) -> str:
    """A few readable lines: verdict, counts, examples of each anomaly."""
    verdict = {True: "valid", False: "INVALID", "unknown": "unknown"}[result["valid"]]
    s = result["stats"]
    lines = [
        f"{history}: {verdict}",
        f"  {s['ops']} ops ({s['ok']} ok, {s['fail']} fail, {s['info']} info), "
        f"{s['ledgers']} ledgers, {s['appends_ok']} acked appends",
    ]
    if s["unchecked_ledgers"]:
        lines.append(f"  unchecked (no closed read): ledgers {s['unchecked_ledgers']}")
    for name in result["anomaly_types"]:
        cases = result["anomalies"][name]
        lines.append(f"  {name}: {len(cases)} case(s)")
        lines += [f"    - {c['explanation']} (ops {c['ops']})" for c in cases[:_SHOWN]]
    broken = [n for n, r in result["checkers"].items() if "error" in r]
    lines += [f"  checker {n} crashed: {result['checkers'][n]['error']}" for n in broken]
    return "\n".join(lines)


@click.command("checker")
@click.option("--ops", type=click.IntRange(min=1000), default=1_000_000, show_default=True)
@click.option("--ledgers", type=click.IntRange(min=1), default=50, show_default=True)
@click.option("--reads", type=click.FloatRange(0, 1), default=0.01, show_default=True)
@click.option("--repeat", type=click.IntRange(min=1), default=2, show_default=True,
              help="Runs of each measurement; the fastest counts.")  # fmt: skip
@click.option("--json", "as_json", is_flag=True, help="Print the figures as JSON.")
def bench_checker(ops: int, ledgers: int, reads: float, repeat: int, as_json: bool) -> None:
    """Full check vs stdlib json.loads of every line: CPU-time ratio and peak memory."""
    from harness.bench import checker as bench

    f = bench.run(ops=ops, ledgers=ledgers, read_fraction=reads, repeat=repeat)
    if as_json:
        click.echo(json.dumps(f, indent=2))
        return
    parse, chk = f["json_parse"], f["check"]
    click.echo(
        f"{f['ops']} ops, {f['ledgers']} ledgers, {f['read_fraction']:.0%} reads, "
        f"{f['history_mib']} MiB, {f['cpus']} cpus, python {f['python']}"
    )
    click.echo(
        f"json.loads per line: {parse['cpu_seconds']:.2f} s cpu ({parse['wall_seconds']} wall)"
    )
    click.echo(f"bkchaos check:       {chk['cpu_seconds']:.2f} s cpu ({chk['wall_seconds']} wall)")
    click.echo(f"ratio check/json:    {f['ratio']:.2f} (target <= {f['target_ratio']})")
    click.echo(f"peak memory (check child ru_maxrss): {chk['peak_rss_mib']} MiB")
