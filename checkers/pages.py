"""The one way a page is rendered: Jinja templates with autoescaping.

A run's report, `bkchaos serve`'s index, the nightly summary and the Spark trend page all
come through here, so text from runs (names, errors, replay commands) is escaped whichever
page shows it. It lives in `checkers/`, the lowest folder that both `harness` and
`checkers/spark` may import (docs/architecture.md).
"""

from __future__ import annotations

import jinja2

__all__ = ["environment"]


def environment(package: str) -> jinja2.Environment:
    """The templates in `package`'s `templates/` folder, HTML-escaped by default; a name
    a template uses but is not given is an error, not an empty string."""
    return jinja2.Environment(
        loader=jinja2.PackageLoader(package, "templates"),
        autoescape=True,
        trim_blocks=True,
        lstrip_blocks=True,
        undefined=jinja2.StrictUndefined,
    )
