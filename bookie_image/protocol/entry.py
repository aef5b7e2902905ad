"""Entry formats V1 and V2 (BP-35): what the client writes and the bookie stores verbatim."""

from __future__ import annotations

import struct
from dataclasses import dataclass

from ._checks import I64_MAX, BytesLike, check_int
from .digest import DigestType, compute_digest
from .errors import DigestError, LocalProtocolError, ProtocolError
from .ids import LedgerId

_V1 = struct.Struct(">qqqq")  # ledger_id, entry_id, lac, length
_V2 = struct.Struct(">BQQqqq")  # flags, scope_id, ledger_id, entry_id, lac, length
_V2_MARKER = 0x80  # msb of the first byte: set for V2, clear for V1 (ledger id >= 0)
_V2_VERSION = 0  # the layout above; bits 4-6 of the flags byte


@dataclass(frozen=True, slots=True)
class EntryHeader:
    """The header fields of an encoded entry; ``digest_type`` is None for V1 (not stored)."""

    format: int
    ledger: LedgerId
    entry_id: int
    lac: int
    length: int
    digest_type: DigestType | None

    @property
    def size(self) -> int:
        """Header bytes before the digest: 32 for V1, 41 for V2."""
        return _V1.size if self.format == 1 else _V2.size


@dataclass(frozen=True, slots=True)
class Entry:
    """A decoded entry whose digest has been verified."""

    header: EntryHeader
    payload: bytes


def encode_entry(
    ledger: LedgerId,
    entry_id: int,
    lac: int,
    length: int,
    payload: BytesLike,
    digest_type: DigestType | str | int,
    master_key: bytes | None,
    entry_format: int | None = None,
) -> bytes:
    """Encode one entry; ``entry_format`` None picks V2 for a 128-bit ledger, else V1.

    ``length`` is the ledger's total payload length up to and including this entry.
    """
    digest_type = DigestType.parse(digest_type)
    if not isinstance(ledger, LedgerId):
        raise LocalProtocolError(f"ledger must be a LedgerId, got {ledger!r}")
    check_int("entry_id", entry_id, 0, I64_MAX)
    check_int("lac", lac, -1, I64_MAX)
    check_int("length", length, 0, I64_MAX)
    if entry_format is None:
        entry_format = 2 if ledger.scope else 1
    if entry_format == 1:
        if ledger.scope or ledger.id > I64_MAX:
            raise LocalProtocolError(f"entry format V1 cannot carry {ledger!r}; use V2")
        header = _V1.pack(ledger.id, entry_id, lac, length)
    elif entry_format == 2:
        flags = _V2_MARKER | _V2_VERSION << 4 | digest_type
        header = _V2.pack(flags, ledger.scope, ledger.id, entry_id, lac, length)
    else:
        raise LocalProtocolError(f"entry_format must be 1, 2 or None, got {entry_format!r}")
    return b"".join((header, compute_digest(digest_type, master_key, header, payload), payload))


def peek_entry_header(data: BytesLike) -> EntryHeader:
    """Read an entry's header without checking its digest (what a bookie does on ADD).

    Raises ProtocolError if the bytes cannot be an entry of either format.
    """
    size = len(data)
    if size and data[0] & _V2_MARKER:
        if size < _V2.size:
            raise ProtocolError(f"V2 entry needs at least {_V2.size} bytes, got {size}")
        flags, scope, ledger_id, entry_id, lac, length = _V2.unpack_from(data)
        version = flags >> 4 & 0x7
        if version != _V2_VERSION:
            raise ProtocolError(f"V2 entry version {version} is unknown (flags {flags:#04x})")
        try:
            digest_type: DigestType | None = DigestType(flags & 0xF)
        except ValueError:
            raise ProtocolError(f"V2 entry digest type {flags & 0xF} is unknown") from None
        if size < _V2.size + digest_type.size:
            raise ProtocolError(f"V2 {digest_type.name} entry is too short: {size} bytes")
        entry_format = 2
    else:
        if size < _V1.size:
            raise ProtocolError(f"V1 entry needs at least {_V1.size} bytes, got {size}")
        ledger_id, entry_id, lac, length = _V1.unpack_from(data)
        scope, digest_type, entry_format = 0, None, 1
    if entry_id < 0 or lac < -1 or length < 0:  # upper bounds hold by the struct format
        raise ProtocolError(f"entry header out of range: {entry_id=}, {lac=}, {length=}")
    return EntryHeader(entry_format, LedgerId(scope, ledger_id), entry_id, lac, length, digest_type)


def decode_entry(
    data: BytesLike, digest_type: DigestType | str | int, master_key: bytes | None
) -> Entry:
    """Decode and verify an entry of a ledger using ``digest_type``.

    Raises DigestError when the digest does not match (corrupt bytes, wrong master key, or
    a V2 entry stamped with another digest type) and ProtocolError for unreadable bytes.
    """
    digest_type = DigestType.parse(digest_type)
    header = peek_entry_header(data)
    if header.digest_type not in (None, digest_type):
        raise DigestError(
            f"entry {header.entry_id} of {header.ledger} carries a {header.digest_type.name}"
            f" digest, the ledger uses {digest_type.name}"
        )
    start = header.size
    end = start + digest_type.size
    if len(data) < end:
        raise ProtocolError(f"entry of {len(data)} bytes is shorter than its header and digest")
    with memoryview(data) as view:
        expected = compute_digest(digest_type, master_key, view[:start], view[end:])
        if view[start:end] != expected:
            raise DigestError(
                f"digest mismatch on entry {header.entry_id} of {header.ledger}"
                f" ({digest_type.name}, {len(data)} bytes)"
            )
        return Entry(header, bytes(view[end:]))
