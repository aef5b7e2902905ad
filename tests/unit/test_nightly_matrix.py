"""`bkchaos nightly` without running a night: the matrix file, planning, night-to-night
comparison and the final exit code (a short real night: tests/integration/test_nightly.py)."""

from __future__ import annotations

import datetime as dt
import subprocess
from pathlib import Path

import pytest

from harness.errors import UserError
from harness.nightly import Cell, Matrix, final_exit_code, load_matrix, plan, summarise
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
