"""Every package of the project is installed: by pip (pyproject) and into the image."""

from __future__ import annotations

import tomllib
from pathlib import Path

from bookie_image.image.build import PROJECT_PACKAGES

ROOT = Path(__file__).parents[2]


def test_every_top_level_package_is_in_the_wheel_and_the_image() -> None:
    packages = {p.parent.name for p in ROOT.glob("*/__init__.py")} - {"tests"}
    find = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    assert {pattern.rstrip("*") for pattern in find["find"]["include"]} == packages
    assert set(PROJECT_PACKAGES) == packages
