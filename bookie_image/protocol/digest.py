"""Entry digests (CRC32, HMAC-SHA1, CRC32C, DUMMY) and the master key derivation."""

from __future__ import annotations

import enum
import hashlib
import hmac
import struct
import zlib
from collections.abc import Callable

import crc32c

from ._checks import MASTER_KEY_SIZE, BytesLike, check_bytes
from .errors import LocalProtocolError

_U64 = struct.Struct(">Q")
_U32 = struct.Struct(">I")


class DigestType(enum.IntEnum):
    """Digest ids as stored in bits 0-3 of a V2 entry's flags byte."""

    CRC32 = 1
    HMAC_SHA1 = 2
    CRC32C = 3
    DUMMY = 4

    @property
    def size(self) -> int:
        """Bytes the digest occupies between the entry header and the payload."""
        return _SIZES[self]

    @classmethod
    def parse(cls, value: DigestType | int | str) -> DigestType:
        """Accept a member, its value, or a name in any case ("crc32c", "hmac-sha1", "mac")."""
        if isinstance(value, cls):
            return value
        try:
            if isinstance(value, str):
                name = value.strip().upper().replace("-", "_")
                return cls[_ALIASES.get(name, name)]
            return cls(value)
        except (KeyError, ValueError):
            names = ", ".join(m.name.lower() for m in cls)
            raise LocalProtocolError(f"digest type must be one of {names}, got {value!r}") from None


_SIZES = {DigestType.CRC32: 8, DigestType.HMAC_SHA1: 20, DigestType.CRC32C: 4, DigestType.DUMMY: 0}
# BookKeeper's own enum calls HMAC-SHA1 "MAC".
_ALIASES = {"MAC": "HMAC_SHA1", "HMAC": "HMAC_SHA1", "HMACSHA1": "HMAC_SHA1"}


def master_key_for(password: bytes) -> bytes:
    """The 20-byte key a bookie stores per ledger: SHA1(b"ledger" + password)."""
    check_bytes("password", password)
    return hashlib.sha1(b"ledger" + password).digest()


def _crc32(key: bytes | None, header: BytesLike, payload: BytesLike) -> bytes:
    return _U64.pack(zlib.crc32(payload, zlib.crc32(header)))


def _crc32c(key: bytes | None, header: BytesLike, payload: BytesLike) -> bytes:
    return _U32.pack(crc32c.crc32c(payload, crc32c.crc32c(header)))


def _hmac_sha1(key: bytes | None, header: BytesLike, payload: BytesLike) -> bytes:
    if not isinstance(key, bytes) or len(key) != MASTER_KEY_SIZE:
        raise LocalProtocolError(f"HMAC_SHA1 needs the 20-byte master key, got {key!r}")
    mac = hmac.new(key, header, hashlib.sha1)
    mac.update(payload)
    return mac.digest()


def _dummy(key: bytes | None, header: BytesLike, payload: BytesLike) -> bytes:
    return b""


_DIGESTERS: dict[DigestType, Callable[[bytes | None, BytesLike, BytesLike], bytes]] = {
    DigestType.CRC32: _crc32,
    DigestType.HMAC_SHA1: _hmac_sha1,
    DigestType.CRC32C: _crc32c,
    DigestType.DUMMY: _dummy,
}


def compute_digest(
    digest_type: DigestType, master_key: bytes | None, header: BytesLike, payload: BytesLike
) -> bytes:
    """The digest of header followed by payload (the key matters only for HMAC_SHA1)."""
    return _DIGESTERS[digest_type](master_key, header, payload)
