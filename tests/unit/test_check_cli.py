"""`bkchaos check` and `bkchaos bench checker` through the real CLI and its exit codes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from harness.cli import main

INSTALLED_BKCHAOS = Path(sys.executable).with_name("bkchaos")

# docs/history.md §6 as the shared contract wrote it (value keys in writing order)
SPEC_EXAMPLE = """\
{"index":0,"time":1000,"type":"invoke","process":0,"f":"append","value":{"ledger":7,"payload":"p0"}}
{"index":1,"time":2500,"type":"ok","process":0,"f":"append","value":{"ledger":7,"payload":"p0","entry":0}}
{"index":2,"time":3000,"type":"invoke","process":"nemesis","f":"start-partition","value":{"grudge":{"b1":["b2","b3"]}}}
{"index":3,"time":3100,"type":"info","process":"nemesis","f":"start-partition","value":{"grudge":{"b1":["b2","b3"]},"proof":{"b1->b2":"dropped"}}}
{"index":4,"time":4000,"type":"invoke","process":1,"f":"read","value":{"ledger":7,"mode":"closed"}}
{"index":5,"time":9000,"type":"ok","process":1,"f":"read","value":{"ledger":7,"mode":"closed","lac":0,"entries":[[0,"p0"]]}}
"""


def history(tmp_path: Path, text: str = SPEC_EXAMPLE) -> Path:
    path = tmp_path / "history.jsonl"
    path.write_text(text)
    return path


def exit_code(argv: list[str]) -> int:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    return exc.value.code


def test_spec_example_through_the_installed_command(tmp_path) -> None:
    done = subprocess.run(
        [str(INSTALLED_BKCHAOS), "check", "--json", str(history(tmp_path))],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["valid"] is True
    assert result["anomaly_types"] == [] and result["anomalies"] == {}
    assert result["stats"] == {"ops": 6, "invoke": 3, "ok": 2, "fail": 0, "info": 1,
                               "ledgers": 1, "unchecked_ledgers": [], "appends_ok": 1}  # fmt: skip
    assert set(result["checkers"]) == {
        "stats", "perf", "ledger", "stream", "graph", "replication", "nemesis", "ensemble",
        "availability", "liveness",
    }  # fmt: skip
    assert all("valid" in r for r in result["checkers"].values())


def test_invalid_exits_1_with_a_readable_summary(tmp_path, capsys) -> None:
    text = SPEC_EXAMPLE.replace('"entries":[[0,"p0"]]', '"entries":[]')
    assert exit_code(["check", str(history(tmp_path, text))]) == 1
    out = capsys.readouterr().out
    assert ": INVALID" in out
    assert "lost-append: 1 case(s)" in out
    assert "acknowledged at entry 0 of ledger 7" in out


def test_unknown_exits_2(tmp_path, capsys) -> None:
    text = "".join(SPEC_EXAMPLE.splitlines(keepends=True)[:4])
    assert exit_code(["check", str(history(tmp_path, text))]) == 2
    assert "unchecked (no closed read): ledgers [7]" in capsys.readouterr().out


def test_run_dir_writes_results_beside_the_history_with_write(tmp_path) -> None:
    history(tmp_path)
    assert exit_code(["check", str(tmp_path)]) == 0
    assert not (tmp_path / "results.json").exists()  # only --write writes
    assert exit_code(["check", str(tmp_path), "--write"]) == 0
    assert json.loads((tmp_path / "results.json").read_text())["valid"] is True


def test_out_option(tmp_path) -> None:
    out = tmp_path / "r.json"
    assert exit_code(["check", str(history(tmp_path)), "--out", str(out)]) == 0
    assert json.loads(out.read_text())["stats"]["ops"] == 6


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (SPEC_EXAMPLE.replace('"index":3', '"index":1'), "line 4: index 1 does not increase"),
        (SPEC_EXAMPLE + "{oops}\n", "line 7: bad JSON"),
    ],
)
def test_malformed_history_exits_254_naming_the_line(tmp_path, capsys, text, message) -> None:
    assert exit_code(["check", str(history(tmp_path, text))]) == 254
    assert message in capsys.readouterr().err


def test_truncated_last_line_warns_and_checks(tmp_path, capsys) -> None:
    assert exit_code(["check", str(history(tmp_path, SPEC_EXAMPLE + '{"ind'))]) == 0
    assert "line 7 is truncated" in capsys.readouterr().err


def test_missing_inputs_exit_254(tmp_path, capsys) -> None:
    assert exit_code(["check", str(tmp_path / "nope.jsonl")]) == 254
    assert exit_code(["check", str(tmp_path)]) == 254
    assert "has no history.jsonl" in capsys.readouterr().err


def test_bench_checker_prints_its_ratio(capsys) -> None:
    argv = ["bench", "checker", "--ops", "3000", "--ledgers", "3", "--repeat", "1", "--json"]
    assert exit_code(argv) == 0
    figures = json.loads(capsys.readouterr().out)
    assert figures["check"]["valid"] is True
    assert figures["ratio"] > 0 and figures["check"]["peak_rss_mib"] > 0
    assert figures["ops"] >= 3000
