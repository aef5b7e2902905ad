"""A real headless Chromium (Debian's `chromium` package) driven by playwright.

Nothing is downloaded: playwright launches the system browser by `executable_path`.
The runs are synthetic (tests/unit/test_report.py builds them) so the suite needs no
cluster; screenshots go to `test-output/` for people to look at.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness.report import timeline
from harness.report.render import write_report
from harness.report.server import make_server
from tests.helpers.browser import CHROMIUM, SMALL_PAGES, Tab
from tests.helpers.reports import make_run


@pytest.fixture(scope="package")
def browser() -> Iterator[Any]:
    """One Chromium for the browser tests only: playwright's sync API keeps an event loop
    running in this thread while it is open, and later tests call asyncio.run()."""
    os.environ.setdefault("PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD", "1")
    if not CHROMIUM.is_file():
        pytest.fail(f"{CHROMIUM} is missing: run `make setup` (or apt-get install -y chromium)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        # --no-sandbox: Chromium's sandbox refuses to run as root, as CI does
        chromium = p.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox"])
        yield chromium
        chromium.close()


@pytest.fixture
def tab(browser: Any) -> Iterator[Tab]:
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    try:
        yield Tab(context.new_page())
    finally:
        context.close()


@pytest.fixture(scope="session")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store with a valid and an invalid run, both reported, and a trends page."""
    root = tmp_path_factory.mktemp("store")
    write_report(make_run(root / "clean" / "20261101T100000", invalid=False))
    invalid = make_run(root / "bugged" / "20261102T100000", invalid=True)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(timeline, "CALLS_PER_PAGE", SMALL_PAGES)
        write_report(invalid)
    (root / "trends").mkdir()
    (root / "trends" / "index.html").write_text(
        "<!doctype html><title>trends</title><h1>Trends</h1>"
    )
    return root


@pytest.fixture(scope="session")
def served(store: Path) -> Iterator[str]:
    """The base URL of `bkchaos serve` over the store."""
    server = make_server(store, "127.0.0.1", 0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()
