"""The pytest plugin, driven through pytester, on real (short) runs of the local runtime:
the chaos marker, the fixtures, the failure output and the teardown of `bk_cluster`."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.runtime.process import pid_alive

pytestmark = pytest.mark.usefixtures("project_ini")


def test_marker_fixtures_and_failure_output_on_real_runs(pytester: pytest.Pytester) -> None:
    """One session, four real runs: a passing marked test, a marked test whose expectation
    is not met in two tries (its last run's short summary), the `chaos` fixture replaying a
    schedule, and `bk_cluster` (a running cluster, gone after its module); pytest-html
    links each run."""
    pytester.makepyfile(
        """
        import json
        import pytest

        @pytest.mark.chaos(nemesis=["kill"], nemesis_interval=2, time_limit=60)
        def test_clean_under_kills(chaos):
            (run,) = chaos.runs
            assert run.results["stats"]["appends_ok"] > 0

        @pytest.mark.chaos(nemesis=["pause"], nemesis_interval=2, expect="invalid", test_count=2)
        def test_must_catch_a_bug_that_is_not_there():
            raise AssertionError("the body runs only once the verdict is as expected")

        SCHEDULE = (
            {"at": 0.5, "f": "kill", "value": {"nodes": ["b2"]}},
            {"at": 2.0, "f": "restart", "value": {"nodes": ["b2"]}},
        )

        def test_chaos_fixture_replays_a_schedule(chaos):
            run = chaos(schedule=SCHEDULE, seed=5)
            assert run.valid is True, run.summary()
            assert run.spec.nemesis == ("kill",) and run.spec.seed == 5
            saved = json.loads((run.run_dir / "test.json").read_text())
            assert saved["schedule"] == [dict(s) for s in SCHEDULE]
            faults = [
                json.loads(line)["f"]
                for line in (run.run_dir / "history.jsonl").read_text().splitlines()
                if '"nemesis"' in line and '"invoke"' in line
            ]
            assert faults == ["kill", "restart", "heal"]

        def test_bk_cluster_is_running(bk_cluster, tmp_path_factory):
            status = bk_cluster.status()
            assert status["zk_serving"] and all(b["registered"] for b in status["bookies"])
            pids = [b.pid for b in bk_cluster.bookies] + [bk_cluster.zk_pid]
            (tmp_path_factory.getbasetemp() / "pids.json").write_text(json.dumps(pids))
        """
    )
    fake_html = pytester.mkpydir("pytest_html")  # stands in for pytest-html's extras API
    (fake_html / "extras.py").write_text(
        "def url(content, name=None):\n    return [content, name]\n"
    )
    pytester.syspathinsert()
    pytester.makeconftest(
        """
        import json

        def pytest_runtest_logreport(report):
            if report.when == "call" and getattr(report, "extras", None):
                with open("extras.jsonl", "a") as out:
                    out.write(json.dumps([report.nodeid, report.extras]) + "\\n")
        """
    )
    basetemp = pytester.path / "basetemp"
    result = pytester.runpytest(
        "--bkchaos-store",
        "runs",
        "--bkchaos-time-limit",
        "5",
        "--bkchaos-seed",
        "4242",
        f"--basetemp={basetemp}",
        "-rA",
    )
    result.assert_outcomes(passed=3, failed=1)
    result.stdout.fnmatch_lines(
        [
            "*expected a invalid run, got VALID: ledger workload, nemesis pause, bugs none, "
            "seed 4243, 5s",  # test_count=2: seeds 4242 and 4243, both valid
            "*: runs/test_must_catch_a_bug_that_is_not_there/2*",
            "replay: bkchaos test --name test_must_catch_a_bug_that_is_not_there "
            "--nemesis pause --nemesis-interval 2 --time-limit 5 --bookies 3 --seed 4243 "
            "--runtime local --store runs",  # the CLI's default runtime is docker
        ]
    )
    assert "the body runs only once" not in result.stdout.str()
    runs = sorted((pytester.path / "runs").glob("test_*/2*/test.json"))
    assert len(runs) == 4
    for test_json in runs:
        spec = json.loads(test_json.read_text())
        assert spec["time_limit"] == 5  # --bkchaos-time-limit overrides the marker's 60
        assert spec["store"] == "runs"
    extras = [
        json.loads(line) for line in (pytester.path / "extras.jsonl").read_text().splitlines()
    ]
    assert len(extras) == 3  # a link per run, on the three tests that ran any
    assert sorted(len(links) for _, links in extras) == [1, 1, 2]
    for _, links in extras:
        (target, name) = links[0]
        assert Path(target).name == "report.html" or Path(target).is_dir()  # run dir if none
        assert name.startswith("bkchaos 2")
    pids = json.loads((basetemp / "pids.json").read_text())
    assert pids and not any(pid_alive(pid) for pid in pids)


def test_sigterm_still_tears_bk_cluster_down(pytester: pytest.Pytester, tmp_path: Path) -> None:
    pids_file = tmp_path / "pids.json"
    pytester.makepyfile(
        f"""
        import json, time

        def test_hold(bk_cluster):
            pids = [b.pid for b in bk_cluster.bookies] + [bk_cluster.zk_pid]
            open({str(pids_file)!r}, "w").write(json.dumps(pids))
            time.sleep(120)
        """
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q"],
        cwd=pytester.path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
    )
    deadline = time.monotonic() + 60
    while not pids_file.exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    try:
        assert pids_file.exists(), "the cluster never came up"
        time.sleep(0.2)  # the file is written in one call; let it land
        pids = json.loads(pids_file.read_text())
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert not any(pid_alive(pid) for pid in pids)
