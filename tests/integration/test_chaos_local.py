"""`bkchaos test` end to end on the local runtime: real ZooKeeper, bookies and agents."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import checkers
from tests.helpers.cli import BKCHAOS


def _processes_mentioning(text: str) -> list[str]:
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            args = cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in args and "pytest" not in args:
            found.append(args)
    return found


def _run(store: Path, *args: str, timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*BKCHAOS, "test", "--runtime", "local", "--store", str(store), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_clean_run_under_kills_and_pauses_checks_valid(tmp_path: Path) -> None:
    store = tmp_path / "store"
    done = _run(
        store,
        "--time-limit",
        "20",
        "--nemesis",
        "kill,pause",
        "--nemesis-interval",
        "3",
        "--seed",
        "11",
        "--concurrency",
        "4",
    )
    assert done.returncode == 0, done.stdout + done.stderr
    run_dir = (store / "latest").resolve()
    results = json.loads((run_dir / "results.json").read_text())
    assert results["valid"] is True
    assert results["stats"]["appends_ok"] > 50
    assert results["checkers"]["nemesis"]["faults"] >= 2  # faults happened and were proven
    assert checkers.check(run_dir / "history.jsonl")["valid"] is True
    spec = json.loads((run_dir / "test.json").read_text())
    assert spec["seed"] == 11 and spec["nemesis"] == ["kill", "pause"]
    assert sorted(p.name for p in (run_dir / "logs").iterdir())[:2] == ["b1", "b2"]
    assert (store / "ledger" / "latest").resolve() == run_dir


def test_faults_aimed_at_the_writers_bookies_keep_a_clean_build_valid(tmp_path: Path) -> None:
    """`--targets writer`: each kill takes down the whole ensemble a ledger is being
    written to (3 of the 4 bookies) and brings it back; a correct build stays valid."""
    store = tmp_path / "store"
    args = ["--targets", "writer", "--nemesis", "kill", "--nemesis-interval", "3"]
    done = _run(store, *args, "--time-limit", "15", "--seed", "4")
    assert done.returncode == 0, done.stdout + done.stderr
    history = ((store / "latest").resolve() / "history.jsonl").read_text().splitlines()
    kills = [
        op["value"]["nodes"]
        for op in map(json.loads, history)
        if op["process"] == "nemesis" and op["f"] == "kill" and op["type"] == "info"
    ]
    assert kills and all(len(nodes) == 3 for nodes in kills), kills


def test_sigint_heals_tears_down_and_leaves_a_checkable_history(tmp_path: Path) -> None:
    store = tmp_path / "store"
    proc = subprocess.Popen(
        [
            *BKCHAOS,
            "test",
            "--runtime",
            "local",
            "--store",
            str(store),
            "--time-limit",
            "120",
            "--nemesis",
            "kill",
            "--nemesis-interval",
            "2",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    history = None
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        found = list(store.glob("ledger/*/history.jsonl"))
        if found and found[0].stat().st_size > 20_000:
            history = found[0]
            break
        time.sleep(0.5)
    assert history is not None, "the run never got going"
    proc.send_signal(signal.SIGINT)
    output, _ = proc.communicate(timeout=120)
    assert proc.returncode in (0, 1, 2), output
    assert "interrupted" in output
    assert _processes_mentioning(str(store)) == []
    results = checkers.check(history)
    assert results["valid"] in (True, "unknown"), results["anomalies"]
    ops = [json.loads(line) for line in history.read_text().splitlines()]
    assert any(op["f"] == "heal" and op["type"] == "info" for op in ops)


def test_bad_arguments_exit_254_without_traceback(tmp_path: Path) -> None:
    for args in (
        ["--workload", "nope"],
        ["--wq", "3", "--aq", "4"],
        ["--bookies", "2"],
        ["--nemesis", "meteor"],
        ["--bug", "typo"],
    ):
        done = _run(tmp_path / "store", *args, timeout=60)
        assert done.returncode == 254, (args, done.stderr)
        assert "Traceback" not in done.stderr and "error" in done.stderr
    assert not os.path.exists(tmp_path / "store" / "ledger")
