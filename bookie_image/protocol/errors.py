"""One exception family for the codec, split by whose fault the bad bytes are (as in h11)."""

from __future__ import annotations

from .status import Status


class ProtocolError(Exception):
    """Bytes or values that break docs/protocol.md; raised as-is for malformed entries."""


class LocalProtocolError(ProtocolError, ValueError):
    """We were asked to build or send something the protocol forbids: a bug on our side.

    Also a ``ValueError``, because it always means an argument was out of range.
    """


class RemoteProtocolError(ProtocolError):
    """The peer sent bytes we cannot decode.

    ``request_id`` and ``opcode`` are set whenever the frame header could be read, so a
    server can answer that request with ``status`` (EBADREQ, or EBADVERSION for an unknown
    protocol version) and keep serving; with ``request_id`` None it must close instead.
    """

    def __init__(
        self,
        message: str,
        *,
        request_id: int | None = None,
        opcode: int | None = None,
        status: Status = Status.EBADREQ,
    ) -> None:
        super().__init__(message)
        self.request_id = request_id
        self.opcode = opcode
        self.status = status


class DigestError(ProtocolError):
    """An entry's digest does not match its bytes (corruption, or the wrong master key)."""
