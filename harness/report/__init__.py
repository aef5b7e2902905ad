"""HTML reports of runs and the store index behind `bkchaos serve` (DESIGN §9).

`render.write_report(run_dir)` renders `report.html`, `timeline.html` (+ `timeline/`
pages) and places `plotly.min.js` beside them, so a run directory is browsable offline;
`server` is `bkchaos serve`. This module only holds what the runner calls, and imports
the rest lazily, so a broken report dependency can never stop a test from running.
"""

from __future__ import annotations

import logging
from pathlib import Path

log = logging.getLogger(__name__)


def try_write_report(run_dir: Path) -> Path | None:
    """Write the report at the end of a run; a failure (even a missing dependency) is
    logged, never raised, so the run and its results.json are kept and
    `bkchaos report RUN_DIR` can retry."""
    try:
        from harness.report.render import write_report

        return write_report(run_dir)
    except Exception:
        log.exception("could not write the report of %s; retry with `bkchaos report`", run_dir)
        return None


__all__ = ["try_write_report"]
