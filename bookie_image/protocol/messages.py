"""Typed requests and responses: frozen, slotted values that refuse to hold a bad field.

Every check raises LocalProtocolError naming the field and the value; the decoder turns
that into a RemoteProtocolError when the bad value came off the wire.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ._checks import I64_MAX, MASTER_KEY_SIZE, U32_MAX, U64_MAX, check_bytes, check_int
from .entry import EntryHeader, peek_entry_header
from .errors import LocalProtocolError, ProtocolError
from .ids import LedgerId
from .status import Status


def _check_ledger(value: object) -> None:
    if not isinstance(value, LedgerId):
        raise LocalProtocolError(f"ledger must be a LedgerId, got {value!r}")


def _status(value: object) -> Status:
    """The Status member for ``value``, so an int off the wire prints by name."""
    status = _STATUSES.get(value) if type(value) is int or isinstance(value, Status) else None
    if status is None:
        raise LocalProtocolError(f"status must be a Status, got {value!r}")
    return status


_STATUSES = {int(s): s for s in Status}


# Requests (client -> bookie)


@dataclass(frozen=True, slots=True)
class AddRequest:
    """ADD: store ``entry`` (an encoded entry; its header names ledger and entry id)."""

    request_id: int
    master_key: bytes
    entry: bytes
    recovery: bool = False
    term: int | None = None
    truncate: bool = False
    # The entry's header (ledger, entry id, piggybacked LAC), read once, digest unchecked.
    header: EntryHeader = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        check_int("request_id", self.request_id, 0, U64_MAX)
        check_bytes("master_key", self.master_key, MASTER_KEY_SIZE)
        check_bytes("entry", self.entry)
        try:
            object.__setattr__(self, "header", peek_entry_header(self.entry))
        except ProtocolError as exc:
            raise LocalProtocolError(f"entry is not an encoded entry: {exc}") from None
        if self.term is not None:
            check_int("term", self.term, 0, I64_MAX)


@dataclass(frozen=True, slots=True)
class ReadRequest:
    """READ: entry ``entry_id`` (−1: the last one stored); ``fence`` needs the master key."""

    request_id: int
    ledger: LedgerId
    entry_id: int
    fence: bool = False
    master_key: bytes | None = None
    term: int | None = None

    def __post_init__(self) -> None:
        check_int("request_id", self.request_id, 0, U64_MAX)
        _check_ledger(self.ledger)
        check_int("entry_id", self.entry_id, -1, I64_MAX)
        if self.fence:
            check_bytes("master_key", self.master_key, MASTER_KEY_SIZE)
        elif self.master_key is not None:
            # The wire carries the key only with FENCE_LEDGER; keeping it would not round-trip.
            raise LocalProtocolError(
                f"master_key is sent only with fence=True, got {self.master_key!r}"
            )
        if self.term is not None:
            check_int("term", self.term, 0, I64_MAX)


@dataclass(frozen=True, slots=True)
class ReadLacRequest:
    """READ_LAC; a long poll (wait for the LAC to pass ``previous_lac``) iff it is set."""

    request_id: int
    ledger: LedgerId
    previous_lac: int | None = None
    timeout_ms: int | None = None

    def __post_init__(self) -> None:
        check_int("request_id", self.request_id, 0, U64_MAX)
        _check_ledger(self.ledger)
        if (self.previous_lac is None) != (self.timeout_ms is None):
            raise LocalProtocolError(
                "previous_lac and timeout_ms go together (a long poll needs both), got"
                f" previous_lac={self.previous_lac!r}, timeout_ms={self.timeout_ms!r}"
            )
        if self.previous_lac is not None:
            check_int("previous_lac", self.previous_lac, -1, I64_MAX)
            check_int("timeout_ms", self.timeout_ms, 0, U32_MAX)

    @property
    def long_poll(self) -> bool:
        return self.previous_lac is not None


@dataclass(frozen=True, slots=True)
class WriteLacRequest:
    """WRITE_LAC: record an explicit LAC for ``ledger``."""

    request_id: int
    master_key: bytes
    ledger: LedgerId
    lac: int

    def __post_init__(self) -> None:
        check_int("request_id", self.request_id, 0, U64_MAX)
        check_bytes("master_key", self.master_key, MASTER_KEY_SIZE)
        _check_ledger(self.ledger)
        check_int("lac", self.lac, -1, I64_MAX)


@dataclass(frozen=True, slots=True)
class BookieInfoRequest:
    """GET_BOOKIE_INFO: ask for free and total disk space."""

    request_id: int

    def __post_init__(self) -> None:
        check_int("request_id", self.request_id, 0, U64_MAX)


# Responses (bookie -> client). entry_id may be −1: a bookie echoes the request's id.


@dataclass(frozen=True, slots=True)
class AddResponse:
    request_id: int
    status: Status
    ledger: LedgerId
    entry_id: int

    def __post_init__(self) -> None:
        check_int("request_id", self.request_id, 0, U64_MAX)
        object.__setattr__(self, "status", _status(self.status))
        _check_ledger(self.ledger)
        check_int("entry_id", self.entry_id, -1, I64_MAX)


@dataclass(frozen=True, slots=True)
class ReadResponse:
    """READ answer; ``entry`` is the stored entry, empty unless the status is EOK."""

    request_id: int
    status: Status
    ledger: LedgerId
    entry_id: int
    entry: bytes = b""

    def __post_init__(self) -> None:
        check_int("request_id", self.request_id, 0, U64_MAX)
        object.__setattr__(self, "status", _status(self.status))
        _check_ledger(self.ledger)
        check_int("entry_id", self.entry_id, -1, I64_MAX)
        check_bytes("entry", self.entry)
        if self.entry and self.status is not Status.EOK:
            raise LocalProtocolError(
                f"entry must be empty unless status is EOK, got {len(self.entry)} bytes"
                f" with {self.status.name}"
            )


@dataclass(frozen=True, slots=True)
class ReadLacResponse:
    """READ_LAC answer: the explicit LAC (−1 if none) and the last entry, which may be empty."""

    request_id: int
    status: Status
    ledger: LedgerId
    lac: int
    last_entry: bytes = b""

    def __post_init__(self) -> None:
        check_int("request_id", self.request_id, 0, U64_MAX)
        object.__setattr__(self, "status", _status(self.status))
        _check_ledger(self.ledger)
        check_int("lac", self.lac, -1, I64_MAX)
        check_bytes("last_entry", self.last_entry)


@dataclass(frozen=True, slots=True)
class WriteLacResponse:
    request_id: int
    status: Status
    ledger: LedgerId

    def __post_init__(self) -> None:
        check_int("request_id", self.request_id, 0, U64_MAX)
        object.__setattr__(self, "status", _status(self.status))
        _check_ledger(self.ledger)


@dataclass(frozen=True, slots=True)
class BookieInfoResponse:
    request_id: int
    status: Status
    free_bytes: int
    total_bytes: int

    def __post_init__(self) -> None:
        check_int("request_id", self.request_id, 0, U64_MAX)
        object.__setattr__(self, "status", _status(self.status))
        check_int("free_bytes", self.free_bytes, 0, U64_MAX)
        check_int("total_bytes", self.total_bytes, 0, U64_MAX)


Request = AddRequest | ReadRequest | ReadLacRequest | WriteLacRequest | BookieInfoRequest
Response = AddResponse | ReadResponse | ReadLacResponse | WriteLacResponse | BookieInfoResponse
Message = Request | Response
