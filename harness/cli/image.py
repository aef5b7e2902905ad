"""`bkchaos image build`: the container image, built from scratch (no registry)."""

from __future__ import annotations

import json

import click
from rich.console import Console
from rich.status import Status

from bookie_image.image.build import BuildResult, ImageBuildError, QuietProgress, build_image
from harness.cli import verbosity
from harness.errors import UserError


class RichProgress:
    """Shows the running step with a spinner and its latest output line; one line per step."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.status: Status | None = None
        self.step = ""

    def start(self, step: str) -> None:
        self.step = step
        self.status = self.console.status(f"[bold]{step}[/]")
        self.status.start()

    def detail(self, line: str) -> None:
        if self.status is not None and line:
            self.status.update(f"[bold]{self.step}[/]  [dim]{line[:100]}[/]")

    def done(self, step: str, seconds: float, cached: bool) -> None:
        if self.status is not None:
            self.status.stop()
            self.status = None
        how = "[dim]cached[/]" if cached else "[green]built[/]"
        self.console.print(f"  {step:20} {how} {seconds:7.1f}s")


def build_with_progress() -> BuildResult:
    """Build (or reuse) the image, showing progress on stderr unless -q."""
    from harness.runtime.docker import docker_client

    console = Console(stderr=True)
    progress = QuietProgress() if verbosity().quiet else RichProgress(console)
    try:
        return build_image(docker_client(timeout=900), progress)
    except ImageBuildError as exc:
        raise UserError(str(exc)) from exc


@click.group()
def image() -> None:
    """The container image every docker-runtime node runs."""


@image.command()
@click.option("--json", "as_json", is_flag=True, help="Print the tags and step timings as JSON.")
def build(as_json: bool) -> None:
    """Build the base (debootstrap + docker import) and project images; cached by content."""
    result = build_with_progress()
    if as_json:
        click.echo(
            json.dumps(
                {
                    "tag": result.tag,
                    "base_tag": result.base_tag,
                    "seconds": result.seconds,
                    "cached": result.cached,
                },
                indent=2,
            )
        )
    else:
        click.echo(f"{result.tag} ready in {result.total_seconds:.1f}s (base {result.base_tag})")
