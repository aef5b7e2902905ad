"""The detection bench's pure parts: its table of exposing tests and time to detection."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bookie_image import bugs
from harness.bench.detect import (
    EXPOSERS,
    _describe,
    _lag_summary,
    _summary,
    exposing_spec,
    runs_on,
    seconds_to_first_anomaly,
    triggered_lags,
)
from harness.cli import main
from nemesis.kinds import NETWORK_NEMESES


def test_every_seeded_bug_has_an_exposing_test_on_the_runtime_its_faults_need() -> None:
    assert set(EXPOSERS) == bugs.KNOWN
    for bug in EXPOSERS:
        spec = exposing_spec(bug, seed=1, store="store", time_limit=20)  # validates itself
        needs_docker = bool(set(spec.nemesis) & set(NETWORK_NEMESES))
        runtime = "docker" if needs_docker else "local"
        assert spec.bugs == (bug,) and spec.runtime == runtime


def test_each_exposing_test_is_described_by_its_flags() -> None:
    """What `bench detect` prints per bug: the flags that differ from the defaults, a
    schedule's steps inline."""
    assert _describe("no-cookie") == "--workload ledger --nemesis wipe"
    described = _describe("unbounded-no-truncate")
    assert described.startswith("--workload unbounded --runtime docker --schedule [{")
    assert '"to": ["b2", "b3"]' in described and "--takeovers 0.5" in described
    assert "--wq 3 --aq 2" in described  # as `bkchaos test` spells them


def test_time_to_detect_is_when_the_earliest_case_has_all_its_ops(tmp_path: Path) -> None:
    times = {0: 5.0, 1: 6.0, 2: 9.0, 3: 12.0, 4: 20.0}  # seconds
    history = tmp_path / "history.jsonl"
    history.write_text(
        "".join(json.dumps({"index": i, "time": int(t * 1e9)}) + "\n" for i, t in times.items())
        + '{"index": 5, "ti'  # a crash-truncated last line is skipped
    )
    results = {
        "anomalies": {
            "lost-append": [{"ops": [1, 3]}],  # visible at op 3: 12 s
            "dirty-read": [{"ops": [4, 0]}, {"ops": [2]}],  # at 20 s, and at 9 s
        }
    }
    assert seconds_to_first_anomaly(history, results) == pytest.approx(4.0)
    assert seconds_to_first_anomaly(history, {"anomalies": {}}) is None


def test_the_bench_runs_an_exposer_only_where_its_faults_can_be_performed() -> None:
    """`--runtime local` leaves out the exposers of packet faults (tc needs containers);
    the simulation performs every fault kind, so every exposer runs there."""
    assert not runs_on("ensemble-change-drops-pending", "local")
    assert not runs_on("unbounded-no-truncate", "local")
    assert runs_on("no-cookie", "local")
    assert all(runs_on(bug, "sim") for bug in EXPOSERS)
    assert exposing_spec("no-cookie", 1, "store", 10, "sim").runtime == "sim"
    assert exposing_spec("unbounded-no-truncate", 1, "store", 10).runtime == "docker"


def test_each_bugs_figures_count_its_clean_twins_verdicts() -> None:
    def run(
        valid: object, anomalies: list[str], seconds: float | None, seed: int
    ) -> dict[str, object]:
        lags = {"read": [], "start": [], "proven": [], "re_armed": 0}
        return {
            "valid": valid,
            "anomaly_types": anomalies,
            "seconds_to_detect": seconds,
            "triggered": lags,
            "seed": seed,
        }

    buggy = [
        run(False, ["lost-append"], 3.0, 4),
        run(True, [], None, 5),
        run(False, ["dirty-read"], 5.0, 6),
    ]
    clean = [
        run(True, [], None, 4),
        run("unknown", [], None, 5),
        run(False, ["dirty-read"], 1.0, 6),
    ]
    figures = _summary([{**r, "run_dir": "d"} for r in buggy], clean)
    assert (figures["detected"], figures["runs"], figures["median_seconds_to_detect"]) == (
        2,
        3,
        4.0,
    )
    assert figures["anomalies"] == ["dirty-read", "lost-append"]
    assert figures["missed_seeds"] == [5]
    assert figures["clean_twins"] == {"valid": 1, "invalid": 1, "unknown": 1}
    assert figures["triggered"] == {"fired": 0, "re_armed": 0}


def test_triggered_faults_lags_are_read_off_each_fired_op(tmp_path: Path) -> None:
    """From the probe line's writing to its reading, to the fault's start (the invoke), to
    its proof (the completion); a fault that was never proven has no proof lag."""
    ops = []
    for i, (written, read, start, proven) in enumerate(
        [(1.0, 1.002, 1.03, 1.05), (2.0, 2.004, 2.05, None)]
    ):
        timing = {"node": "c1", "written_s": written, "read_s": read}
        value = {"nodes": ["b1"], "on": "recovery-started", "probe_timing": timing}
        ops.append({"type": "invoke", "f": "kill", "time": int(start * 1e9), "value": value})
        if proven is not None:
            done = {**value, "proof": {"b1": {"gone": True}}}
            ops.append({"type": "info", "f": "kill", "time": int(proven * 1e9), "value": done})
        ops.append({"index": i, "type": "ok", "f": "append", "time": 0, "value": 1})
    (tmp_path / "history.jsonl").write_text("".join(json.dumps(op) + "\n" for op in ops))
    (tmp_path / "bkchaos.log").write_text("x INFO recovery-started heard while busy: re-armed\n")
    lags = triggered_lags(tmp_path)
    assert [round(v) for v in lags["read"]] == [2, 4]
    assert [round(v) for v in lags["start"]] == [28, 46]
    assert [round(v) for v in lags["proven"]] == [20] and lags["re_armed"] == 1
    summary = _lag_summary([{"triggered": lags}])
    assert summary["fired"] == 2 and summary["read_ms"] == {"median": 3.0, "p90": 4.0, "max": 4.0}


def test_asking_for_an_exposer_on_a_runtime_that_cannot_run_it_exits_254(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["bench", "detect", "--runtime", "local", "--bugs", "unbounded-no-truncate"]
    with pytest.raises(SystemExit) as exited:
        main([*args, "--store", str(tmp_path)])
    assert exited.value.code == 254
    err = capsys.readouterr().err
    assert "unbounded-no-truncate cannot run on --runtime local" in err and "Traceback" not in err
    assert not list(tmp_path.iterdir())  # nothing ran
