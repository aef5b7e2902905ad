"""`bkchaos farm` refuses bad input before Spark starts: exit 254, a message that says
what to give, no traceback."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.helpers.cli import BKCHAOS


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--bug", "typo"], "unknown seeded bug 'typo'"),
        (["--budget", "soon"], "give a positive duration"),
        (["--nemesis", "meteor"], "unknown: meteor"),
        (["--ship", "/nonexistent/bkchaos.whl"], "give auto, wheel, none or a .whl path"),
        (["--batch-size", "0"], "0 is not in the range"),
        (["--conf", "nokey"], "expected KEY=VALUE"),
    ],
)
def test_bad_farm_options_exit_254_saying_what_to_give(
    tmp_path: Path, args: list[str], message: str
) -> None:
    done = subprocess.run(
        [*BKCHAOS, "farm", "--store", str(tmp_path), *args],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 254, done.stderr
    assert message in done.stderr and "Traceback" not in done.stderr
