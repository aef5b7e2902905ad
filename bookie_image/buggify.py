"""BUGGIFY: points where a simulation may perturb the product to make rare interleavings common.

FoundationDB's simulation finds races nobody planted partly because it perturbs its own
code on purpose: an extra delay before a message goes out, a connection dropped, a
timeout that fires although the answer came. The bookie and the client ask here, at a few
chosen points, whether to misbehave; the simulation (harness/sim/buggify.py) installs a
seeded `Perturber` that answers. Outside the simulation nobody installs one, and each
question is one `is None` test that answers "no".

Every point is declared once in :data:`POINTS`, so a perturbation cannot be asked for
under a misspelt name and a run can say which points fired.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Protocol

__all__ = ["POINTS", "Perturber", "UnknownPointError", "delay", "fires", "installed"]

POINTS: dict[str, str] = {
    "client-request-delay": "a client request to a bookie waits before it is sent, so "
    "requests to different bookies (adds, fencing, recovery reads, write-back) reorder",
    "client-spurious-timeout": "a bookie's answer arrives but the client treats it as a "
    "timeout (the request was applied; the client must count it unknown)",
    "client-drop-connection": "the client's connection to a bookie breaks right after a "
    "request is written, failing every request waiting on it",
    "client-request-lost": "the client's connection to a bookie breaks just before a "
    "request is written: the bookie never gets it, the client cannot tell (a bookie "
    "failing in the middle of a write-back)",
    "ensemble-change-delay": "a writer's ensemble change waits before its metadata CAS, "
    "widening its race with a recovery",
    "recovery-writeback-delay": "a recovery waits between reading an entry and writing it "
    "back, and before its truncating no-op (a bookie failing, or a newer term arriving, "
    "then is the write-back's fault window)",
    "recovery-close-delay": "a recovery waits before the CAS that closes or reopens the "
    "ledger, widening its race with the writer and with other recoveries",
    "bookie-reply-delay": "a bookie holds an answer back before sending it, so answers "
    "reorder across connections and arrive after the client gave up",
    "bookie-journal-delay": "a bookie's journal waits before writing a batch, so acks "
    "come late and fencing lands between an add's arrival and its durability",
    "zk-delay": "a ZooKeeper call waits before reaching the server",
    "zk-lost-reply": "a ZooKeeper call is applied but its reply is lost: the caller sees "
    "a connection loss for a write that happened",
}
"""point -> what the simulation does there when the point fires."""


class UnknownPointError(KeyError):
    """A point asked for under a name nobody declared."""


class Perturber(Protocol):
    """What a simulation installs: seeded answers to the product's questions."""

    def fires(self, point: str) -> bool:
        """Whether to misbehave at `point` this time."""
        ...

    def delay(self, point: str) -> float:
        """How long (seconds) to wait at `point` this time; 0.0 for not at all."""
        ...


_perturber: Perturber | None = None


def fires(point: str) -> bool:
    """Whether the simulation wants `point` perturbed now; always False outside it."""
    if _perturber is None:
        return False
    if point not in POINTS:
        raise UnknownPointError(point)
    return _perturber.fires(point)


def delay(point: str) -> float:
    """Seconds to wait at `point` now (0.0: do not wait); always 0.0 outside a simulation.
    Call sites await a sleep only when it is positive, so an unperturbed run takes the
    very same steps as before the point existed."""
    if _perturber is None:
        return 0.0
    if point not in POINTS:
        raise UnknownPointError(point)
    return _perturber.delay(point)


@contextmanager
def installed(perturber: Perturber) -> Iterator[None]:
    """Let `perturber` answer while the block runs (one simulation at a time)."""
    global _perturber
    if _perturber is not None:
        raise RuntimeError("a perturber is already installed")
    _perturber = perturber
    try:
        yield
    finally:
        _perturber = None
