"""The `bkchaos` command line as the tests run it: this interpreter, this tree's code."""

from __future__ import annotations

import sys

BKCHAOS = [sys.executable, "-c", "from harness.cli import main; main()"]
"""`bkchaos` without relying on the venv's entry-point script: `[*BKCHAOS, "test", ...]`."""
