"""Nightly chaos: a matrix of tests run within a time budget, and a summary page.

The matrix (TOML, see `nightly.toml` and docs/nightly.md) is workloads × nemesis sets ×
configurations × seeded-bug sets. A night runs its cells round-robin until the budget
is spent, starting at a different cell each night so a budget smaller than the matrix
still covers all of it over several nights. Seeds derive from the date, the cell and the
round: every night explores new schedules, and re-running a night repeats it exactly.
A failing run never stops the night. `STORE/nightly/<date>/index.html` + `summary.json`
say what failed tonight, what is new since the previous night, and how often each
seeded bug was caught; they are written before `bkchaos analyze` (Spark) runs over the
store, and again with its outcome. The exit code is non-zero if a clean configuration
was invalid.
"""

from __future__ import annotations

import datetime as dt
import importlib.util
import itertools
import json
import os
import re
import subprocess
import sys
import time
import tomllib
import traceback
import zlib
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bookie_image import bugs as seeded_bugs
from bookie_image.probes import PROBES
from core.signals import sigterm_as_interrupt
from harness.command_line import SPEC_FIELDS, replay_command
from harness.errors import UserError
from harness.store import store_name
from harness.testspec import WORKLOADS, TestSpec
from nemesis.schedule import schedule_kinds

RUN_OVERHEAD_S = 20.0
"""First guess of a run's time beyond its run length (cluster start, final reads, checks);
replaced by the largest overhead measured tonight."""
MAX_CONSECUTIVE_CRASHES = 3
OWNED_BY_MATRIX = frozenset(
    {"name", "seed", "store", "time_limit", "workload", "nemesis", "bugs", "schedule", "argv"}
)
SPEC_SETTINGS = SPEC_FIELDS - OWNED_BY_MATRIX
TOP_LEVEL = frozenset(
    {
        *("budget", "run_length", "store", "workloads", "nemeses", "bugs"),
        *("defaults", "configs", "cells", "farm"),
    }
)
CELL_KEYS = frozenset({"workload", "nemesis", "schedule"})
"""A `[cells.NAME]` table's own keys; the rest are test settings."""
MUST_REACH = tuple(sorted(PROBES))
"""The probes a night must reach: every one, for the sample matrix's cells reach each with
a correct build (docs/coverage.md; tests/sim/test_sim_nightly_coverage.py)."""
FARM_KEYS = {"budget": None, "master": "--master", "workload": "--workload", "bugs": "--bug"}
"""The `[farm]` table's keys and the `bkchaos farm` option each becomes."""
TRENDS_PAGE = "trends/index.html"
"""Where `bkchaos analyze STORE` writes its trend pages, relative to the store."""
EXIT_CLEAN_INVALID = 1
EXIT_CRASHED = 255


@dataclass(frozen=True)
class Cell:
    """One point of the matrix: what a run of it tests."""

    workload: str
    nemesis: tuple[str, ...]
    config: str
    settings: dict[str, Any] = field(compare=False)
    bugs: tuple[str, ...] = ()
    schedule: tuple[dict[str, Any], ...] = field(default=(), compare=False)
    """A targeted cell's fault steps (`[cells.NAME]`), replayed instead of seeded faults."""

    @property
    def id(self) -> str:
        nemesis = "+".join(self.nemesis) or "none"
        return f"{self.workload}/{nemesis}/{self.config}/{'+'.join(self.bugs) or 'clean'}"

    @property
    def clean(self) -> bool:
        return not self.bugs


@dataclass(frozen=True)
class FarmStage:
    """The night's simulation farm (`[farm]`): its own budget and `bkchaos farm` options."""

    budget_s: float
    options: tuple[str, ...] = ()

    @property
    def clean(self) -> bool:
        return "--bug" not in self.options


