"""`bkchaos nightly` without running a night: the matrix file, planning, night-to-night
comparison and the final exit code (a short real night: tests/integration/test_nightly.py)."""

from __future__ import annotations

import datetime as dt
import subprocess
from pathlib import Path

import pytest

from bookie_image.probes import PROBES
from harness.errors import UserError
from harness.nightly import (
    MUST_REACH,
    Cell,
    Matrix,
    final_exit_code,
    load_matrix,
    night_coverage,
    plan,
    render_html,
    summarise,
)
from tests.helpers.cli import BKCHAOS
from tests.helpers.nightly import NIGHT, write_matrix


def test_the_sample_matrix_loads() -> None:
    matrix = load_matrix(Path(__file__).parents[2] / "nightly.toml")
    assert matrix.cells and matrix.budget_s >= matrix.run_length_s
    assert any(cell.clean for cell in matrix.cells)
    assert any(not cell.clean for cell in matrix.cells)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("budget = [", "not valid TOML"),
        ("colour = 'red'", "unknown keys ['colour']"),
        ("budget = 'soon'", "budget: 'soon' is not a duration"),
        ("nemeses = 'kill'", "nemeses must be a non-empty list"),
        ("nemeses = [['meteor']]", "unknown nemesis ['meteor']"),
        ("bugs = [['typo']]", "unknown seeded bug 'typo'"),
        ("[configs.big]\nensemble = 5", "needs at least 5 bookies"),
        ("[configs.x]\nwq = 2", "unknown settings ['wq']"),
        ("[defaults]\nseed = 3", "['seed'] are set by the matrix itself"),
    ],
)
def test_a_bad_matrix_is_refused_saying_what_to_fix(
    tmp_path: Path, text: str, message: str
) -> None:
    with pytest.raises(UserError) as error:
        load_matrix(write_matrix(tmp_path, text))
    assert message in str(error.value)


