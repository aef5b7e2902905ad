"""A night and a matrix file for the `bkchaos nightly` tests."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

NIGHT = dt.date(2026, 11, 20)


def write_matrix(tmp_path: Path, text: str) -> Path:
    """`text` as a matrix file in `tmp_path`."""
    path = tmp_path / "nightly.toml"
    path.write_text(text)
    return path
