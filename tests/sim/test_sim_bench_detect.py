"""`bkchaos bench detect` in the simulation: a matrix split by `--first-seed` runs the seeds
it names, so commands run one after another (or on several machines) add up to one."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.cli import main


def test_a_matrix_split_by_first_seed_runs_the_seeds_it_names(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["bench", "detect", "--runtime", "sim", "--bugs", "scope-id-ignored", "--runs", "1"]
    with pytest.raises(SystemExit) as exited:
        main([*args, "--first-seed", "5", "--time-limit", "1", "--store", str(tmp_path), "--json"])
    assert exited.value.code in (0, None)
    figures = json.loads(capsys.readouterr().out)
    row = figures["bugs"]["scope-id-ignored"]
    assert (row["detected"], row["runs"], row["missed_seeds"]) == (1, 1, [])  # caught in 0.2 s
    assert row["clean_twins"] == {"valid": 1, "invalid": 0, "unknown": 0}
    assert figures["settings"]["first_seed"] == 5
    runs = [*row["run_dirs"], *(tmp_path / "bench-detect-clean-scope-id-ignored").glob("2*")]
    assert [json.loads((Path(d) / "test.json").read_text())["seed"] for d in runs] == [5, 5]
