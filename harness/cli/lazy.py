"""A click group whose subcommands are imported only when they run.

`bkchaos --help` lists every subcommand with its one-line help; importing them all to do
that would pull in docker, kazoo, networkx and the whole runner. The listing reads each
command's help from its source instead (the decorator's `help=`/`short_help=` or the
function's docstring), which stays the one place that help is written.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
from functools import cache
from pathlib import Path

import click

__all__ = ["LazyGroup", "short_help_from_source"]


class LazyGroup(click.Group):
    """`lazy_commands` maps a subcommand's name to the `module:attribute` defining it."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.lazy_commands: dict[str, str] = {}

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self.lazy_commands})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in self.lazy_commands:
            module, attribute = self.lazy_commands[cmd_name].split(":")
            command = getattr(importlib.import_module(module), attribute)
            self.add_command(command, cmd_name)
        return super().get_command(ctx, cmd_name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        names = self.list_commands(ctx)
        if not names:
            return
        limit = formatter.width - 6 - max(map(len, names))
        rows = []
        for name in names:
            if name in self.commands:
                command = self.commands[name]
                if command.hidden:
                    continue
                rows.append((name, command.get_short_help_str(limit)))
            else:
                text = short_help_from_source(self.lazy_commands[name])
                rows.append((name, click.Command(name, help=text).get_short_help_str(limit)))
        with formatter.section("Commands"):
            formatter.write_dl(rows)


@cache
def short_help_from_source(target: str) -> str:
    """The help text of the click command at `module:function`, read without importing it."""
    module, function = target.split(":")
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None:
        raise LookupError(f"no module {module} for the subcommand {target}")
    tree = ast.parse(Path(spec.origin).read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == function:
            for decorator in filter(_is_command_decorator, node.decorator_list):
                for keyword in decorator.keywords:
                    if keyword.arg in ("short_help", "help") and isinstance(
                        keyword.value, ast.Constant
                    ):
                        return str(keyword.value.value)
            return ast.get_docstring(node) or ""
    raise LookupError(f"no function {function} in {module}")


def _is_command_decorator(decorator: ast.expr) -> bool:
    """`@click.command(…)`, `@click.group(…)`, `@cluster.command(…)`: not an option's."""
    return (
        isinstance(decorator, ast.Call)
        and isinstance(decorator.func, ast.Attribute)
        and decorator.func.attr in ("command", "group")
    )
