"""Protocol coverage probes: named corners of the protocol, counted when a run reaches them.

A chaos run that finds nothing says little unless we know which narrow windows of the
protocol it went through. The bookie and the client call :func:`reach` at those corners
(fencing reaching its coverage threshold, a recovery read answered negative, a write-back
during recovery, …); whoever runs them — the simulation in-process, a node's event log in
a real process — listens and counts. With no listener, :func:`reach` is one truth test.

Every probe is declared once in :data:`PROBES` with the passage of the reference material
it comes from, so a report can say what was and was not reached.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["PROBES", "Listener", "UnknownProbeError", "listening", "reach"]

Listener = Callable[[str, dict[str, Any]], None]
"""Called with the probe's name and the fields the caller gave (ledger, entry, bookie…)."""

PROBES: dict[str, str] = {}
"""probe name -> the protocol corner it marks and where the reference material describes it.
Filled in by the modules that reach them; names are kebab-case, prefixed by the component
(`bookie-…`, `client-…`, `recovery-…`, `ensemble-…`, `unbounded-…`, `journal-…`)."""

_listeners: list[Listener] = []


class UnknownProbeError(KeyError):
    """A probe reached under a name nobody declared (a typo would silently count nothing)."""


def reach(name: str, **fields: Any) -> None:
    """Mark that the running code reached probe ``name``; free when nobody listens."""
    if not _listeners:
        return
    if name not in PROBES:
        raise UnknownProbeError(name)
    for listener in tuple(_listeners):
        listener(name, fields)


@contextmanager
def listening(listener: Listener) -> Iterator[None]:
    """Call ``listener`` for every probe reached while the block runs."""
    _listeners.append(listener)
    try:
        yield
    finally:
        _listeners.remove(listener)
