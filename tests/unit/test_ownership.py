"""Which controller owns a run, told only as far as this process can see: a run is gone
only when that is proven, so `bkchaos gc` never reaps a run whose controller may live."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from harness.cli.gc import Runs, _reap, _unlink_stale_current
from harness.runtime.base import STATE_FILE
from harness.runtime.ownership import DETACHED, controller_id, owner_state
from harness.store import RUN_RECORD, link_current
from tests.helpers.cli import BKCHAOS


def _dead_controller() -> str:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    owner = controller_id(child.pid)
    child.kill()
    child.wait()
    return owner


def test_this_process_runs_and_a_finished_one_is_gone() -> None:
    assert owner_state(controller_id()).state == "running"
    assert owner_state(_dead_controller()).state == "gone"
    assert owner_state(DETACHED).state == "detached"


def test_what_cannot_be_seen_from_here_is_unknown_never_gone() -> None:
    """The same pid in another container (pid namespace), a controller on another
    machine (boot id), or an owner written before owners named their namespace: none of
    them is proven gone by the absence of a pid here."""
    host, boot, namespace, pid, start = _dead_controller().split(":")
    other_namespace = ":".join([host, boot, "1", pid, start])  # no namespace has inode 1
    other_boot = ":".join([host, "another-boot", namespace, pid, start])
    legacy = ":".join([boot, pid, start])
    for owner in (other_namespace, other_boot, legacy, "", "garbage"):
        assert owner_state(owner).state == "unknown", owner


@pytest.mark.parametrize(
    ("owner", "run_option", "everything", "reaped"),
    [
        ("dead", None, False, True),
        ("dead", "r", False, True),
        ("dead", "other", False, False),
        ("self", None, False, False),
        ("self", "r", False, False),
        ("self", None, True, True),
        ("detached", "r", False, False),
        ("unknown", None, False, False),
        ("unknown", "r", False, True),  # named: the user says it is gone
        ("unknown", None, True, True),
    ],
)
def test_one_rule_decides_which_runs_gc_reaps(
    owner: str, run_option: str | None, everything: bool, reaped: bool
) -> None:
    owners = {"dead": _dead_controller(), "self": controller_id(), "detached": DETACHED}
    reaps: list[str] = []

    def reap_one(run: str) -> str:
        reaps.append(run)
        return "reaped"

    runs = Runs("local", {"r": owners.get(owner, "")}, reap_one)

    @click.command()
    def reap() -> None:
        _reap(runs, run_option, everything)

    output = CliRunner().invoke(reap).output
    assert reaps == (["r"] if reaped else []), output
    assert ("left alone" in output) == (not reaped and run_option in (None, "r"))


def test_gc_removes_the_current_link_of_a_run_whose_controller_is_gone(tmp_path: Path) -> None:
    """A SIGKILLed `bkchaos test` leaves `store/current`; gc removes it by the run's
    run.json, and leaves a live run's link."""
    for name, owner in (("gone", _dead_controller()), ("live", controller_id())):
        run_dir = tmp_path / name / "t" / "1"
        run_dir.mkdir(parents=True)
        (run_dir / RUN_RECORD).write_text(json.dumps({"run_id": name, "owner": owner}))
        link_current(run_dir)

    @click.command()
    def gc_current() -> None:
        for name in ("gone", "live"):
            _unlink_stale_current(tmp_path / name, None)

    output = CliRunner().invoke(gc_current).output
    assert not (tmp_path / "gone" / "current").is_symlink(), output
    assert "controller of t/1 is gone" in output
    assert (tmp_path / "live" / "current").is_symlink()


def test_a_cluster_file_without_a_run_id_is_refused_with_what_to_do(tmp_path: Path) -> None:
    """A cluster.json from before nodes carried their run id: its pids cannot be checked,
    so `cluster down` says so (exit 254) instead of signalling them or saying "down"."""
    state = {"state_dir": str(tmp_path), "zk_pid": 4242, "bookies": [], "agents": []}
    (tmp_path / STATE_FILE).write_text(json.dumps(state))
    done = subprocess.run(
        [*BKCHAOS, "cluster", "down", "--dir", str(tmp_path)], capture_output=True, text=True
    )
    assert done.returncode == 254, done.stderr
    assert "records no run id" in done.stderr and "4242" in done.stderr
    assert "Traceback" not in done.stderr
