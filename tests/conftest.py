"""The suite's tiers, one folder each; a test's folder gives it its tier's marker.

- `unit`, `sim`: no servers, no root, no docker, no JVM — the venv only (`make test-fast`);
  `sim` runs the product in the deterministic simulation.
- `integration`: real local processes (ZooKeeper, bookies, client agents).
- `docker`: the Docker engine and the bkchaos image.
- `spark`: Spark (a JVM) through pyspark.
- `browser`: Debian's chromium through playwright.

`pytest -m "unit or sim"` picks tiers by marker; `pytest tests/unit tests/sim` by folder.
A test module outside these folders is a usage error, so that none runs untiered.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import settings

pytest_plugins = ["pytester"]  # the plugin's own tests drive inner pytest sessions

settings.register_profile("bkchaos", deadline=None)
settings.load_profile("bkchaos")
"""No per-example deadline anywhere: how long an example takes depends on the machine's load
(a 200 ms deadline failed a strategy test on the loaded 2-core machine), never on the code."""

TESTS = Path(__file__).parent
TIERS = ("unit", "sim", "integration", "docker", "spark", "browser")


def pytest_configure(config: pytest.Config) -> None:
    """Under pytest-xdist (`make test` and `make test-fast` run a worker per core) each
    worker's chaos runs go to a store of their own: the runs of one store share its
    `latest` links."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker:
        config.option.bkchaos_store = str(Path(config.option.bkchaos_store) / worker)


HEAVY_FIRST = ("docker", "spark", "integration", "browser", "sim", "unit")
"""The order the tiers run in, the longest first (a run that fails late fails slowly)."""


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        tier = item.path.relative_to(TESTS).parts[0]
        if tier not in TIERS:
            raise pytest.UsageError(
                f"{item.nodeid}: move it into one of tests/{{{','.join(TIERS)}}}/"
            )
        item.add_marker(tier)
    items.sort(key=lambda item: HEAVY_FIRST.index(item.path.relative_to(TESTS).parts[0]))


@pytest.fixture
def project_ini(pytester: pytest.Pytester) -> None:
    """Inner pytest sessions get the project's pytest-asyncio setting, as a user's suite would."""
    pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\n")
