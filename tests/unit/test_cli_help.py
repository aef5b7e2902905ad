"""Every option of every `bkchaos` command says what it is for in `--help`."""

from __future__ import annotations

import click

from harness.cli import cli


def _commands(command: click.Command, path: str) -> list[tuple[str, click.Command]]:
    if not isinstance(command, click.Group):
        return [(path, command)]
    context = click.Context(command)
    found = []
    for name in command.list_commands(context):
        sub = command.get_command(context, name)
        assert sub is not None
        found += _commands(sub, f"{path} {name}")
    return found


def test_every_option_has_help() -> None:
    missing = [
        f"{path} {param.opts[0]}"
        for path, command in _commands(cli, "bkchaos")
        for param in command.params
        if isinstance(param, click.Option) and not param.help and param.name != "help"
    ]
    assert missing == []
