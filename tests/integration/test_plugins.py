"""Extensions installed as packages: a workload, a fault kind and a checker from
`tests/plugins/example`, found through their entry points, run in a simulated test."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).parents[1] / "plugins" / "example"
BKCHAOS = [sys.executable, "-c", "from harness.cli import main; main()"]
RUN = ["test", "--runtime", "sim", "--workload", "append-only", "--nemesis", "bounce"]
RUN += ["--nemesis-interval", "1", "--time-limit", "4", "--seed", "3"]


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The example plugin installed by pip into a directory of its own."""
    target = tmp_path_factory.mktemp("site")
    source = tmp_path_factory.mktemp("src") / "example"
    shutil.copytree(EXAMPLE, source)  # pip builds in the source tree: keep tests/ clean
    pip = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target)]
    subprocess.run([*pip, str(source)], check=True, timeout=600)
    return target


def bkchaos(site: Path, *args: str, store: Path) -> subprocess.CompletedProcess[str]:
    path = os.pathsep.join(p for p in (str(site), os.environ.get("PYTHONPATH", "")) if p)
    return subprocess.run(
        [*BKCHAOS, *args, "--store", str(store)],
        env={**os.environ, "PYTHONPATH": path},
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_a_plugins_workload_fault_and_checker_run_in_a_simulated_test(
    installed: Path, tmp_path: Path
) -> None:
    done = bkchaos(installed, *RUN, store=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    run = tmp_path / "latest"
    results = json.loads((run / "results.json").read_text())
    assert results["valid"] is True
    assert results["checkers"]["entry-count"]["valid"] is True
    assert results["checkers"]["entry-count"]["acknowledged"]  # it saw the appends
    assert results["checkers"]["nemesis"]["faults"] >= 1
    ops = [json.loads(line) for line in (run / "history.jsonl").read_text().splitlines()]
    bounces = [op for op in ops if op["f"] == "bounce" and op["type"] == "info"]
    assert bounces and all(op["value"]["proof"] for op in bounces)
    assert any(op["f"] == "create" and op["type"] == "ok" for op in ops)


def test_a_plugin_that_cannot_load_is_named_with_exit_254(installed: Path, tmp_path: Path) -> None:
    broken = tmp_path / "site"
    shutil.copytree(installed, broken)
    [points] = broken.glob("*.dist-info/entry_points.txt")
    points.write_text(points.read_text().replace("AppendOnlyWorkload", "NoSuchWorkload"))
    done = bkchaos(broken, *RUN, store=tmp_path / "store")
    assert done.returncode == 254, done.stdout + done.stderr
    assert "'append-only'" in done.stderr and "fix or uninstall" in done.stderr
    assert "Traceback" not in done.stderr
