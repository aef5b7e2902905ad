"""Typed client errors.

Each carries ``code`` — the BookKeeper status name when a bookie answered with one
(``EFENCED``, ``EIO``, …), else a client-side name in the same style — and
``may_have_happened``: whether the failed operation could still take effect. The client
agent records ``fail`` when it is False and ``info`` when it is True (docs/history.md §1),
so getting it wrong produces false anomalies or hides real ones.
"""

from __future__ import annotations

__all__ = [
    "BKError",
    "BKTimeoutError",
    "BookieError",
    "ConcurrentModificationError",
    "DigestMismatchError",
    "LedgerClosedError",
    "LedgerExistsError",
    "LedgerFencedError",
    "LedgerRecoveryError",
    "MetadataError",
    "NoSuchEntryError",
    "NoSuchLedgerError",
    "NotEnoughBookiesError",
    "UnauthorizedError",
]


class BKError(Exception):
    """Base of every client error."""

    default_code = "EUNKNOWN"

    def __init__(self, message: str, *, may_have_happened: bool, code: str | None = None) -> None:
        super().__init__(message)
        self.code = code or self.default_code
        self.may_have_happened = may_have_happened

    def __str__(self) -> str:
        maybe = "may have happened" if self.may_have_happened else "did not happen"
        return f"{self.code}: {super().__str__()} ({maybe})"


class BookieError(BKError):
    """A bookie answered with an error status (``code`` is its name)."""


class LedgerFencedError(BKError):
    """Another client fenced (recovered) the ledger: this writer lost it for good."""

    default_code = "EFENCED"


class LedgerClosedError(BKError):
    """The ledger is closed (or was closed by recovery) and accepts no more adds."""

    default_code = "ELEDGERCLOSED"


class NoSuchLedgerError(BKError):
    """The ledger's metadata does not exist (never created, or deleted)."""

    default_code = "ENOLEDGER"


class NoSuchEntryError(BKError):
    """Every bookie asked said it does not have the entry."""

    default_code = "ENOENTRY"


class LedgerExistsError(BKError):
    default_code = "ELEDGEREXISTS"


class UnauthorizedError(BKError):
    """Wrong password (the metadata's hash differs, or a bookie answered EUA)."""

    default_code = "EUA"


class DigestMismatchError(BKError):
    """An entry's digest did not verify: corrupt data or a wrong password."""

    default_code = "EDIGEST"


class NotEnoughBookiesError(BKError):
    """Too few writable bookies to form or repair an ensemble."""

    default_code = "ENOTENOUGHBOOKIES"


class BKTimeoutError(BKError):
    """No answer in time: the operation may still complete."""

    default_code = "ETIMEOUT"


class MetadataError(BKError):
    """ZooKeeper could not be read or written (connection loss, session expiry, …)."""

    default_code = "EMETADATA"


class ConcurrentModificationError(BKError):
    """The metadata changed under us in a way that cannot be merged (e.g. a racing
    recovery closed the ledger first)."""

    default_code = "EMETADATAVERSION"


class LedgerRecoveryError(BKError):
    """Recovery could not decide (unknown answers, unreachable bookies): retry later."""

    default_code = "ERECOVERY"
