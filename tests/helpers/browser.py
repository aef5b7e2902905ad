"""The browser tier's page wrapper and settings: Debian's chromium, where screenshots go."""

from __future__ import annotations

from pathlib import Path
from typing import Any

CHROMIUM = Path("/usr/bin/chromium")
OUTPUT = Path(__file__).resolve().parents[2] / "test-output"
SMALL_PAGES = 150  # calls per timeline page in the invalid run, so tests cross pages


class Tab:
    """A page that records console errors and uncaught exceptions as they happen."""

    def __init__(self, page: Any) -> None:
        self.page = page
        self.errors: list[str] = []
        page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: self.errors.append(str(e)))

    def screenshot(self, name: str, full_page: bool = False) -> None:
        OUTPUT.mkdir(exist_ok=True)
        self.page.screenshot(path=str(OUTPUT / name), full_page=full_page)
