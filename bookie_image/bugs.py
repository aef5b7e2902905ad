"""Seeded bugs: deliberate, one-line deviations from the protocol, off by default.

Each bug reproduces a real incident or a mistake the reference material warns about, so a
chaos run can prove that the checkers catch it. They are switched on with the environment
variable ``BKCHAOS_BUGS=a,b`` (read on every call, so tests can flip it with
``monkeypatch.setenv``). ``docs/bugs.md`` documents each one.
"""

from __future__ import annotations

import os

__all__ = ["ENV_VAR", "KNOWN", "UnknownBugError", "active", "enabled", "parse"]

ENV_VAR = "BKCHAOS_BUGS"

KNOWN: frozenset[str] = frozenset(
    {
        "recovery-unknown-as-negative",
        "recovery-reads-no-fence",
        "no-journal-fsync",
        "no-cookie",
        "no-recovery-writeback",
        "lac-before-ack-quorum",
        "unbounded-no-truncate",
        "read-beyond-lac",
        "scope-id-ignored",
        "ensemble-change-drops-pending",
        "corrupt-returns-noentry",
        "metadata-blind-write",
    }
)


class UnknownBugError(ValueError):
    """A bug name that is not in :data:`KNOWN` (a typo would otherwise silently test nothing)."""

    def __init__(self, name: str) -> None:
        super().__init__(f"unknown seeded bug {name!r}; known bugs: {', '.join(sorted(KNOWN))}")
        self.name = name


def parse(spec: str) -> frozenset[str]:
    """Parse a comma-separated list of bug names, rejecting unknown ones."""
    names = frozenset(part.strip() for part in spec.split(",") if part.strip())
    for name in sorted(names):
        if name not in KNOWN:
            raise UnknownBugError(name)
    return names


def active() -> frozenset[str]:
    """The bugs switched on by the environment right now."""
    return parse(os.environ.get(ENV_VAR, ""))


def enabled(name: str) -> bool:
    """Whether seeded bug ``name`` is on; asking about an unknown name is an error too."""
    if name not in KNOWN:
        raise UnknownBugError(name)
    return name in active()
