"""`bkchaos report RUN_DIR` and `bkchaos serve [STORE]`."""

from __future__ import annotations

from pathlib import Path

import click


@click.command("report")
@click.argument("run_dir", type=click.Path(path_type=Path))
def report(run_dir: Path) -> None:
    """(Re)write RUN_DIR/report.html from its history and results.json."""
    from harness.report.render import write_report

    click.echo(write_report(run_dir))


@click.command("serve")
@click.argument("store", type=click.Path(path_type=Path), default="store")
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=8080,
    show_default=True,
    help="TCP port to serve on (0: any free one).",
)
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
def serve(store: Path, port: int, host: str) -> None:
    """Browse STORE: runs newest first with verdicts and filters, reports, trend pages."""
    from harness.report.server import make_server

    server = make_server(store, host, port)
    click.echo(f"serving {store} read-only at http://{host}:{server.server_port}/ (Ctrl-C stops)")
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