@dataclass(frozen=True)
class Matrix:
    budget_s: float
    run_length_s: float
    store: str
    defaults: dict[str, Any]
    cells: tuple[Cell, ...]
    farm: FarmStage | None = None
    runtime: str | None = None
    """Run the cells on this runtime (`bkchaos nightly --runtime sim`: the night's
    simulated equivalent) instead of the defaults' — all but a cell that names its own
    (one whose faults only some runtimes inject)."""

    def spec(self, cell: Cell, seed: int, store: str) -> TestSpec:
        """The test of one run of `cell`."""
        runtime = {"runtime": self.runtime} if self.runtime else {}
        return TestSpec(
            **{**self.defaults, **runtime, **cell.settings},
            name=store_name(f"nightly-{cell.id}"),
            workload=cell.workload,
            nemesis=cell.nemesis,
            bugs=cell.bugs,
            schedule=cell.schedule,
            seed=seed,
            time_limit=self.run_length_s,
            store=store,
        )


# ---- the matrix file -------------------------------------------------------------------


def load_matrix(path: Path, runtime: str | None = None) -> Matrix:
    """Read and check a matrix file; every cell is validated before the night starts (on
    `runtime`, when given, instead of the defaults': `Matrix.runtime`)."""
    try:
        data = tomllib.loads(path.read_text())
    except OSError as exc:
        raise UserError(f"cannot read the matrix {path}: {exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise UserError(
            f"{path} is not valid TOML: {exc}; see nightly.toml for the format"
        ) from None
    where = f"matrix {path}"
    unknown = sorted(set(data) - TOP_LEVEL)
    if unknown:
        raise UserError(f"{where}: unknown keys {unknown}; allowed: {sorted(TOP_LEVEL)}")
    workloads = _names(data.get("workloads", ["ledger"]), f"{where}: workloads")
    nemeses = [
        tuple(_names(n, f"{where}: nemeses[{i}]", allow_empty=True))
        for i, n in enumerate(_list(data.get("nemeses", [["kill", "pause"]]), f"{where}: nemeses"))
    ]
    bug_sets = [
        tuple(_names(b, f"{where}: bugs[{i}]", allow_empty=True))
        for i, b in enumerate(_list(data.get("bugs", [[]]), f"{where}: bugs"))
    ]
    defaults = _settings(data.get("defaults", {}), f"{where}: [defaults]")
    configs = data.get("configs", {"default": {}})
    if not isinstance(configs, dict) or not configs:
        raise UserError(f"{where}: [configs.NAME] tables expected, e.g. [configs.e3-wq2-aq2]")
    cells = tuple(
        Cell(workload, nemesis, name, _settings(settings, f"{where}: [configs.{name}]"), bugs)
        for workload, nemesis, (name, settings), bugs in itertools.product(
            workloads, nemeses, configs.items(), bug_sets
        )
    )
    targeted = data.get("cells", {})
    if not isinstance(targeted, dict):
        raise UserError(f"{where}: [cells.NAME] tables expected, e.g. [cells.first-add-lost]")
    cells += tuple(
        _cell(name, value, f"{where}: [cells.{name}]") for name, value in targeted.items()
    )
    matrix = Matrix(
        budget_s=parse_duration(data.get("budget", "1h"), f"{where}: budget"),
        run_length_s=parse_duration(data.get("run_length", 60), f"{where}: run_length"),
        store=str(data.get("store", "store")),
        defaults=defaults,
        cells=cells,
        farm=_farm_stage(data["farm"], f"{where}: [farm]") if "farm" in data else None,
        runtime=runtime,
    )
    for cell in cells:
        try:
            matrix.spec(cell, 0, matrix.store)
        except (UserError, TypeError) as exc:
            raise UserError(f"{where}: cell {cell.id}: {exc}") from None
    return matrix


