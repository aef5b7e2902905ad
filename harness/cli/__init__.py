"""The `bkchaos` command line.

Exit codes follow shared/spec/history.md §5: 0 valid, 1 invalid, 2 unknown,
254 bad arguments or environment, 255 the harness itself crashed. Click's own usage
errors (exit 2 by default) are remapped to 254 so that 2 always means "unknown".
Each subcommand lives in its own module and is registered here.
"""

from __future__ import annotations

import sys
import traceback

import click

from harness.errors import UserError

BAD_INPUT = 254
HARNESS_CRASH = 255


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="bkchaos")
def cli() -> None:
    """bkchaos: Jepsen-style fault injection for BookKeeper-style replicated logs."""


@cli.group()
def bench() -> None:
    """Benchmarks that print their figures (recorded in docs/performance.md)."""


def _register() -> None:
    from harness.cli import (
        analyze,
        bookie,
        check,
        cluster,
        demo,
        detect,
        gc,
        image,
        mutants,
        nightly,
        report,
        search,
        sim,
        test,
        test_all,
    )

    cli.add_command(analyze.analyze)
    bench.add_command(analyze.bench_analyze)
    cli.add_command(bookie.bookie)
    cli.add_command(check.check)
    cli.add_command(cluster.cluster)
    cli.add_command(demo.demo)
    cli.add_command(gc.gc)
    cli.add_command(image.image)
    cli.add_command(nightly.nightly)
    cli.add_command(test.test)
    cli.add_command(report.report)
    cli.add_command(report.serve)
    bench.add_command(bookie.bench_bookie)
    bench.add_command(check.bench_checker)
    bench.add_command(detect.bench_detect)
    cli.add_command(test_all.test_all)
    bench.add_command(test_all.bench_harness)
    cli.add_command(search.search)
    bench.add_command(sim.bench_sim)
    bench.add_command(mutants.bench_mutants)


_register()


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
    except Exception:
        traceback.print_exc()
        click.echo("bkchaos crashed (a harness bug, not your input): exit 255", err=True)
        code = HARNESS_CRASH
    sys.exit(code if isinstance(code, int) else 0)
