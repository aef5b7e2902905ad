"""`bkchaos check HISTORY|RUN_DIR` and `bkchaos bench checker`."""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import click

from harness.errors import UserError

EXIT = {True: 0, False: 1, "unknown": 2}
VERDICTS = {True: "valid", False: "INVALID", "unknown": "unknown"}
_SHOWN = 3  # cases printed per anomaly in the readable summary


def _locate(target: Path) -> tuple[Path, Path | None]:
    """The history to check and, for a run directory, its results.json."""
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
@click.option("--out", type=click.Path(path_type=Path), help="Also write the result here.")
@click.option(
    "--write",
    is_flag=True,
    help="RUN_DIR only: update its results.json (keeping what a history cannot recompute, "
    "e.g. the simulation's figures) and its report. Without it, nothing is written.",
)
def check(target: Path, as_json: bool, out: Path | None, write: bool) -> int:
    """Check a history or a run directory; exit 0 valid, 1 invalid, 2 unknown, 254 bad
    input. The verdict is the one `bkchaos test` gives the same history."""
    from checkers import HistoryError
    from checkers import check as run_check

    history, stored_path = _locate(target)
    if write and stored_path is None:
        raise UserError(f"--write needs a run directory, not {target}; use --out FILE")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            result = run_check(history)
        except HistoryError as exc:
            raise UserError(f"{history}: {exc}") from exc
    for w in caught:
        click.echo(f"warning: {w.message}", err=True)
    stored = _stored(stored_path)
    if write:
        result = kept_from(stored, result)
    text = json.dumps(result, indent=2)
    try:
        if out is not None:
            out.write_text(text + "\n")
        if write:
            _write_run(stored_path, text)
    except OSError as exc:
        raise UserError(f"cannot write the result ({exc}); pass --out FILE elsewhere") from exc
    click.echo(text if as_json else _summary(history, result))
    said = stored.get("valid") if stored is not None else None
    if not write and said in (True, False, "unknown") and said != result["valid"]:
        click.echo(
            f"note: {stored_path} says {VERDICTS[said]}; this check "
            f"says {VERDICTS[result['valid']]} (--write updates it)",
            err=True,
        )
    return EXIT[result["valid"]]


def _stored(path: Path | None) -> dict[str, Any] | None:
    """A run's results.json if it is readable, else None (--write replaces it)."""
    if path is None or not path.is_file():
        return None
    try:
        stored = json.loads(path.read_bytes())
    except (OSError, ValueError):
        return None
    return stored if isinstance(stored, dict) else None


def kept_from(stored: dict[str, Any] | None, fresh: dict[str, Any]) -> dict[str, Any]:
    """The fresh result plus what only the run itself could know: top-level keys the
    checkers do not produce (`sim`, `interrupted`, `coverage`…) and sub-results of
    checkers that did not run now. The verdict merges theirs, so nothing is lost."""
    from checkers import merge_valid

    if stored is None:
        return fresh
    merged = {**fresh, **{k: v for k, v in stored.items() if k not in fresh}}
    subs = stored.get("checkers")
    kept = {
        name: sub
        for name, sub in (subs.items() if isinstance(subs, dict) else ())
        if name not in fresh["checkers"] and isinstance(sub, dict)
    }
    merged["checkers"] = {**fresh["checkers"], **kept}
    merged["valid"] = merge_valid([fresh["valid"], *(sub.get("valid") for sub in kept.values())])
    return merged


def _write_run(results_path: Path, text: str) -> None:
    """Replace results.json atomically, then re-render the report if the run has one."""
    from harness.report import try_write_report

    tmp = results_path.with_suffix(".json.tmp")
    tmp.write_text(text + "\n")
    tmp.replace(results_path)
    if (results_path.parent / "report.html").exists():
        try_write_report(results_path.parent)


def _summary(history: Path, result: dict[str, Any]) -> str:
    """A few readable lines: verdict, counts, examples of each anomaly, why unknown."""
    from checkers import root_first
    from core.verdict import reasons

    s = result["stats"]
    lines = [
        f"{history}: {VERDICTS[result['valid']]}",
        f"  {s['ops']} ops ({s['ok']} ok, {s['fail']} fail, {s['info']} info), "
        f"{s['ledgers']} ledgers, {s['appends_ok']} acked appends",
    ]
    if s["unchecked_ledgers"]:
        lines.append(f"  unchecked (no closed read): ledgers {s['unchecked_ledgers']}")
    for name in root_first(result["anomaly_types"]):
        cases = result["anomalies"][name]
        derived = sum(1 for c in cases if c.get("derived_from"))
        restated = f", {derived} only restating lost appends" if derived else ""
        lines.append(f"  {name}: {len(cases)} case(s){restated}")
        lines += [f"    - {c['explanation']} (ops {c['ops']})" for c in cases[:_SHOWN]]
    lines += [
        f"  {head}{rest}"
        for colour, head, rest in reasons(result)
        if colour == "yellow" and head != "unchecked"
    ]
    return "\n".join(lines)


@click.command("checker")
@click.option("--ops", type=click.IntRange(min=1000), default=1_000_000, show_default=True,
              help="Ops in the history.")  # fmt: skip
@click.option("--ledgers", type=click.IntRange(min=1), default=50, show_default=True,
              help="Ledgers it writes.")  # fmt: skip
@click.option("--reads", type=click.FloatRange(0, 1), default=0.01, show_default=True,
              help="Share of ops that are reads (0 to 1).")  # fmt: skip
@click.option("--epoch-ops", type=click.IntRange(min=0), default=0, show_default=True,
              help="Write the history as epochs of this many ops, fresh ledgers each "
              "(a soak's shape, which the check streams through); 0: one epoch.")  # fmt: skip
@click.option("--repeat", type=click.IntRange(min=1), default=2, show_default=True,
              help="Runs of each measurement; the fastest counts.")  # fmt: skip
@click.option("--json", "as_json", is_flag=True, help="Print the figures as JSON.")
def bench_checker(
    ops: int, ledgers: int, reads: float, epoch_ops: int, repeat: int, as_json: bool
) -> None:
    """Full check vs stdlib json.loads of every line: CPU-time ratio and peak memory."""
    from harness.bench import checker as bench

    f = bench.run(ops=ops, ledgers=ledgers, read_fraction=reads, repeat=repeat, epoch_ops=epoch_ops)
    if as_json:
        click.echo(json.dumps(f, indent=2))
        return
    parse, chk = f["json_parse"], f["check"]
    click.echo(
        f"{f['ops']} ops in epochs of {f['epoch_ops']}, {f['ledgers']} ledgers, "
        f"{f['read_fraction']:.0%} reads, "
        f"{f['history_mib']} MiB, {f['cpus']} cpus, python {f['python']}"
    )
    click.echo(
        f"json.loads per line: {parse['cpu_seconds']:.2f} s cpu ({parse['wall_seconds']} wall)"
    )
    click.echo(f"bkchaos check:       {chk['cpu_seconds']:.2f} s cpu ({chk['wall_seconds']} wall)")
    click.echo(f"ratio check/json:    {f['ratio']:.2f} (target <= {f['target_ratio']})")
    click.echo(f"peak memory (check child ru_maxrss): {chk['peak_rss_mib']} MiB")