def _cell(name: str, value: Any, where: str) -> Cell:
    """`[cells.NAME]`: one targeted cell on the clean build, beside the product — a
    workload, its faults (`nemesis`, or `schedule`: steps as `bkchaos test --schedule`
    takes, triggered ones included) and test settings — for a protocol corner the product's
    cells do not reach (docs/coverage.md)."""
    if not isinstance(value, dict):
        raise UserError(f"{where} must be a table (workload, nemesis or schedule, settings)")
    settings = _settings({k: v for k, v in value.items() if k not in CELL_KEYS}, where)
    workload = value.get("workload", "ledger")
    if not isinstance(workload, str):
        raise UserError(f'{where}: workload must be a name, e.g. "unbounded"')
    schedule = value.get("schedule", [])
    if not isinstance(schedule, list) or not all(isinstance(step, dict) for step in schedule):
        raise UserError(f"{where}: schedule must be a list of steps, e.g. [{{at = 1, ...}}]")
    if schedule and "nemesis" in value:
        raise UserError(f"{where}: give nemesis or schedule, not both (a schedule names its own)")
    try:
        kinds = schedule_kinds(schedule)
    except (KeyError, TypeError):
        kinds = ()  # the test's own check names the bad step
    nemesis = kinds or tuple(_names(value.get("nemesis", []), f"{where}: nemesis", True))
    return Cell(workload, nemesis, name, settings, schedule=tuple(schedule))


def _farm_stage(value: Any, where: str) -> FarmStage:
    """`[farm]`: budget (required), master, workload, bugs (a list of seeded bugs)."""
    if not isinstance(value, dict) or "budget" not in value:
        raise UserError(f'{where} must be a table with a budget, e.g. budget = "10m"')
    unknown = sorted(set(value) - set(FARM_KEYS))
    if unknown:
        raise UserError(f"{where}: unknown keys {unknown}; allowed: {sorted(FARM_KEYS)}")
    options: list[str] = []
    for key, flag in FARM_KEYS.items():
        if flag is None or key not in value:
            continue
        given = value[key]
        for item in _names(given, f"{where}: {key}") if key == "bugs" else [given]:
            if not isinstance(item, str) or not item:
                raise UserError(f"{where}: {key} must be a name, not {item!r}")
            options += [flag, item]
    if value.get("workload", WORKLOADS[0]) not in WORKLOADS:
        raise UserError(f"{where}: workload {value['workload']!r} is not one of {WORKLOADS}")
    try:
        seeded_bugs.parse(",".join(value.get("bugs", [])))
    except seeded_bugs.UnknownBugError as exc:
        raise UserError(f"{where}: {exc}") from None
    return FarmStage(parse_duration(value["budget"], f"{where}: budget"), tuple(options))


def _list(value: Any, where: str) -> list[Any]:
    if not isinstance(value, list) or not value:
        raise UserError(f"{where} must be a non-empty list")
    return value


def _names(value: Any, where: str, allow_empty: bool = False) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise UserError(f'{where} must be a list of names, e.g. ["kill", "pause"]')
    if not value and not allow_empty:
        raise UserError(f"{where} must not be empty")
    return value


