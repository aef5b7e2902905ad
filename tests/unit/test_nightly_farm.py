"""The nightly matrix's farm stage (`[farm]`): read and checked with the matrix, its
summary on the night's page, an invalid history on a clean build failing the night. The
stage itself runs `bkchaos farm` (tests/spark/test_farm.py runs the farm for real)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from harness.errors import UserError
from harness.nightly import FarmStage, final_exit_code, load_matrix, render_html
from tests.helpers.nightly import write_matrix


def test_the_farm_table_becomes_bkchaos_farm_options(tmp_path: Path) -> None:
    text = '[farm]\nbudget = "5m"\nmaster = "local[2]"\nworkload = "log"\nbugs = ["no-cookie"]'
    stage = load_matrix(write_matrix(tmp_path, text)).farm
    assert stage == FarmStage(
        300.0, ("--master", "local[2]", "--workload", "log", "--bug", "no-cookie")
    )
    assert not stage.clean
    assert load_matrix(write_matrix(tmp_path, "budget = '1h'")).farm is None


def test_the_sample_matrix_has_a_clean_farm_stage() -> None:
    stage = load_matrix(Path(__file__).parents[2] / "nightly.toml").farm
    assert stage is not None and stage.clean and stage.budget_s > 0


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[farm]\nmaster = 'local[2]'", "must be a table with a budget"),
        ("[farm]\nbudget = 'later'", "'later' is not a duration"),
        ("[farm]\nbudget = '1m'\ncores = 4", "unknown keys ['cores']"),
        ("[farm]\nbudget = '1m'\nworkload = 'queue'", "workload 'queue' is not one of"),
        ("[farm]\nbudget = '1m'\nbugs = ['typo']", "unknown seeded bug 'typo'"),
        ("[farm]\nbudget = '1m'\nbugs = 'no-cookie'", "must be a list of names"),
    ],
)
def test_a_bad_farm_table_is_refused_saying_what_to_fix(
    tmp_path: Path, text: str, message: str
) -> None:
    with pytest.raises(UserError) as error:
        load_matrix(write_matrix(tmp_path, text))
    assert message in str(error.value)


def night(farm: dict[str, Any] | None) -> dict[str, Any]:
    summary: dict[str, Any] = {
        "date": "2026-11-20",
        "budget_s": 60.0,
        "run_length_s": 5.0,
        "cells": 1,
        "runs": [],
        "failures": [],
        "new": [],
        "resolved": [],
        "detection": {},
        "not_run": [],
        "previous_date": None,
        "exit_code": 0,
        "interrupted": False,
        "analysis": {"status": "skipped"},
    }
    if farm is not None:
        summary["farm"] = farm
    return summary


FOUND = {
    "status": "ok",
    "clean": True,
    "seed": 1,
    "tests": 1200,
    "tests_per_s": 2.5,
    "seconds": 480.0,
    "slots": 2,
    "master": "local[*]",
    "invalid": 3,
    "unknown": 1,
    "corpus": 40,
    "coverage": 55,
    "failures": [
        {
            "anomaly": "lost-append",
            "run_dir": "farm-clean/20261120T010000",
            "replay": "bkchaos search --replay store/farm-clean/20261120T010000/minimal.json",
        }
    ],
}


def test_the_night_s_page_shows_the_farm_and_its_failures() -> None:
    page = render_html(night(FOUND))
    farm = page[page.index("<h2>Simulation farm</h2>") : page.index("<h2>Spark analysis</h2>")]
    assert "1,200 simulated tests on local[*]" in farm
    assert "lost-append" in farm and "../../farm-clean/20261120T010000" in farm
    assert "bkchaos search --replay" in farm
    assert "no farm stage" in render_html(night(None))


def test_a_farm_failure_fails_a_clean_night_but_not_one_with_seeded_bugs() -> None:
    assert final_exit_code(night(FOUND)) == 1
    assert final_exit_code(night({**FOUND, "clean": False})) == 0
    assert final_exit_code(night({**FOUND, "failures": []})) == 0
    assert final_exit_code(night({"status": "failed", "output": "no Java"})) == 255
