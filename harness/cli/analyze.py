"""`bkchaos analyze STORE` (the Spark pipeline over many runs) and `bkchaos bench analyze`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from harness.errors import UserError


def _conf(pairs: tuple[str, ...]) -> dict[str, str]:
    """KEY=VALUE pairs of --conf, as spark-submit takes them."""
    conf = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise UserError(f"--conf {pair!r}: expected KEY=VALUE, e.g. spark.driver.memory=4g")
        conf[key] = value
    return conf


def _spark() -> Any:
    """The Spark pipeline, or a UserError saying how to install it."""
    try:
        from checkers import spark
    except ImportError as exc:
        raise UserError(
            f"bkchaos analyze needs Spark ({exc}): pip install 'bkchaos[spark]'"
        ) from exc
    return spark


@click.command("analyze")
@click.argument("store", type=click.Path(path_type=Path))
@click.option(
    "--master",
    default="local[*]",
    show_default=True,
    help="Spark master URL (local[N], local-cluster[…], spark://host:7077, …).",
)
@click.option(
    "--out",
    type=click.Path(path_type=Path),
    help="Cache, tables and trend pages (default: STORE/trends).",
)
@click.option("--conf", multiple=True, metavar="KEY=VALUE", help="Extra Spark setting.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
def analyze(
    store: Path, master: str, out: Path | None, conf: tuple[str, ...], as_json: bool
) -> int:
    """Analyse every run of STORE with Spark; exit 1 if it disagrees with a results.json."""
    spark = _spark()
    try:
        spark.require_store(store)  # before the slow start of Spark
        session = spark.session(master, _conf(conf))
        try:
            report = spark.analyze(session, store, out)
        finally:
            session.stop()
    except spark.AnalysisError as exc:
        raise UserError(str(exc)) from exc
    click.echo(json.dumps(report, indent=2) if as_json else _summary(report))
    return 1 if report["disagreements"] else 0


def _summary(report: dict[str, Any]) -> str:
    lines = [
        f"{report['store']}: {report['runs']} runs, {report['ops']:,} ops analysed "
        f"({report['new_runs']} new, {report['ops_ingested']:,} ops ingested in "
        f"{report['seconds']['ingest']} s; analysis {report['seconds']['analyse']} s)",
    ]
    for d in report["disagreements"]:
        lines.append(f"  DISAGREES {d['run']}: spark {d['spark']} vs python {d['python']}")
    if not report["disagreements"]:
        lines.append(f"  Spark agrees with the Python checker on all {report['runs']} runs")
    lines += [f"  malformed, skipped: {m['run']}: {m['reason']}" for m in report["malformed"]]
    if report["pending"]:
        lines.append(f"  pending (no results.json yet): {', '.join(report['pending'])}")
    lines += [f"  warning: {run}: truncated last line ignored" for run in report["truncated_tails"]]
    if report.get("coverage_by_night"):
        newest = report["coverage_by_night"][-1]
        never = ", ".join(report["unreached_probes"]) or "none"
        lines.append(
            f"  coverage {newest['night']}: {newest['reached']} of {newest['probes']} probes "
            f"reached; never reached in the last 7 nights: {never}"
        )
    if report["farm"]["tests"]:
        f = report["farm"]
        lines.append(
            f"  farm: {f['tests']:,} simulated tests over {len(f['nights'])} night(s), "
            f"{f['invalid']} invalid; probes no farm test reached in the last 7 nights: "
            f"{', '.join(f['unreached_probes']) or 'none'}"
        )
    lines.append(f"  trends: {report['trends']}")
    return "\n".join(lines)


@click.command("analyze")
@click.option(
    "--runs", type=click.IntRange(min=1), default=100, show_default=True, help="Runs to generate."
)
@click.option(
    "--ops", type=click.IntRange(min=100), default=100_000, show_default=True, help="Ops per run."
)
@click.option("--master", default="local[*]", show_default=True, help="Spark master URL.")
@click.option("--json", "as_json", is_flag=True, help="Print the figures as JSON.")
def bench_analyze(runs: int, ops: int, master: str, as_json: bool) -> None:
    """Spark analysis vs the Python checker on a synthetic store (runs × ops ops)."""
    _spark()
    from harness.bench import analyze as bench

    f = bench.run(runs=runs, ops=ops, master=master)
    if as_json:
        click.echo(json.dumps(f, indent=2))
        return
    py, cold, warm = f["python_check"], f["spark_cold"], f["spark_warm"]
    click.echo(
        f"{f['runs']} runs, {f['ops']:,} ops, {f['history_gib']} GiB, master {master}, "
        f"{f['cpus']} cpus"
    )
    click.echo(f"python check (1 core):  {py['seconds']} s, {py['ops_per_s']:,} ops/s")
    click.echo(f"spark ingest (cold):    {cold['ingest']} s, {cold['ingest_ops_per_s']:,} ops/s")
    click.echo(
        f"spark ingest+analysis:  {cold['ingest'] + cold['analyse']:.1f} s, "
        f"{cold['ops_per_s']:,} ops/s"
    )
    click.echo(f"spark again, no new runs: {warm['ingest'] + warm['analyse']:.1f} s")
    click.echo(f"disagreements: {len(f['disagreements'])}")
