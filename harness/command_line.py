"""The one builder of a `bkchaos test` command line from a test's settings.

Reports, the nightly driver, the pytest plugin and the search all print a command that
repeats a run. They share this builder, which reads the flags from `bkchaos test`'s own
parameters, so a new option can never be missing from one of them.
"""

from __future__ import annotations

import shlex
from dataclasses import fields
from pathlib import Path
from typing import Any

import click

from harness.testspec import TestSpec

__all__ = ["SPEC_FIELDS", "replay_command", "spec_from_test_json"]

SPEC_FIELDS = frozenset(f.name for f in fields(TestSpec)) - {"argv"}
"""The settings a command line can carry (`argv` is the command line itself)."""

_NOT_REPLAYED = frozenset({"test_count"})
"""A replay repeats one run: each run of a `--test-count` batch has its own seed."""


def replay_command(spec: TestSpec, run_dir: Path | None = None) -> str:
    """The `bkchaos test` command that repeats `spec`: the settings it does not leave at
    their defaults, in `--help` order; a fault schedule, which has no flag of its own, by
    `--schedule RUN_DIR/test.json`."""
    args = ["bkchaos", "test"]
    for param in _test_command().params:
        if param.name not in SPEC_FIELDS - _NOT_REPLAYED:
            continue
        value = getattr(spec, param.name)
        flag = param.opts[0]
        if param.name == "schedule":
            if value:
                args += [flag, str(Path(run_dir or ".") / "test.json")]
        elif isinstance(value, tuple):
            if getattr(param, "multiple", False):
                args += [a for v in value for a in (flag, v)]
            elif value:
                args += [flag, ",".join(value)]
        elif getattr(param, "is_flag", False):
            args += [flag] if value else []
        elif value not in (None, "" if param.default is None else param.default):  # not given
            args += [flag, f"{value:g}" if isinstance(value, float) else str(value)]
    return shlex.join(args)  # a grudge's JSON or a --packet with spaces stays one word


def _test_command() -> click.Command:
    """`bkchaos test` itself, looked up by name as the CLI runs it (loaded on first use)."""
    from harness.cli import cli

    command = cli.get_command(click.Context(cli), "test")
    assert command is not None, "the CLI registers `bkchaos test`"
    return command


def spec_from_test_json(test: dict[str, Any]) -> TestSpec:
    """The settings of a run's `test.json` as a spec (keys a command cannot carry ignored)."""
    return TestSpec.from_dict({k: v for k, v in test.items() if k in SPEC_FIELDS})
