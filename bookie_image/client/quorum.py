"""Pure quorum arithmetic of the BookKeeper protocol (no I/O, no clock).

Everything that decides *what is committed* lives here so that it can be tested
exhaustively: striping (the write set), ack-quorum tracking and the LAC, fencing coverage
and the recovery-read decision with its (WQ−AQ)+1 negative threshold.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass

from bookie_image.bugs import NO_BUGS, Bugs

__all__ = [
    "AckTracker",
    "QuorumConfig",
    "ReadOutcome",
    "RecoveryDecision",
    "RecoveryReadTally",
    "ack_quorum_survives",
    "negative_threshold",
    "quorum_covered",
    "write_set",
]


@dataclass(frozen=True, slots=True)
class QuorumConfig:
    """Ensemble size E, write quorum WQ and ack quorum AQ, validated (E ≥ WQ ≥ AQ ≥ 1)."""

    ensemble_size: int
    write_quorum: int
    ack_quorum: int

    def __post_init__(self) -> None:
        if not 1 <= self.ack_quorum <= self.write_quorum <= self.ensemble_size:
            raise ValueError(
                "need ensemble >= write_quorum >= ack_quorum >= 1, got "
                f"ensemble={self.ensemble_size}, write_quorum={self.write_quorum}, "
                f"ack_quorum={self.ack_quorum}"
            )


def write_set(entry_id: int, config: QuorumConfig) -> list[int]:
    """Ensemble indices that store ``entry_id``: ``(entryId + i) % E`` for i < WQ."""
    return [(entry_id + i) % config.ensemble_size for i in range(config.write_quorum)]


class AckTracker:
    """Acks of pipelined adds and the LAC they allow.

    An entry is committed once AQ distinct bookies of its write set acknowledged it; the
    LAC only moves over a *contiguous* prefix of committed entries, so an entry acked out
    of order waits for its predecessors (adds complete in entry order).
    """

    def __init__(
        self, config: QuorumConfig, last_add_confirmed: int = -1, bugs: Bugs = NO_BUGS
    ) -> None:
        self.config = config
        self.last_add_confirmed = last_add_confirmed
        self.bugs = bugs
        self._acks: dict[int, set[int]] = {}

    def expect(self, entry_id: int) -> None:
        """Start tracking an entry that is about to be sent."""
        self._acks.setdefault(entry_id, set())

    def forget_bookie(self, index: int) -> None:
        """Drop acks from an ensemble slot whose bookie was replaced: they must be re-sent
        (the new bookie has not got the entries), and the old bookie's ack does not count
        toward the new fragment's quorum."""
        for acked in self._acks.values():
            acked.discard(index)

    def ack(self, entry_id: int, bookie_index: int) -> list[int]:
        """Record one ack; returns the entries newly covered by the LAC, in order."""
        if entry_id in self._acks:
            self._acks[entry_id].add(bookie_index)
        return self._advance()

    def _advance(self) -> list[int]:
        # The seeded bug moves the LAC on the first ack instead of the ack quorum.
        needed = 1 if self.bugs.enabled("lac-before-ack-quorum") else self.config.ack_quorum
        done: list[int] = []
        while len(self._acks.get(self.last_add_confirmed + 1, ())) >= needed:
            self.last_add_confirmed += 1
            del self._acks[self.last_add_confirmed]
            done.append(self.last_add_confirmed)
        return done


def quorum_covered(config: QuorumConfig, responded: Iterable[int]) -> bool:
    """Quorum coverage (reference 003): every ack quorum of every write set contains one of
    the ``responded`` ensemble indices, i.e. every write set has fewer than AQ others.

    For fencing this means no ack quorum is left unfenced, so the old writer cannot get an
    add acknowledged; with E = WQ it is the reference's (E−AQ)+1 fenced bookies, and with
    striping it is checked per write set, as BookKeeper does. For LAC reads it means that
    the bookies holding the writer's latest entry include one that answered.
    """
    covered = set(responded)
    return all(
        sum(1 for b in write_set(start, config) if b not in covered) < config.ack_quorum
        for start in range(config.ensemble_size)
    )


def ack_quorum_survives(config: QuorumConfig, failed: Iterable[int]) -> bool:
    """Whether every write set still has AQ slots outside ``failed``: adds can then complete
    without replacing the failed bookies (used when no replacement is available)."""
    failed_set = set(failed)
    return all(
        sum(1 for b in write_set(start, config) if b not in failed_set) >= config.ack_quorum
        for start in range(config.ensemble_size)
    )


def negative_threshold(config: QuorumConfig) -> int:
    """Explicit negatives that prove an entry never reached an ack quorum: (WQ−AQ)+1."""
    return config.write_quorum - config.ack_quorum + 1


class ReadOutcome(enum.Enum):
    """How one recovery-read response counts."""

    POSITIVE = "positive"  # the bookie returned the entry (digest checked)
    NEGATIVE = "negative"  # ENOENTRY / ENOLEDGER: the bookie says it has no such entry
    UNKNOWN = "unknown"  # timeout, EIO, digest mismatch, connection loss, …


class RecoveryDecision(enum.Enum):
    RECOVERABLE = "recoverable"  # one positive is enough (write-back makes it durable)
    UNRECOVERABLE = "unrecoverable"  # (WQ−AQ)+1 negatives: no ack quorum can hold it
    UNDECIDED = "undecided"  # wait for more responses
    UNKNOWN = "unknown"  # everyone answered, neither threshold met: abort recovery


@dataclass(slots=True)
class RecoveryReadTally:
    """Counts recovery-read responses for one entry: generous on positives, strict on
    negatives. Unknown responses never count as negatives (that would truncate ledgers)."""

    config: QuorumConfig
    positives: int = 0
    negatives: int = 0
    unknowns: int = 0
    bugs: Bugs = NO_BUGS

    def record(self, outcome: ReadOutcome) -> RecoveryDecision:
        if outcome is ReadOutcome.POSITIVE:
            self.positives += 1
        elif outcome is ReadOutcome.NEGATIVE or self.bugs.enabled("recovery-unknown-as-negative"):
            self.negatives += 1
        else:
            self.unknowns += 1
        return self.decision()

    def decision(self) -> RecoveryDecision:
        if self.positives:
            return RecoveryDecision.RECOVERABLE
        if self.negatives >= negative_threshold(self.config):
            return RecoveryDecision.UNRECOVERABLE
        if self.positives + self.negatives + self.unknowns >= self.config.write_quorum:
            return RecoveryDecision.UNKNOWN
        return RecoveryDecision.UNDECIDED
