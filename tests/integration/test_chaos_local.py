"""`bkchaos test` end to end on the local runtime: real ZooKeeper, bookies and agents."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import checkers
from bookie_image.probes import PROBES
from nemesis.kinds import START_STOP
from tests.helpers.cli import BKCHAOS
from tests.helpers.runs import proven_faults

CLIENT_SIDE = ("recovery-", "ensemble-", "client-", "metadata-")


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


EVERY_LOCAL_FAULT = (
    {"at": 1, "f": "kill", "value": {"nodes": ["b1"]}},
    {"at": 2, "f": "pause", "value": {"nodes": ["b2"]}},
    {"at": 3, "f": "resume", "value": {"nodes": ["b2"]}},
    {"at": 4, "f": "restart", "value": {"nodes": ["b1"]}},
    {"at": 5, "f": "power-loss", "value": {"nodes": ["b3"]}},
    {"at": 6, "f": "clock-bump", "value": {"nodes": ["b4"]}},
    {"at": 7, "f": "clock-reset", "value": {"nodes": ["b4"]}},
    {"at": 8, "f": "power-on", "value": {"nodes": ["b3"]}},
    {"at": 9, "f": "wipe", "value": {"nodes": ["b1"]}},
    {"at": 10, "f": "clock-strobe", "value": {"nodes": ["b2"]}},
    {"at": 11, "f": "clock-strobe-stop", "value": {"nodes": ["b2"]}},
    {"at": 12, "f": "restore", "value": {"nodes": ["b1"]}},
    {"at": 13, "f": "corrupt", "value": {"nodes": ["b3"], "mode": "tail"}},
    {"at": 14, "f": "pause", "value": {"nodes": ["b4"]}},
    {"at": 15, "f": "resume", "value": {"nodes": ["b4"]}},
    {"at": 16, "f": "corrupt-restart", "value": {"nodes": ["b3"]}},
)
"""Every fault kind the local runtime injects, each while another holds on another bookie.
The nemesis runs one op at a time, and restarts, power-ons, wipes and restores (a bookie
boots and registers) take 2-10 s each: the last start comes after four of them (seen at
40 s on this machine under a load of 30), and a stop the time limit cuts off is done by the
final heal (and proven: the nemesis checker says so). The corruption cuts the last write
(`tail`), which never takes both copies of an entry: random bit flips on two bookies once
hit both copies of one entry (WQ 2), a real loss that leaves a run rightly `unknown`."""


def test_every_local_fault_overlapping_keeps_a_clean_build_valid_and_counts_its_probes(
    tmp_path: Path,
) -> None:
    """A clean build checks valid on real processes under every local fault kind, two at a
    time, each proven; and its coverage: bookies and client agents log `probe` events, and
    the runner counts them from the collected node logs into results.json. The steps are
    given (`--schedule`), so every kind runs in every run: 60 s of drawn faults proved 5 to
    7 of the 7 kinds."""
    store, schedule = tmp_path / "store", tmp_path / "schedule.json"
    schedule.write_text(json.dumps(EVERY_LOCAL_FAULT))
    args = ["--schedule", str(schedule), "--time-limit", "45", "--seed", "11"]
    done = _run(store, *args, "--concurrency", "4", timeout=300)
    run_dir = (store / "latest").resolve()
    results = json.loads((run_dir / "results.json").read_text())
    assert done.returncode == 0, (
        done.stdout[-2000:],
        results["anomaly_types"],
        results["checkers"]["nemesis"],
    )
    assert results["valid"] is True
    assert results["stats"]["appends_ok"] > 50
    spec = json.loads((run_dir / "test.json").read_text())
    starts = {START_STOP[kind][0] for kind in spec["nemesis"]}
    assert len(starts) == 7 and starts <= proven_faults(run_dir / "history.jsonl")
    assert checkers.check(run_dir / "history.jsonl")["valid"] is True
    assert spec["seed"] == 11 and spec["schedule"] == list(EVERY_LOCAL_FAULT)
    assert sorted(p.name for p in (run_dir / "logs").iterdir())[:2] == ["b1", "b2"]
    assert (store / "ledger" / "latest").resolve() == run_dir
    coverage = results["coverage"]
    assert list(coverage) == sorted(PROBES)
    # a killed bookie restarts on its disks: it replays its journal (a bookie-side probe)
    assert coverage["journal-replay-intact"] > 0
    logged: dict[str, int] = {}
    for log in sorted((run_dir / "logs").glob("*/*.log")):
        for line in log.read_text().splitlines():
            if line.startswith("{") and '"probe"' in line:
                event = json.loads(line)
                if event.get("event") == "probe":
                    logged[event["probe"]] = logged.get(event["probe"], 0) + 1
    assert logged == {name: count for name, count in coverage.items() if count}
    assert any(name.startswith(CLIENT_SIDE) for name in logged), logged  # from agent.log


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


def test_network_faults_are_refused_on_the_local_runtime(tmp_path: Path) -> None:
    done = _run(tmp_path, "--nemesis", "kill,partition", timeout=60)
    assert done.returncode == 254
    assert "not supported on the local runtime" in done.stderr
