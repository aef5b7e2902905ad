"""BP-35 ledger ids: a (scope, id) pair of u64s; scope 0 is a classic 64-bit ledger."""

from __future__ import annotations

import string
from dataclasses import dataclass

from ._checks import U64_MAX, check_int
from .errors import LocalProtocolError

_HEX = frozenset(string.hexdigits)


@dataclass(frozen=True, slots=True, order=True)
class LedgerId:
    """A ledger id as it travels on the wire: ``scope`` is BP-35's ledger-id-msb."""

    scope: int
    id: int

    def __post_init__(self) -> None:
        check_int("scope", self.scope, 0, U64_MAX)
        check_int("id", self.id, 0, U64_MAX)

    @property
    def is_128(self) -> bool:
        """True for a BP-35 ledger, which needs entry format V2."""
        return self.scope != 0

    @property
    def qualified_name(self) -> str:
        """BP-35's hex name: 32 lowercase hex digits, scope first."""
        return f"{self.scope:016x}{self.id:016x}"

    @classmethod
    def parse(cls, value: str | int) -> LedgerId:
        """Build from an int below 2**128 or a string.

        A string of exactly 32 hex digits is a qualified name; any other string must be a
        decimal integer (so "00000000000000000000000000000001" is the qualified name of
        ledger 1, not the decimal 1).
        """
        if isinstance(value, str):
            text = value.strip()
            if len(text) == 32 and _HEX.issuperset(text):
                return cls(int(text[:16], 16), int(text[16:], 16))
            if not text.isdigit() or not text.isascii():
                raise LocalProtocolError(
                    f"ledger id must be 32 hex digits or a decimal integer, got {value!r}"
                )
            value = int(text)
        check_int("ledger id", value, 0, 2**128 - 1)
        return cls(value >> 64, value & U64_MAX)
