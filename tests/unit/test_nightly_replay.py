"""A nightly cell's replay command is a `bkchaos test` command line that rebuilds its spec."""

from __future__ import annotations

import shlex

from harness.cli import test as test_cli
from harness.command_line import replay_command
from harness.testspec import TestSpec


def parsed(command: str) -> dict:
    words = shlex.split(command)
    assert words[:2] == ["bkchaos", "test"]
    return test_cli.test.make_context("test", words[2:]).params


def test_replay_rebuilds_flags_numbers_and_lists() -> None:
    spec = TestSpec(
        nemesis=("kill", "pause"),
        bugs=("no-cookie",),
        time_limit=12.5,
        bookies=5,
        guaranteed_write_quorum=True,
    )
    params = parsed(replay_command(spec, None))
    assert params["nemesis"] == ("kill", "pause") and params["bugs"] == ("no-cookie",)
    assert params["time_limit"] == 12.5 and params["bookies"] == 5
    assert params["guaranteed_write_quorum"] is True


def test_a_flag_left_off_is_not_written() -> None:
    assert "--guaranteed-write-quorum" not in replay_command(TestSpec(), None)
    assert parsed(replay_command(TestSpec(), None))["guaranteed_write_quorum"] is False


def test_values_with_spaces_and_quotes_stay_one_word() -> None:
    """What the user pastes back must rebuild the same grudge and packet shaping."""
    spec = TestSpec(
        runtime="docker",
        nemesis=("partition", "packet"),
        grudge='{"b1": ["b2", "zk1"]}',
        packet="delay_ms=100, loss_pct=5",
    )
    params = parsed(replay_command(spec, None))
    assert params["grudge"] == spec.grudge and params["packet"] == spec.packet
