"""`bkchaos serve`: a read-only HTTP view of the store.

`/` is a table of every run, newest first, rendered afresh on each request from the
runs' `test.json` and `results.json`; every other path is a file of the store (reports,
timelines, logs, the Spark pipeline's `trends/` pages). Only GET and HEAD exist, and a
path that would leave the store — `..`, or a symlink pointing out — is refused with 403.
"""

from __future__ import annotations

import functools
import io
import json
import os
import time
from http import HTTPStatus
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from harness.errors import UserError
from harness.report.render import VERDICTS, anomaly_counts, environment
from harness.report.run import check_results

_TAIL = 65536  # bytes read from the end of a history to find its duration


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _duration_s(history: Path) -> float | None:
    """The time of the history's last complete line, read from its tail only."""
    try:
        with history.open("rb") as fh:
            fh.seek(max(0, fh.seek(0, os.SEEK_END) - _TAIL))
            lines = fh.read().splitlines()
    except OSError:
        return None
    for line in reversed(lines):
        try:
            return json.loads(line)["time"] / 1e9
        except (ValueError, KeyError, TypeError):
            continue
    return None


def _stamp(path: Path) -> float | None:
    try:
        return path.stat().st_mtime
    except OSError:
        return None


def _run(run_dir: Path, store: Path) -> dict[str, Any]:
    """One row of the index; a finished run's row is cached until one of its files
    changes, so a store of thousands of runs lists quickly."""
    key = tuple(_stamp(run_dir / f) for f in ("results.json", "test.json", "report.html"))
    if key[0] is None:  # still running: its history grows
        return _read_run(run_dir, store)
    return _cached_run(run_dir, store, key)


@functools.lru_cache(maxsize=8192)
def _cached_run(run_dir: Path, store: Path, key: tuple[float | None, ...]) -> dict[str, Any]:
    return _read_run(run_dir, store)


def _read_run(run_dir: Path, store: Path) -> dict[str, Any]:
    """One row; a run whose test.json or results.json cannot be read (or has fields of
    the wrong shape) is shown as `unreadable`, and the rest of the store still lists."""
    raw = _read_json(run_dir / "test.json") if (run_dir / "test.json").exists() else {}
    test = raw if isinstance(raw, dict) else {}
    verdict, counts = "running", {}  # a run in progress has no results yet
    results_path = run_dir / "results.json"
    if results_path.exists():
        try:
            results = check_results(_read_json(results_path), results_path)
            verdict, counts = VERDICTS[results["valid"]], anomaly_counts(results)
        except (UserError, TypeError, ValueError, AttributeError):
            verdict, counts = "unreadable", {}
    row = {
        "workload": test.get("workload", ""),
        "nemesis": test.get("nemesis") or [],
        "bugs": test.get("bugs") or [],
        "seed": test.get("seed", ""),
    }
    shaped = (
        isinstance(row["workload"], str)
        and all(
            isinstance(row[k], list) and all(isinstance(v, str) for v in row[k])
            for k in ("nemesis", "bugs")
        )
        and isinstance(row["seed"], int | str)
    )
    if raw is None or not isinstance(raw, dict) or not shaped:
        verdict = "unreadable"
        row = {"workload": "", "nemesis": [], "bugs": [], "seed": ""}
    try:
        started = time.strptime(run_dir.name.split("-")[0], "%Y%m%dT%H%M%S")
        when = time.strftime("%Y-%m-%d %H:%M:%S", started)
    except ValueError:
        when = run_dir.name
    return {
        "path": run_dir.relative_to(store).as_posix(),
        "test": run_dir.parent.name,
        "name": run_dir.name,
        "when": when,
        "mtime": _stamp(run_dir) or 0.0,
        "verdict": verdict,
        "anomalies": counts,
        **row,
        "duration_s": _duration_s(run_dir / "history.jsonl"),
        "report": (run_dir / "report.html").is_file(),
    }


def list_runs(store: Path) -> list[dict[str, Any]]:
    """Every run directory of the store (`<test>/<timestamp>/`), newest first."""
    runs = [
        _run(d, store)
        for test_dir in store.iterdir()
        if test_dir.is_dir() and not test_dir.is_symlink()  # store/latest is a link
        for d in test_dir.iterdir()
        if d.is_dir()
        and not d.is_symlink()
        and ((d / "history.jsonl").exists() or (d / "test.json").exists())
    ]
    return sorted(runs, key=lambda r: (r["name"], r["mtime"]), reverse=True)


def render_index(store: Path) -> str:
    runs = list_runs(store)
    values = {key: sorted({r[key] for r in runs} - {""}) for key in ("test", "verdict", "workload")}
    for key in ("nemesis", "bugs", "anomalies"):
        values[key] = sorted({v for r in runs for v in r[key]})
    return (
        environment()
        .get_template("index.html.j2")
        .render(
            title=f"store {store}",
            store=store,
            runs=runs,
            values=values,
            trends=(store / "trends" / "index.html").is_file(),
            latest=(store / "latest" / "report.html").is_file(),
            nightly=(store / "nightly" / "latest" / "index.html").is_file(),
        )
    )


class StoreHandler(SimpleHTTPRequestHandler):
    """Serves the store directory read-only; refuses anything outside it."""

    store: Path

    def __init__(self, *args: Any, store: Path, **kwargs: Any) -> None:
        self.store = store
        super().__init__(*args, directory=str(store), **kwargs)

    def _inside(self) -> bool:
        raw = unquote(urlsplit(self.path).path)
        if ".." in raw.split("/") or "\\" in raw or "\0" in raw:
            return False
        real = Path(os.path.realpath(self.translate_path(self.path)))
        return real == self.store or self.store in real.parents

    def send_head(self) -> Any:
        path = urlsplit(self.path).path
        if path in ("/", "/index.html"):
            body = render_index(self.store).encode()
            self.send_response(HTTPStatus.OK)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            return io.BytesIO(body)
        if path == "/favicon.ico" and not (self.store / "favicon.ico").exists():
            self.send_response(HTTPStatus.NO_CONTENT)  # browsers ask on every page
            self.end_headers()
            return None
        if not self._inside():
            self.send_error(HTTPStatus.FORBIDDEN, "outside the store")
            return None
        return super().send_head()


def make_server(store: Path, host: str, port: int) -> ThreadingHTTPServer:
    """A server over `store` (not yet serving), bound to host:port (port 0: any free one)."""
    if not store.is_dir():
        raise UserError(f"{store}: no such store (pass the --store of your runs, e.g. store)")
    handler = functools.partial(StoreHandler, store=store.resolve())
    try:
        return ThreadingHTTPServer((host, port), handler)
    except OSError as exc:
        raise UserError(f"cannot listen on {host}:{port} ({exc}); pick another --port") from exc
