"""Seeded bugs: deliberate, one-line deviations from the protocol, off by default.

Each bug reproduces a real incident or a mistake the reference material warns about, so a
chaos run can prove that the checkers catch it. A bookie or client is given the bugs it
has as a :class:`Bugs` value when it is built; a process reads them once, at its entry
point, from the environment variable ``BKCHAOS_BUGS=a,b`` (:meth:`Bugs.from_env`), which is
how the harness reaches bookies and agents in their own processes. ``docs/bugs.md``
documents each one.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["ENV_VAR", "KNOWN", "NO_BUGS", "Bugs", "UnknownBugError", "parse"]

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


@dataclass(frozen=True)
class Bugs:
    """The seeded bugs one bookie or client has: a value fixed when it is built, so a
    simulation running many of them in one process gives each its own."""

    names: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        # A misspelt bug must not silently test nothing; any collection of names will do.
        object.__setattr__(self, "names", parse(",".join(self.names)))

    @classmethod
    def from_env(cls, environ: Mapping[str, str] = os.environ) -> Bugs:
        """The bugs a process's environment switches on (its entry point asks once)."""
        return cls(parse(environ.get(ENV_VAR, "")))

    def enabled(self, name: str) -> bool:
        """Whether seeded bug ``name`` is on; asking about an unknown name is an error too."""
        if name not in KNOWN:
            raise UnknownBugError(name)
        return name in self.names


NO_BUGS = Bugs()
