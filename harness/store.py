"""The store: one directory per run, `store/<test>/<timestamp>/`, with `latest` links.

A run directory holds `run.json`, `test.json`, `history.jsonl`, `results.json`,
`report.html`, `logs/<node>/…` and `bkchaos.log`. `store/latest` and `store/<test>/latest`
point at the newest run so people (and `bkchaos check store/latest`) find it without looking;
`store/current` at the run going on (the newest, if several share the store).
"""

from __future__ import annotations

import os
import re
import shutil
import time
import uuid
from pathlib import Path

from harness.errors import UserError

RUN_RECORD = "run.json"
"""In every run directory from its start: the controller that owns the run
(harness.runtime.ownership.controller_id), its runtime and the run id its nodes carry;
`bkchaos gc` reads it to tell a stale `current` link."""
RESERVED_NAMES = frozenset({"latest", "current", "nightly", "trends", "farm"})
"""Names the store uses itself: a test named so would clobber its links or pages."""
_PLAIN_NAME = re.compile(r"[A-Za-z0-9_.+-]+")


def check_test_name(test_name: str) -> str:
    """A test name is one plain directory name inside the store: letters, digits and
    `_.+-`, never `.`, `..` or a name the store uses itself, so a run can never land
    outside the store or on its links."""
    if (
        not _PLAIN_NAME.fullmatch(test_name)
        or test_name in (".", "..")
        or test_name in RESERVED_NAMES
        or test_name.endswith(".tmp")
    ):
        raise UserError(
            f"test name {test_name!r} is not a plain name: use letters, digits, '-', '_', "
            f"'+' or '.', not {sorted(RESERVED_NAMES)} (pass --name NAME)"
        )
    return test_name


def new_run_dir(store: Path, test_name: str) -> Path:
    """Create and return a fresh run directory (a suffix keeps same-second runs apart)."""
    check_test_name(test_name)
    stamp = time.strftime("%Y%m%dT%H%M%S")
    try:
        base = store / test_name
        base.mkdir(parents=True, exist_ok=True)
        for suffix in ("", *(f"-{i}" for i in range(1, 1000))):
            run_dir = base / f"{stamp}{suffix}"
            try:
                run_dir.mkdir()
                return run_dir
            except FileExistsError:
                continue
    except OSError as exc:
        raise UserError(f"cannot write to the store {store}: {exc}; pass --store DIR") from exc
    raise UserError(f"too many runs of {test_name} at {stamp} in {store}")


def link_current(run_dir: Path) -> None:
    """Point the store's `current` at `run_dir` while it runs."""
    _relink(run_dir.parent.parent / "current", f"{run_dir.parent.name}/{run_dir.name}")


def unlink_current(run_dir: Path) -> None:
    """Remove `current` if it still points at `run_dir` (a later run may have taken it)."""
    link = run_dir.parent.parent / "current"
    if os.path.islink(link) and os.readlink(link) == f"{run_dir.parent.name}/{run_dir.name}":
        link.unlink(missing_ok=True)


def _relink(link: Path, target: str) -> None:
    """Point `link` at `target` atomically; a temporary name of this call's own, so runs
    sharing a store never trip over each other's (the last one wins)."""
    tmp = link.with_name(f".{link.name}.{os.getpid()}.{uuid.uuid4().hex[:12]}.tmp")
    os.symlink(target, tmp)
    tmp.replace(link)


def link_latest(run_dir: Path) -> None:
    """Point `<test>/latest` and the store's `latest` at `run_dir` (relative links)."""
    test_dir = run_dir.parent
    for link, target in (
        (test_dir / "latest", run_dir.name),
        (test_dir.parent / "latest", f"{test_dir.name}/{run_dir.name}"),
    ):
        _relink(link, target)


def collect_logs(nodes_dir: Path, run_dir: Path) -> None:
    """Copy each node's logs (`*.log`, and a rolled `*.log.1`) into `logs/<node>/` of
    the run."""
    for log in sorted([*nodes_dir.glob("*/*.log"), *nodes_dir.glob("*/*.log.1")]):
        dest = run_dir / "logs" / log.parent.name
        dest.mkdir(parents=True, exist_ok=True)
        shutil.copy2(log, dest / log.name)


def store_name(text: str) -> str:
    """A directory-safe name for the store (test names with parameters, cell ids)."""
    return re.sub(r"[^A-Za-z0-9_.+-]+", "_", text).strip("_") or "chaos"