def test_a_bad_matrix_exits_254_without_traceback(tmp_path: Path) -> None:
    done = subprocess.run(
        [*BKCHAOS, "nightly", str(write_matrix(tmp_path, "budget = ["))],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 254
    assert "not valid TOML" in done.stderr and "Traceback" not in done.stderr


def test_plan_rotates_cells_and_seeds_by_night_and_repeats_a_night_exactly() -> None:
    cells = tuple(Cell("ledger", (n,), "c", {}) for n in ("kill", "pause", "x"))

    def night(date: dt.date, n: int = 7) -> list[tuple[str, int, int]]:
        runs = plan(cells, date)
        return [(cell.id, round_, seed) for cell, round_, seed in (next(runs) for _ in range(n))]

    tonight = night(NIGHT)
    assert tonight == night(NIGHT)  # the same night replays exactly
    assert [r for _, r, _ in tonight] == [0, 0, 0, 1, 1, 1, 2]
    assert {c for c, _, _ in tonight[:3]} == {c.id for c in cells}  # a round covers all
    tomorrow = night(NIGHT + dt.timedelta(days=1))
    assert tomorrow[0][0] != tonight[0][0]  # starts elsewhere: small budgets still cover all
    assert not {s for _, _, s in tonight} & {s for _, _, s in tomorrow}


def test_summary_compares_with_the_previous_night() -> None:
    clean = Cell("ledger", ("kill",), "c", {})
    buggy = Cell("ledger", ("kill",), "c", {}, ("no-cookie",))
    other = Cell("ledger", ("pause",), "c", {})
    matrix = Matrix(60, 5, "store", {}, (clean, buggy, other))

    def run(cell: Cell, verdict: str, anomalies: list[str]) -> dict:
        return {
            "cell": cell.id,
            "clean": cell.clean,
            "bugs": list(cell.bugs),
            "verdict": verdict,
            "anomaly_types": anomalies,
        }

    previous = {
        "date": "2026-11-19",
        "signatures": [f"{clean.id}: divergence", f"{other.id}: lost-append"],
    }
    runs = [
        run(clean, "invalid", ["lost-append"]),
        run(buggy, "valid", []),
        run(buggy, "invalid", ["truncated-ledger"]),
    ]
    summary = summarise(matrix, NIGHT, runs, previous)
    assert summary["exit_code"] == 1
    assert summary["failures"] == [runs[0]]
    assert summary["new"] == [f"{clean.id}: lost-append"]
    assert summary["resolved"] == [f"{clean.id}: divergence"]  # `other` did not run tonight
    assert summary["not_run"] == [other.id]
    assert summary["detection"] == {
        "no-cookie": {"runs": 2, "detected": 1, "rate": 0.5, "anomaly_types": ["truncated-ledger"]}
    }


def test_a_failed_analysis_fails_an_otherwise_clean_night() -> None:
    def night(code: int, analysis: str, interrupted: bool = False) -> int:
        summary = {"exit_code": code, "interrupted": interrupted, "analysis": {"status": analysis}}
        return final_exit_code(summary)

    assert night(0, "ok") == 0 and night(0, "skipped") == 0
    assert night(0, "failed") == 255  # Spark crashed or disagreed with the Python checker
    assert night(1, "failed") == 1  # an invalid clean run stays the headline
    assert night(0, "failed", interrupted=True) == 130


TARGETED = """
[defaults]
bookies = 5

[cells.first-add-lost]
workload = "unbounded"
bookies = 3
schedule = [
  {at = 0, on = "client-add-sent", f = "power-loss", value = {nodes = ["@0", "@1"]}, hold = 2},
]

[cells.split]
workload = "unbounded"
runtime = "sim"
schedule = [{at = 1, on = "recovery-started", f = "kill", value = {nodes = ["@0"]}, hold = 1}]

[cells.plain]
nemesis = ["pause"]
takeovers = 0.3
"""


def test_targeted_cells_join_the_product_with_their_faults_and_settings(tmp_path: Path) -> None:
    matrix = load_matrix(write_matrix(tmp_path, TARGETED))
    ids = [cell.id for cell in matrix.cells]
    assert ids == [
        "ledger/kill+pause/default/clean",  # the product: the defaults' workload and nemeses
        "unbounded/power-loss/first-add-lost/clean",
        "unbounded/kill/split/clean",
        "ledger/pause/plain/clean",
    ]
    first, split, plain = matrix.cells[1:]
    spec = matrix.spec(first, 7, "store")
    assert spec.bookies == 3 and spec.workload == "unbounded" and spec.runtime == "local"
    assert spec.schedule == first.schedule and spec.schedule[0]["on"] == "client-add-sent"
    assert matrix.spec(plain, 7, "store").takeovers == 0.3
    assert matrix.spec(split, 7, "store").runtime == "sim"  # a cell may name its own
    # --runtime sim moves every cell that does not name its own runtime
    simulated = load_matrix(write_matrix(tmp_path, TARGETED), "sim")
    assert {simulated.spec(cell, 7, "store").runtime for cell in simulated.cells} == {"sim"}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("cells = 3", "[cells.NAME] tables expected"),
        ("[cells.x]\nwq = 3", "[cells.x]: unknown settings ['wq']"),
        ("[cells.x]\nschedule = 'steps.json'", "schedule must be a list of steps"),
        (
            "[cells.x]\nnemesis = ['kill']\n"
            "schedule = [{at = 1, f = 'kill', value = {nodes = ['b1']}}]",
            "give nemesis or schedule, not both",
        ),
        (
            "[cells.x]\nschedule = [{at = 1, on = 'recovery-started', f = 'kill', "
            "value = {nodes = ['@self']}, hold = 1}]",
            "a client agent reaches 'recovery-started'",
        ),
        (  # partitions on the default (local) runtime: refused before the night starts
            "[cells.x]\nschedule = [{at = 1, f = 'start-partition', value = {nodes = ['b1']}}]",
            "cell ledger/partition/x/clean",
        ),
    ],
)
def test_a_bad_targeted_cell_is_refused_saying_what_to_fix(
    tmp_path: Path, text: str, message: str
) -> None:
    with pytest.raises(UserError) as error:
        load_matrix(write_matrix(tmp_path, text))
    assert message in str(error.value)


def test_the_night_s_coverage_sums_its_runs_and_adds_the_farm_s_probes() -> None:
    runs = [
        {"coverage": {"recovery-started": 2, "bookie-fenced": 1}},
        {"coverage": {"recovery-started": 3}},
        {},  # a crashed run: no coverage
    ]
    farm = {"status": "ok", "probes": ["bookie-fenced", "unbounded-takeover"]}
    cov = night_coverage(runs, farm)
    assert cov["runs"] == {"bookie-fenced": 1, "recovery-started": 5}
    assert cov["reached"] == 3 and cov["probes"] == len(PROBES)
    assert "unbounded-takeover" not in cov["unreached"] and "recovery-empty" in cov["unreached"]
    assert len(cov["unreached"]) == len(MUST_REACH) - 3
    assert night_coverage(runs, {"status": "failed"})["reached"] == 2
    summary = summarise(Matrix(60, 5, "store", {}, ()), NIGHT, [], None)
    page = render_html({**summary, "coverage": cov, "analysis": {"status": "skipped"}})
    assert "3 of" in page and "recovery-empty" in page
