"""Extensions from other packages, found through entry points (`bkchaos.workloads`,
`bkchaos.nemeses`; checkers read `bkchaos.checkers` themselves, as they import nothing
of ours), so users add their own without forking. docs/extending.md shows one of each."""

from __future__ import annotations

from collections.abc import Mapping
from importlib.metadata import entry_points
from typing import Any

__all__ = ["PluginError", "load_plugins"]


class PluginError(Exception):
    """An installed plugin that cannot be used; the message names it and what to do."""


def load_plugins(group: str, builtin: Mapping[str, Any]) -> dict[str, Any]:
    """The entry points of `group`, loaded, by name. A name that a built-in already has,
    or one that fails to load, is a PluginError naming the plugin's package."""
    found: dict[str, Any] = {}
    for entry in entry_points(group=group):
        where = f"{group} plugin {entry.name!r} ({entry.value}"
        where += f", from {entry.dist.name})" if entry.dist is not None else ")"
        if entry.name in builtin or entry.name in found:
            raise PluginError(f"the {where} reuses a name bkchaos has: rename it")
        try:
            found[entry.name] = entry.load()
        except Exception as exc:
            raise PluginError(
                f"the {where} cannot be loaded ({type(exc).__name__}: {exc}): "
                "fix or uninstall that package"
            ) from exc
    return found
