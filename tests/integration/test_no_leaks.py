"""No node outlives its controller: `bkchaos test --runtime local` killed with SIGKILL
(nothing in the controller runs) leaves no ZooKeeper, bookie or agent of its run, and
`bkchaos gc` reaps a run whose controller is gone while leaving a live one alone."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from harness.runtime.local import LocalCluster
from harness.runtime.ownership import (
    OWNER_ENV,
    RUN_ENV,
    controller_id,
    owner_state,
    run_processes,
    stop_run,
)

pytestmark = pytest.mark.integration

BKCHAOS = [sys.executable, "-c", "from harness.cli import main; main()"]
GONE_WITHIN_S = 60.0
"""The watchdog sends SIGTERM at once and SIGKILL 10 s later: a generous bound for that on
a loaded machine, not a measurement."""


def _running_run(store: Path) -> str:
    """The run id of the test going on in `store`, once its agent serves."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        for state in store.glob("*/*/nodes/cluster.json"):
            with_agents = json.loads(state.read_text())
            if with_agents.get("agents") and all(a["pid"] for a in with_agents["agents"]):
                histories = list(state.parent.parent.glob("history.jsonl"))
                if histories and histories[0].stat().st_size > 2000:
                    return with_agents["run_id"]
        time.sleep(0.5)
    raise AssertionError("the run never got going")


def _gone(run_id: str) -> dict[int, str]:
    """Wait until no process carries `run_id`; what is left if some still do."""
    deadline = time.monotonic() + GONE_WITHIN_S
    while (left := run_processes().get(run_id, {})) and time.monotonic() < deadline:
        time.sleep(0.5)
    return left


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_a_killed_controller_leaves_no_node_running(tmp_path: Path, sig: signal.Signals) -> None:
    store = tmp_path / "store"
    command = ["test", "--runtime", "local", "--store", str(store), "--time-limit", "120"]
    proc = subprocess.Popen(
        [*BKCHAOS, *command, "--bookies", "3", "--clients", "1", "--nemesis", "kill"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    run_id = ""
    try:
        run_id = _running_run(store)
        nodes = run_processes()[run_id]
        assert len(nodes) == 5, nodes  # ZooKeeper, 3 bookies, 1 agent (a kill may be in force)
        proc.send_signal(sig)
        proc.wait(timeout=120)
        assert _gone(run_id) == {}
    finally:
        proc.kill()
        proc.wait()
        if run_id:
            stop_run(run_id)


ORPHAN = """
import os, signal, sys
from harness.runtime.local import LocalCluster
cluster = LocalCluster(sys.argv[1], bookie_count=1).up()
os.kill(cluster._watchdog.pid, signal.SIGKILL)  # the watchdog dies first (kill -9 of all)
cluster._watchdog.wait()
print(cluster.run_id, flush=True)
os._exit(0)  # no teardown: the nodes are orphans of a controller that is gone
"""


def _gc(*args: str) -> str:
    done = subprocess.run([*BKCHAOS, "gc", *args], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_gc_reaps_only_runs_whose_controller_is_gone(tmp_path: Path) -> None:
    """An orphaned run (its controller and watchdog SIGKILLed) and a live one (owned by
    this process): `gc` stops the orphan and leaves the live run; `--all` stops that too.
    (`--run` keeps the test off other runs on this machine.)"""
    ours = LocalCluster(tmp_path / "ours", bookie_count=1).up()
    orphan_id = ""
    try:
        made = subprocess.run(
            [sys.executable, "-c", ORPHAN, str(tmp_path / "orphan")],
            capture_output=True,
            text=True,
            timeout=180,
        )
        assert made.returncode == 0, made.stderr
        orphan_id = made.stdout.split()[-1]
        [owner] = set(run_processes()[orphan_id].values())
        assert owner_state(owner).state == "gone"
        assert owner_state(controller_id()).state == "running"
        assert "is gone; stopped 2 processes" in _gc("--run", orphan_id)
        assert _gone(orphan_id) == {}
        assert "is running; left alone (--all reaps it)" in _gc("--run", ours.run_id)
        assert len(run_processes()[ours.run_id]) == 2  # ZooKeeper and b1, untouched
        assert "is running; stopped 2 processes" in _gc("--run", ours.run_id, "--all")
        assert _gone(ours.run_id) == {}
    finally:
        ours.down()
        if orphan_id:
            stop_run(orphan_id)


def test_cluster_down_never_signals_a_pid_that_left_the_run(tmp_path: Path) -> None:
    """A recorded pid now held by another process (the node died, the kernel reused the
    pid) is not the run's: `cluster down` leaves that process alone."""
    cluster = LocalCluster(tmp_path / "c", bookie_count=1).up()
    stranger = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        cluster.bookies[0].pid = stranger.pid  # as cluster.json would say after a reuse
        cluster.save()
        LocalCluster.load(tmp_path / "c").down()
        assert stranger.poll() is None  # untouched
        assert _gone(cluster.run_id) == {}  # while every real node of the run is stopped
    finally:
        stranger.kill()
        stranger.wait()
        cluster.down()


SIGNALLED = """
import os, signal, sys, time
def on_term(_signum, _frame):
    time.sleep(float(sys.argv[1]))  # a bookie deregistering, a server flushing
    if len(sys.argv) > 2:  # ZooKeeper: is the other node still there?
        try:
            os.kill(int(sys.argv[2]), 0)
            seen = "running"
        except ProcessLookupError:
            seen = "gone"
        with open(sys.argv[3], "w") as out:
            out.write(seen)
    os._exit(0)
signal.signal(signal.SIGTERM, on_term)
print("ready", flush=True)
time.sleep(120)
"""


def test_stop_run_stops_the_last_pids_only_once_the_others_are_gone(tmp_path: Path) -> None:
    """LocalCluster.down stops ZooKeeper after the bookies (a bookie told to stop
    deregisters from it): the stand-in for ZooKeeper, on SIGTERM, records whether the
    stand-in for a bookie (which takes half a second to exit) is still running."""
    run_id = f"order-{uuid.uuid4().hex[:8]}"
    env = {**os.environ, RUN_ENV: run_id, OWNER_ENV: controller_id()}

    def spawn(*args: str) -> subprocess.Popen:
        proc = subprocess.Popen(
            [sys.executable, "-c", SIGNALLED, *args], env=env, stdout=subprocess.PIPE, text=True
        )
        assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
        return proc

    bookie = spawn("0.5")
    seen = tmp_path / "seen"
    zookeeper = spawn("0", str(bookie.pid), str(seen))
    try:
        stopped = stop_run(run_id, last=frozenset({zookeeper.pid}))
        assert stopped == [bookie.pid, zookeeper.pid]
        assert seen.read_text() == "gone"
        assert run_processes().get(run_id) is None
    finally:
        for proc in (bookie, zookeeper):
            proc.kill()
            proc.wait()


PRINT_OWNER = "from harness.runtime.ownership import controller_id; print(controller_id())"
IN_NAMESPACE = """
"$1" -c "$2"
"$1" -c "$2; import sys, time; sys.stdout.flush(); time.sleep(120)" &
wait
"""
"""A controller that has exited, then one that keeps running, in one pid namespace."""


@pytest.mark.skipif(shutil.which("unshare") is None, reason="needs util-linux's unshare")
def test_a_controller_in_another_pid_namespace_is_told_by_that_namespace(tmp_path: Path) -> None:
    """As in a container sharing this kernel (and boot id): pids there mean other
    processes than here. A controller still running there is running; one that exited
    while its namespace lives on is gone; once the namespace is gone too, unknown."""
    proc = subprocess.Popen(
        [
            *("unshare", "--pid", "--fork", "--kill-child", "--mount-proc"),
            *("sh", "-c", IN_NAMESPACE, "sh", sys.executable, PRINT_OWNER),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])},
    )
    assert proc.stdout is not None
    try:
        exited, running = proc.stdout.readline().split(), proc.stdout.readline().split()
        if not running:
            pytest.skip(f"cannot make a pid namespace here: {proc.stderr.read()}")  # type: ignore[union-attr]
        finished, alive = exited[0], running[0]
        assert finished.split(":")[2] != controller_id().split(":")[2]  # another namespace
        assert owner_state(alive).state == "running"
        assert owner_state(finished).state == "gone"  # its namespace still has processes
    finally:
        proc.kill()
        proc.wait()
    deadline = time.monotonic() + 30
    while owner_state(alive).state != "unknown" and time.monotonic() < deadline:
        time.sleep(0.2)  # the namespace's processes die with its init
    assert owner_state(alive).state == "unknown"


def test_gc_skips_an_ssh_host_it_cannot_reach(tmp_path: Path) -> None:
    """A store's unfinished ssh run whose hosts are gone must not stop `gc` for good."""
    inventory = tmp_path / "hosts.toml"
    inventory.write_text('[[hosts]]\nhost = "127.0.0.1"\nport = 1\n')  # nothing listens
    out = _gc("--run", "no-such-run", "--inventory", str(inventory), "--store", str(tmp_path))
    assert "ssh host root@127.0.0.1:1: not reached, skipped" in out
