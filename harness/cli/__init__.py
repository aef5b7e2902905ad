"""The `bkchaos` command line.

Exit codes follow docs/history.md §5: 0 valid, 1 invalid, 2 unknown,
254 bad arguments or environment, 255 the harness itself crashed. Click's own usage
errors (exit 2 by default) are remapped to 254 so that 2 always means "unknown".
Each subcommand lives in its own module, registered here by name and imported only when
it runs, so `bkchaos --help` and `bkchaos check` stay light (no docker, Spark, kazoo).
"""

from __future__ import annotations

import logging
import sys
import traceback
from dataclasses import dataclass

import click

from core.plugins import PluginError
from harness.cli.lazy import LazyGroup
from harness.errors import UserError

BAD_INPUT = 254
HARNESS_CRASH = 255


@dataclass(frozen=True)
class Verbosity:
    """-v / -q of the whole command line: what goes to stderr while a command runs."""

    verbose: int = 0
    quiet: bool = False

    @property
    def log_level(self) -> int:
        """The controller's log on stderr (the run's bkchaos.log always has INFO)."""
        if self.quiet:
            return logging.ERROR
        return {0: logging.WARNING, 1: logging.INFO}.get(self.verbose, logging.DEBUG)


def verbosity() -> Verbosity:
    """The -v / -q given to `bkchaos` (defaults outside a command line)."""
    context = click.get_current_context(silent=True)
    found = context.find_root().obj if context is not None else None
    return found if isinstance(found, Verbosity) else Verbosity()


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="bkchaos")
@click.option(
    "-v",
    "--verbose",
    count=True,
    help="Also log what the controller does (faults, heals, cluster) to stderr; -vv: debug.",
)
@click.option(
    "-q",
    "--quiet",
    is_flag=True,
    help="No progress and no log on stderr: errors and each run's verdict only.",
)
@click.pass_context
def cli(ctx: click.Context, verbose: int, quiet: bool) -> None:
    """bkchaos: Jepsen-style fault injection for BookKeeper-style replicated logs."""
    ctx.obj = Verbosity(verbose, quiet)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    handler.setLevel(ctx.obj.log_level)
    root = logging.getLogger()
    for previous in [h for h in root.handlers if getattr(h, "bkchaos_stderr", False)]:
        root.removeHandler(previous)  # a command line run again in one process (tests)
    handler.bkchaos_stderr = True  # type: ignore[attr-defined]
    root.addHandler(handler)
    root.setLevel(min(root.level or logging.WARNING, ctx.obj.log_level, logging.INFO))


@cli.group(cls=LazyGroup)
def bench() -> None:
    """Benchmarks that print their figures (recorded in docs/performance.md)."""


LAZY_COMMANDS: dict[str, str] = {
    "analyze": "harness.cli.analyze:analyze",
    "bookie": "harness.cli.bookie:bookie",
    "check": "harness.cli.check:check",
    "cluster": "harness.cli.cluster:cluster",
    "demo": "harness.cli.demo:demo",
    "farm": "harness.cli.farm:farm",
    "gc": "harness.cli.gc:gc",
    "image": "harness.cli.image:image",
    "nightly": "harness.cli.nightly:nightly",
    "report": "harness.cli.report:report",
    "search": "harness.cli.search:search",
    "serve": "harness.cli.report:serve",
    "test": "harness.cli.test:test",
    "test-all": "harness.cli.test_all:test_all",
}
"""Subcommand -> the `module:attribute` that defines it, imported only when it runs."""

LAZY_BENCHES: dict[str, str] = {
    "analyze": "harness.cli.analyze:bench_analyze",
    "bookie": "harness.cli.bookie:bench_bookie",
    "checker": "harness.cli.check:bench_checker",
    "detect": "harness.cli.detect:bench_detect",
    "farm": "harness.cli.farm:bench_farm",
    "harness": "harness.cli.test_all:bench_harness",
    "mutants": "harness.cli.mutants:bench_mutants",
    "search": "harness.cli.search:bench_search",
    "sim": "harness.cli.sim:bench_sim",
}

cli.lazy_commands.update(LAZY_COMMANDS)
bench.lazy_commands.update(LAZY_BENCHES)


def main(argv: list[str] | None = None) -> None:
    """Run the CLI and exit with the code the spec assigns to what happened."""
    try:
        code = cli.main(args=argv, prog_name="bkchaos", standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("interrupted", err=True)
        code = 130
    except click.UsageError as exc:  # includes BadParameter / NoSuchOption
        click.echo(f"error: {exc.format_message()}", err=True)
        if exc.ctx is not None:
            click.echo(f"try: {exc.ctx.command_path} --help", err=True)
        code = BAD_INPUT
    except click.ClickException as exc:
        exc.show()
        code = BAD_INPUT
    except UserError as exc:
        click.echo(f"error: {exc}", err=True)
        code = exc.exit_code
    except PluginError as exc:  # an installed extension, not bkchaos, is broken
        click.echo(f"error: {exc}", err=True)
        code = BAD_INPUT
    except Exception:
        traceback.print_exc()
        click.echo("bkchaos crashed (a harness bug, not your input): exit 255", err=True)
        code = HARNESS_CRASH
    sys.exit(code if isinstance(code, int) else 0)
