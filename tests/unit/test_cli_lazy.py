"""The CLI and the pytest plugin load heavy libraries only for the commands that use them."""

from __future__ import annotations

import json
import subprocess
import sys

import click
import pytest

from harness.cli import LAZY_BENCHES, LAZY_COMMANDS, bench, cli
from harness.cli.lazy import short_help_from_source

HEAVY = ("docker", "pyspark", "kazoo", "networkx", "testcontainers", "paramiko")


def modules_loaded_by(code: str) -> set[str]:
    """Top-level modules a fresh interpreter has loaded after running `code`."""
    report = "import json, sys\nprint(json.dumps(sorted({m.split('.')[0] for m in sys.modules})))"
    probe = f"{code}\n{report}"
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    ).stdout
    return set(json.loads(out.splitlines()[-1]))


def test_help_imports_none_of_the_heavy_libraries() -> None:
    loaded = modules_loaded_by(
        "from harness.cli import cli\n"
        "try:\n    cli.main(['--help'], standalone_mode=False)\nexcept SystemExit:\n    pass"
    )
    assert not loaded & set(HEAVY), loaded & set(HEAVY)


def test_check_imports_no_runtime_or_spark(tmp_path) -> None:
    history = tmp_path / "h.jsonl"
    history.write_text("")
    loaded = modules_loaded_by(
        "from harness.cli import cli\n"
        f"try:\n    cli.main(['check', {str(history)!r}], standalone_mode=False)\n"
        "except Exception:\n    pass"
    )
    assert "checkers" in loaded  # the command really ran
    assert not loaded & {"docker", "pyspark", "kazoo", "testcontainers", "paramiko"}


def test_the_pytest_plugin_loads_no_cluster_code() -> None:
    loaded = modules_loaded_by("import harness.pytest_plugin")
    assert not loaded & set(HEAVY), loaded & set(HEAVY)


@pytest.mark.parametrize(
    ("group", "name", "target"),
    [(cli, n, t) for n, t in LAZY_COMMANDS.items()]
    + [(bench, n, t) for n, t in LAZY_BENCHES.items()],
    ids=[f"cli-{n}" for n in LAZY_COMMANDS] + [f"bench-{n}" for n in LAZY_BENCHES],
)
def test_the_listed_help_is_the_commands_own(group: click.Group, name: str, target: str) -> None:
    """The listing reads help from the source; loading the command must agree with it."""
    command = group.get_command(click.Context(group), name)
    assert command is not None
    listed = click.Command(name, help=short_help_from_source(target)).get_short_help_str(45)
    assert listed == command.get_short_help_str(45)