def _settings(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise UserError(f"{where} must be a table of test settings")
    owned = sorted(set(value) & OWNED_BY_MATRIX)
    if owned:
        raise UserError(f"{where}: {owned} are set by the matrix itself (top-level keys)")
    unknown = sorted(set(value) - SPEC_SETTINGS)
    if unknown:
        raise UserError(f"{where}: unknown settings {unknown}; known: {sorted(SPEC_SETTINGS)}")
    return dict(value)


def parse_duration(value: Any, where: str) -> float:
    """Seconds from a number or a string like "90s", "45m", "2h"."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smh]?)\s*", str(value))
    if isinstance(value, bool) or match is None or float(match[1]) <= 0:
        raise UserError(f'{where}: {value!r} is not a duration; write e.g. 900, "90s", "45m", "2h"')
    return float(match[1]) * {"": 1, "s": 1, "m": 60, "h": 3600}[match[2]]


# ---- planning and running --------------------------------------------------------------


def plan(cells: tuple[Cell, ...], night: dt.date) -> Iterator[tuple[Cell, int, int]]:
    """(cell, round, seed) forever: round-robin from tonight's starting cell."""
    start = night.toordinal() % len(cells)
    order = cells[start:] + cells[:start]
    for round_ in itertools.count():
        for cell in order:
            seed = zlib.crc32(f"{night.isoformat()}/{cell.id}/{round_}".encode()) & 0xFFFFFF
            yield cell, round_, seed


def run_nightly(
    matrix: Matrix,
    store: Path,
    night: dt.date,
    budget_s: float | None = None,
    on_run: Callable[[dict[str, Any]], None] | None = None,
    rounds: int | None = None,
) -> dict[str, Any]:
    """Run the matrix within the budget (and at most `rounds` rounds) and return the
    night's summary (no analysis yet)."""
    from harness.runner import run_test

    budget_s = matrix.budget_s if budget_s is None else budget_s
    if budget_s < matrix.run_length_s + RUN_OVERHEAD_S:
        raise UserError(
            f"a budget of {budget_s:g}s does not fit one run ({matrix.run_length_s:g}s run "
            f"length + ~{RUN_OVERHEAD_S:g}s to start and check); raise budget or lower run_length"
        )
    started = time.monotonic()
    overhead = RUN_OVERHEAD_S
    runs: list[dict[str, Any]] = []
    interrupted = False
    with sigterm_as_interrupt():  # a stopped service still writes its summary
        for cell, round_, seed in plan(matrix.cells, night):
            if time.monotonic() - started + matrix.run_length_s + overhead > budget_s:
                break
            if rounds is not None and round_ >= rounds:
                break
            spec = matrix.spec(cell, seed, str(store))
            t0 = time.monotonic()
            try:
                run_dir, results = run_test(spec)
                run = _run_entry(cell, round_, spec, store, run_dir, results)
                interrupted = bool(results.get("interrupted"))
            except KeyboardInterrupt:
                interrupted = True
                break
            except Exception as exc:  # a crashed run is recorded; the night goes on
                run = _run_entry(cell, round_, spec, store, None, None)
                run["error"] = f"{type(exc).__name__}: {exc}"
                run["traceback"] = traceback.format_exc()
            run["seconds"] = round(time.monotonic() - t0, 1)
            overhead = max(overhead, run["seconds"] - matrix.run_length_s)
            runs.append(run)
            if on_run is not None:
                on_run(run)
            if interrupted or _crashed_in_a_row(runs):
                break
    summary = summarise(matrix, night, runs, previous_summary(store, night))
    summary["elapsed_s"] = round(time.monotonic() - started, 1)
    summary["interrupted"] = interrupted
    return summary


def _crashed_in_a_row(runs: list[dict[str, Any]]) -> bool:
    """Several crashes in a row mean a broken machine or harness: stop, do not spin."""
    last = runs[-MAX_CONSECUTIVE_CRASHES:]
    return len(last) == MAX_CONSECUTIVE_CRASHES and all(r["verdict"] == "error" for r in last)


def _run_entry(
    cell: Cell,
    round_: int,
    spec: TestSpec,
    store: Path,
    run_dir: Path | None,
    results: dict[str, Any] | None,
) -> dict[str, Any]:
    verdict = "error" if results is None else _VERDICT[results["valid"]]
    report = None if run_dir is None else run_dir / "report.html"
    return {
        "cell": cell.id,
        "clean": cell.clean,
        "workload": cell.workload,
        "nemesis": list(cell.nemesis),
        "config": cell.config,
        "bugs": list(cell.bugs),
        "round": round_,
        "seed": spec.seed,
        "verdict": verdict,
        "anomaly_types": [] if results is None else results["anomaly_types"],
        "run_dir": None if run_dir is None else os.path.relpath(run_dir, store),
        "report": None if report is None or not report.exists() else os.path.relpath(report, store),
        "replay": replay_command(spec, run_dir),
        "coverage": {} if results is None else {p: n for p, n in results["coverage"].items() if n},
    }


_VERDICT = {True: "valid", False: "invalid", "unknown": "unknown"}


def summarise(
    matrix: Matrix, night: dt.date, runs: list[dict[str, Any]], previous: dict[str, Any] | None
) -> dict[str, Any]:
    """Tonight's findings, compared with the previous night's."""
    ran = {r["cell"] for r in runs}
    signatures = sorted(_signatures(runs))
    before = set(previous["signatures"]) if previous else set()
    detection: dict[str, dict[str, Any]] = {}
    for run in (r for r in runs if not r["clean"]):
        entry = detection.setdefault(
            "+".join(run["bugs"]), {"runs": 0, "detected": 0, "anomaly_types": []}
        )
        entry["runs"] += 1
        entry["detected"] += run["verdict"] == "invalid"
        entry["anomaly_types"] = sorted({*entry["anomaly_types"], *run["anomaly_types"]})
    for entry in detection.values():
        entry["rate"] = round(entry["detected"] / entry["runs"], 3)
    clean = [r for r in runs if r["clean"]]
    summary = {
        "date": night.isoformat(),
        "budget_s": matrix.budget_s,
        "run_length_s": matrix.run_length_s,
        "cells": len(matrix.cells),
        "runs": runs,
        "failures": [r for r in clean if r["verdict"] != "valid"],
        "signatures": signatures,
        "previous_date": previous["date"] if previous else None,
        "new": [s for s in signatures if s not in before],
        "resolved": sorted(s for s in before - set(signatures) if s.split(": ")[0] in ran),
        "detection": detection,
        "not_run": sorted(c.id for c in matrix.cells if c.id not in ran),
        "coverage": night_coverage(runs, None),
    }
    summary["exit_code"] = (
        EXIT_CLEAN_INVALID
        if any(r["verdict"] == "invalid" for r in clean)
        else EXIT_CRASHED
        if any(r["verdict"] == "error" for r in runs)
        else 0
    )
    return summary


def night_coverage(runs: list[dict[str, Any]], farm: dict[str, Any] | None) -> dict[str, Any]:
    """What the night reached of the protocol: each probe's count summed over the runs,
    the probes the farm's tests reached, and the must-reach probes neither reached."""
    counts: Counter[str] = Counter()
    for run in runs:
        counts.update(run.get("coverage", {}))
    by_farm = farm.get("probes", []) if farm and farm.get("status") == "ok" else []
    reached = (set(counts) | set(by_farm)) & set(PROBES)
    return {
        "runs": dict(sorted(counts.items())),
        "farm": by_farm,
        "reached": len(reached),
        "probes": len(PROBES),
        "unreached": [p for p in MUST_REACH if p not in reached],
    }


def _signatures(runs: list[dict[str, Any]]) -> set[str]:
    """What went wrong, per cell, in a form two nights can be compared by."""
    found = set()
    for run in runs:
        if run["verdict"] == "error":
            found.add(f"{run['cell']}: crashed")
        elif run["clean"] and run["verdict"] == "unknown":
            found.add(f"{run['cell']}: unknown")
        elif run["clean"]:
            found.update(f"{run['cell']}: {a}" for a in run["anomaly_types"])
    for cell in {r["cell"] for r in runs if not r["clean"]}:
        if not any(r["cell"] == cell and r["verdict"] == "invalid" for r in runs):
            found.add(f"{cell}: bug not detected")
    return found


def previous_summary(store: Path, night: dt.date) -> dict[str, Any] | None:
    """The summary of the latest night before `night`, if any."""
    earlier = sorted(
        p for p in (store / "nightly").glob("*/summary.json") if p.parent.name < night.isoformat()
    )
    for path in reversed(earlier):
        try:
            return json.loads(path.read_text())
        except (OSError, ValueError):
            continue  # a half-written summary of a killed night: look further back
    return None


def run_analysis(store: Path) -> dict[str, Any]:
    """`bkchaos analyze STORE` (the Spark pipeline), in a process of its own; skipped, and
    said so on the night's page, where the `spark` extra is not installed."""
    if importlib.util.find_spec("pyspark") is None:
        return {"status": "skipped", "output": "no Spark: pip install 'bkchaos[spark]'"}
    done = subprocess.run(
        [sys.executable, "-c", "from harness.cli import main; main()", "analyze", str(store)],
        capture_output=True,
        text=True,
    )
    output = (done.stdout + done.stderr).strip().splitlines()[-20:]
    analysis = {
        "status": "ok" if done.returncode == 0 else "failed",
        "exit_code": done.returncode,
        "output": "\n".join(output),
    }
    if (store / TRENDS_PAGE).exists():
        analysis["trends"] = TRENDS_PAGE
    return analysis


def run_farm_stage(stage: FarmStage, store: Path, night: dt.date) -> dict[str, Any]:
    """`bkchaos farm` within the stage's budget, in a process of its own, seeded from the
    date (each night draws other tests; re-running a night repeats them); its summary,
    trimmed for the night's page. Skipped where the `spark` extra is not installed."""
    if importlib.util.find_spec("pyspark") is None:
        return {"status": "skipped", "output": "no Spark: pip install 'bkchaos[spark]'"}
    seed = zlib.crc32(f"{night.isoformat()}/farm".encode()) & 0xFFFFFF
    done = subprocess.run(
        [
            *(sys.executable, "-c", "from harness.cli import main; main()", "farm", "--json"),
            *("--budget", f"{stage.budget_s:g}s", "--seed", str(seed), "--store", str(store)),
            *stage.options,
        ],
        capture_output=True,
        text=True,
    )
    try:
        farm = json.loads(done.stdout)
    except ValueError:
        output = (done.stdout + done.stderr).strip().splitlines()[-20:]
        return {"status": "failed", "exit_code": done.returncode, "output": "\n".join(output)}
    failures = [
        {
            "anomaly": f["anomaly"],
            "run_dir": os.path.relpath(f["run_dir"], store),
            "replay": f["replay"] or f["replay_sim"],
        }
        for f in farm["failures"]
    ]
    keep = ("tests", "tests_per_s", "seconds", "slots", "master", "invalid", "unknown", "corpus")
    return {
        "status": "ok",
        "clean": stage.clean,
        "seed": seed,
        **{k: farm[k] for k in keep},
        "coverage": len(farm["coverage"]),
        "probes": sorted(
            f.removeprefix("probe:") for f in farm["coverage"] if f.startswith("probe:")
        ),
        "failures": failures,
    }


def final_exit_code(summary: dict[str, Any]) -> int:
    """The night's exit code once its analysis ran: 130 if interrupted; else the runs' code,
    except that a failed analysis (Spark crashed, or disagreed with the Python checker on
    some run) makes an otherwise clean night exit 255, as a harness failure."""
    if summary["interrupted"]:
        return 130
    farm = summary.get("farm", {})
    if summary["exit_code"] == 0 and farm.get("clean") and farm.get("failures"):
        return EXIT_CLEAN_INVALID  # the farm found an invalid history on a clean build
    if summary["exit_code"] == 0 and "failed" in (
        summary.get("analysis", {}).get("status"),
        farm.get("status"),
    ):
        return EXIT_CRASHED
    return summary["exit_code"]


# ---- the summary page ------------------------------------------------------------------


def write_summary(summary: dict[str, Any], store: Path) -> Path:
    """Write `nightly/<date>/summary.json` and `index.html`; point `nightly/latest` there."""
    night_dir = store / "nightly" / summary["date"]
    night_dir.mkdir(parents=True, exist_ok=True)
    (night_dir / "summary.json").write_text(json.dumps(summary, indent=2))
    (night_dir / "index.html").write_text(render_html(summary))
    latest = store / "nightly" / "latest"
    tmp = latest.with_name("latest.tmp")
    tmp.unlink(missing_ok=True)
    tmp.symlink_to(summary["date"])
    tmp.replace(latest)
    return night_dir / "index.html"


def render_html(summary: dict[str, Any]) -> str:
    """A self-contained page (harness/report/templates/nightly.html.j2): the failures
    first, then what changed, then everything."""
    from harness.report.render import environment

    clean_bad = len(summary["failures"])
    headline = (
        f"{clean_bad} clean run(s) not valid"
        if clean_bad
        else "every clean run valid"
        if summary["runs"]
        else "no runs"
    )
    page = environment().get_template("nightly.html.j2")
    return page.render(summary=summary, headline=headline) + "\n"
