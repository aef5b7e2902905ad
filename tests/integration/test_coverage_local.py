"""Coverage from real processes: bookies and client agents log `probe` events, and the
runner counts them from the collected node logs into results.json."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bookie_image.probes import PROBES
from tests.integration.test_chaos_local import _run

pytestmark = pytest.mark.integration

CLIENT_SIDE = ("recovery-", "ensemble-", "client-", "metadata-")


def test_a_local_run_counts_the_probes_its_bookies_and_agents_logged(tmp_path: Path) -> None:
    store = tmp_path / "store"
    args = ["--bookies", "4", "--nemesis", "kill", "--nemesis-interval", "2", "--seed", "3"]
    done = _run(store, *args, "--time-limit", "10")
    assert done.returncode == 0, done.stdout + done.stderr
    run_dir = (store / "latest").resolve()
    coverage = json.loads((run_dir / "results.json").read_text())["coverage"]
    assert list(coverage) == sorted(PROBES)
    # a killed bookie restarts on its disks: it replays its journal (a bookie-side probe)
    assert coverage["journal-replay-intact"] > 0
    logged = {}
    for log in sorted((run_dir / "logs").glob("*/*.log")):
        for line in log.read_text().splitlines():
            if line.startswith("{") and '"probe"' in line:
                event = json.loads(line)
                if event.get("event") == "probe":
                    logged[event["probe"]] = logged.get(event["probe"], 0) + 1
    assert logged == {name: count for name, count in coverage.items() if count}
    assert any(name.startswith(CLIENT_SIDE) for name in logged), logged  # from agent.log
