"""The bookie's TOML config, written the same way by every runtime (local, docker)."""

from __future__ import annotations

import json
from collections.abc import Sequence


def bookie_toml(
    *,
    bookie_id: str,
    host: str,
    port: int,
    zk: str,
    ledgers_root: str,
    journal_dir: str,
    ledger_dirs: Sequence[str],
) -> str:
    """The config `python -m bookie_image.bookie --config FILE` reads (keys as in
    bookie_image.bookie.config); JSON strings are valid TOML basic strings."""
    dirs = ", ".join(json.dumps(d) for d in ledger_dirs)
    return (
        f"bookie_id = {json.dumps(bookie_id)}\n"
        f"host = {json.dumps(host)}\n"
        f"port = {port}\n"
        f"zk = {json.dumps(zk)}\n"
        f"zk_ledgers_root = {json.dumps(ledgers_root)}\n"
        f"journal_dir = {json.dumps(journal_dir)}\n"
        f"ledger_dirs = [{dirs}]\n"
    )
