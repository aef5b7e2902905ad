"""Range checks shared by every constructor; errors name the field and the bad value."""

from __future__ import annotations

from .errors import LocalProtocolError

U32_MAX = 2**32 - 1
U64_MAX = 2**64 - 1
I64_MAX = 2**63 - 1
MASTER_KEY_SIZE = 20

BytesLike = bytes | bytearray | memoryview


def check_int(name: str, value: object, lo: int, hi: int) -> None:
    """Reject non-integers (bools included) and integers outside ``[lo, hi]``."""
    if type(value) is int and lo <= value <= hi:  # the common case, kept cheap
        return
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise LocalProtocolError(f"{name} must be an integer in [{lo}, {hi}], got {value!r}")


def check_bytes(name: str, value: object, size: int | None = None) -> None:
    """Require immutable ``bytes`` (messages are hashable values), of ``size`` if given."""
    if not isinstance(value, bytes):
        raise LocalProtocolError(f"{name} must be bytes, got {type(value).__name__}")
    if size is not None and len(value) != size:
        raise LocalProtocolError(f"{name} must be {size} bytes, got {len(value)}: {value!r}")
