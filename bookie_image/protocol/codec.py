"""Frames and the sans-IO Connection: bytes in, typed messages out, no sockets (like h11).

Each opcode has one row in ``_OPS``: its message types, the request flags it allows, and
four small functions that read or write a frame body. Nothing else knows the layouts.
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Callable
from typing import Any, Literal, NamedTuple

from .errors import LocalProtocolError, ProtocolError, RemoteProtocolError
from .ids import LedgerId
from .messages import (
    AddRequest,
    AddResponse,
    BookieInfoRequest,
    BookieInfoResponse,
    Message,
    ReadLacRequest,
    ReadLacResponse,
    ReadRequest,
    ReadResponse,
    Response,
    WriteLacRequest,
    WriteLacResponse,
)
from .status import Status

PROTOCOL_VERSION = 1
MAX_FRAME = 5 * 1024 * 1024 + 1024  # BookKeeper's 5 MiB nettyMaxFrameSizeBytes + headroom

_LENGTH = struct.Struct(">I")
_HEADER = struct.Struct(">BBHQ")  # version, opcode, flags, request_id
_FRAME = struct.Struct(">IBBHQ")  # length prefix + header, for writing
MIN_FRAME = _HEADER.size  # the length prefix counts the header and the body
_COMPACT_AT = 1 << 20  # drop consumed bytes once this many pile up in front of a frame


class Opcode(enum.IntEnum):
    """The frame header's opcode byte (RemoteProtocolError.opcode holds one, or any int)."""

    ADD = 1
    READ = 2
    READ_LAC = 3
    WRITE_LAC = 4
    GET_BOOKIE_INFO = 5


# Request flags (responses carry 0).
RECOVERY_ADD = 0x0001
FENCE_LEDGER = 0x0002
HAS_TERM = 0x0004
LONG_POLL = 0x0008
TRUNCATE = 0x0010


class Role(enum.Enum):
    """Which end a Connection is: a client sends requests, a server sends responses."""

    CLIENT = "client"
    SERVER = "server"


class _NeedData(enum.Enum):
    NEED_DATA = "NEED_DATA"

    def __repr__(self) -> str:
        return self.value


NEED_DATA = _NeedData.NEED_DATA
"""Returned by Connection.next_event when no complete frame is buffered yet."""

Event = Message | Literal[_NeedData.NEED_DATA]

# Body layouts (after the frame header).
_KEY = struct.Struct(">20s")
_I64 = struct.Struct(">q")
_LEDGER = struct.Struct(">QQ")
_READ = struct.Struct(">QQq")  # scope, ledger, entry_id
_LONG_POLL = struct.Struct(">qI")  # previous_lac, timeout_ms
_WRITE_LAC = struct.Struct(">20sQQq")  # master_key, scope, ledger, lac
_STATUS_LEDGER = struct.Struct(">iQQ")  # WRITE_LAC response; also status + two u64s
_STATUS_LEDGER_I64 = struct.Struct(">iQQq")  # ADD, READ, READ_LAC responses


def _expect(body: int, need: int, rest: bool = False) -> None:
    """Check a body size: exactly ``need`` bytes, or at least that many when ``rest``."""
    if body < need or (body > need and not rest):
        exact = "at least" if rest else "exactly"
        raise ProtocolError(f"body must be {exact} {need} bytes, got {body}")


def _tail(buf: bytearray, start: int, end: int) -> bytes:
    """Copy ``buf[start:end]`` once, leaving no view that would pin the buffer."""
    with memoryview(buf) as view:
        return view[start:end].tobytes()


# Readers: (buffer, body start, body end, flags, request_id) -> message


def _read_add_request(buf: bytearray, start: int, end: int, flags: int, rid: int) -> AddRequest:
    entry_at = start + _KEY.size + (_I64.size if flags & HAS_TERM else 0)
    _expect(end - start, entry_at - start, rest=True)
    (key,) = _KEY.unpack_from(buf, start)
    term = _I64.unpack_from(buf, start + _KEY.size)[0] if flags & HAS_TERM else None
    return AddRequest(
        rid,
        key,
        _tail(buf, entry_at, end),
        recovery=bool(flags & RECOVERY_ADD),
        term=term,
        truncate=bool(flags & TRUNCATE),
    )


def _read_read_request(buf: bytearray, start: int, end: int, flags: int, rid: int) -> ReadRequest:
    fence, has_term = bool(flags & FENCE_LEDGER), bool(flags & HAS_TERM)
    _expect(end - start, _READ.size + fence * _KEY.size + has_term * _I64.size)
    scope, ledger, entry_id = _READ.unpack_from(buf, start)
    offset = start + _READ.size
    key = None
    if fence:
        (key,) = _KEY.unpack_from(buf, offset)
        offset += _KEY.size
    term = _I64.unpack_from(buf, offset)[0] if has_term else None
    return ReadRequest(rid, LedgerId(scope, ledger), entry_id, fence, key, term)


def _read_read_lac_request(
    buf: bytearray, start: int, end: int, flags: int, rid: int
) -> ReadLacRequest:
    long_poll = bool(flags & LONG_POLL)
    _expect(end - start, _LEDGER.size + long_poll * _LONG_POLL.size)
    ledger = LedgerId(*_LEDGER.unpack_from(buf, start))
    if not long_poll:
        return ReadLacRequest(rid, ledger)
    previous_lac, timeout_ms = _LONG_POLL.unpack_from(buf, start + _LEDGER.size)
    return ReadLacRequest(rid, ledger, previous_lac, timeout_ms)


def _read_write_lac_request(
    buf: bytearray, start: int, end: int, flags: int, rid: int
) -> WriteLacRequest:
    _expect(end - start, _WRITE_LAC.size)
    key, scope, ledger, lac = _WRITE_LAC.unpack_from(buf, start)
    return WriteLacRequest(rid, key, LedgerId(scope, ledger), lac)


def _read_bookie_info_request(
    buf: bytearray, start: int, end: int, flags: int, rid: int
) -> BookieInfoRequest:
    _expect(end - start, 0)
    return BookieInfoRequest(rid)


def _read_add_response(buf: bytearray, start: int, end: int, flags: int, rid: int) -> AddResponse:
    _expect(end - start, _STATUS_LEDGER_I64.size)
    status, scope, ledger, entry_id = _STATUS_LEDGER_I64.unpack_from(buf, start)
    return AddResponse(rid, status, LedgerId(scope, ledger), entry_id)


def _read_read_response(buf: bytearray, start: int, end: int, flags: int, rid: int) -> ReadResponse:
    _expect(end - start, _STATUS_LEDGER_I64.size, rest=True)
    status, scope, ledger, entry_id = _STATUS_LEDGER_I64.unpack_from(buf, start)
    entry = _tail(buf, start + _STATUS_LEDGER_I64.size, end)
    return ReadResponse(rid, status, LedgerId(scope, ledger), entry_id, entry)


def _read_read_lac_response(
    buf: bytearray, start: int, end: int, flags: int, rid: int
) -> ReadLacResponse:
    _expect(end - start, _STATUS_LEDGER_I64.size, rest=True)
    status, scope, ledger, lac = _STATUS_LEDGER_I64.unpack_from(buf, start)
    last_entry = _tail(buf, start + _STATUS_LEDGER_I64.size, end)
    return ReadLacResponse(rid, status, LedgerId(scope, ledger), lac, last_entry)


def _read_write_lac_response(
    buf: bytearray, start: int, end: int, flags: int, rid: int
) -> WriteLacResponse:
    _expect(end - start, _STATUS_LEDGER.size)
    status, scope, ledger = _STATUS_LEDGER.unpack_from(buf, start)
    return WriteLacResponse(rid, status, LedgerId(scope, ledger))


def _read_bookie_info_response(
    buf: bytearray, start: int, end: int, flags: int, rid: int
) -> BookieInfoResponse:
    _expect(end - start, _STATUS_LEDGER.size)
    return BookieInfoResponse(rid, *_STATUS_LEDGER.unpack_from(buf, start))


# Writers: message -> (flags, body chunks)

_Body = tuple[int, tuple[bytes, ...]]


def _write_add_request(m: AddRequest) -> _Body:
    flags = (RECOVERY_ADD if m.recovery else 0) | (TRUNCATE if m.truncate else 0)
    if m.term is None:
        return flags, (m.master_key, m.entry)
    return flags | HAS_TERM, (m.master_key, _I64.pack(m.term), m.entry)


def _write_read_request(m: ReadRequest) -> _Body:
    flags, chunks = 0, [_READ.pack(m.ledger.scope, m.ledger.id, m.entry_id)]
    if m.fence:
        flags |= FENCE_LEDGER
        chunks.append(m.master_key)  # type: ignore[arg-type]  # checked: fence => key
    if m.term is not None:
        flags |= HAS_TERM
        chunks.append(_I64.pack(m.term))
    return flags, tuple(chunks)


def _write_read_lac_request(m: ReadLacRequest) -> _Body:
    body = _LEDGER.pack(m.ledger.scope, m.ledger.id)
    if m.previous_lac is None:
        return 0, (body,)
    return LONG_POLL, (body, _LONG_POLL.pack(m.previous_lac, m.timeout_ms))


def _write_write_lac_request(m: WriteLacRequest) -> _Body:
    return 0, (_WRITE_LAC.pack(m.master_key, m.ledger.scope, m.ledger.id, m.lac),)


def _write_bookie_info_request(m: BookieInfoRequest) -> _Body:
    return 0, ()


def _write_add_response(m: AddResponse) -> _Body:
    return 0, (_STATUS_LEDGER_I64.pack(m.status, m.ledger.scope, m.ledger.id, m.entry_id),)


def _write_read_response(m: ReadResponse) -> _Body:
    head = _STATUS_LEDGER_I64.pack(m.status, m.ledger.scope, m.ledger.id, m.entry_id)
    return 0, (head, m.entry)


def _write_read_lac_response(m: ReadLacResponse) -> _Body:
    head = _STATUS_LEDGER_I64.pack(m.status, m.ledger.scope, m.ledger.id, m.lac)
    return 0, (head, m.last_entry)


def _write_write_lac_response(m: WriteLacResponse) -> _Body:
    return 0, (_STATUS_LEDGER.pack(m.status, m.ledger.scope, m.ledger.id),)


def _write_bookie_info_response(m: BookieInfoResponse) -> _Body:
    return 0, (_STATUS_LEDGER.pack(m.status, m.free_bytes, m.total_bytes),)


_Reader = Callable[[bytearray, int, int, int, int], Any]
_Writer = Callable[[Any], _Body]
_Refusal = Callable[[int, Status], Response]  # (request_id, status) -> error response
_NO_LEDGER = LedgerId(0, 0)  # what an error response names when the request was unreadable


class _Op(NamedTuple):
    request: type
    request_flags: int
    read_request: _Reader
    write_request: _Writer
    response: type
    read_response: _Reader
    write_response: _Writer
    refuse: _Refusal


_OPS: dict[int, _Op] = {
    Opcode.ADD.value: _Op(
        AddRequest,
        RECOVERY_ADD | HAS_TERM | TRUNCATE,
        _read_add_request,
        _write_add_request,
        AddResponse,
        _read_add_response,
        _write_add_response,
        lambda rid, status: AddResponse(rid, status, _NO_LEDGER, -1),
    ),
    Opcode.READ.value: _Op(
        ReadRequest,
        FENCE_LEDGER | HAS_TERM,
        _read_read_request,
        _write_read_request,
        ReadResponse,
        _read_read_response,
        _write_read_response,
        lambda rid, status: ReadResponse(rid, status, _NO_LEDGER, -1),
    ),
    Opcode.READ_LAC.value: _Op(
        ReadLacRequest,
        LONG_POLL,
        _read_read_lac_request,
        _write_read_lac_request,
        ReadLacResponse,
        _read_read_lac_response,
        _write_read_lac_response,
        lambda rid, status: ReadLacResponse(rid, status, _NO_LEDGER, -1),
    ),
    Opcode.WRITE_LAC.value: _Op(
        WriteLacRequest,
        0,
        _read_write_lac_request,
        _write_write_lac_request,
        WriteLacResponse,
        _read_write_lac_response,
        _write_write_lac_response,
        lambda rid, status: WriteLacResponse(rid, status, _NO_LEDGER),
    ),
    Opcode.GET_BOOKIE_INFO.value: _Op(
        BookieInfoRequest,
        0,
        _read_bookie_info_request,
        _write_bookie_info_request,
        BookieInfoResponse,
        _read_bookie_info_response,
        _write_bookie_info_response,
        lambda rid, status: BookieInfoResponse(rid, status, 0, 0),
    ),
}

# message type -> (opcode, is a request, writer), derived from the one table above
_SENDERS: dict[type, tuple[int, bool, _Writer]] = {}
for _opcode, _op in _OPS.items():
    _SENDERS[_op.request] = (_opcode, True, _op.write_request)
    _SENDERS[_op.response] = (_opcode, False, _op.write_response)


class Connection:
    """One end of a bookie connection, as a pure state machine over bytes.

    Feed received bytes with ``receive_data`` and call ``next_event`` until it returns
    NEED_DATA; ``send`` turns a message into the bytes to write. A server connection reads
    requests and sends responses, a client the reverse. Matching responses to requests by
    ``request_id`` and noticing EOF are the caller's job.

    Errors: a frame with a valid length prefix but bad contents (unknown version, opcode
    or flags, a body of the wrong size, a field out of range) raises RemoteProtocolError
    carrying its ``request_id`` and ``opcode``; that frame is skipped, so the connection
    stays usable and a server can answer with ``error_response(error)``. A length
    prefix below 12 or above MAX_FRAME leaves no way to find the next frame: the error has
    ``request_id`` None, the connection enters an error state, and every later
    ``next_event`` raises RemoteProtocolError (the caller should close it).
    """

    __slots__ = ("_broken", "_buf", "_pos", "_reads_requests", "role")

    def __init__(self, role: Role) -> None:
        if not isinstance(role, Role):
            raise LocalProtocolError(f"role must be Role.CLIENT or Role.SERVER, got {role!r}")
        self.role = role
        self._reads_requests = role is Role.SERVER
        self._buf = bytearray()
        self._pos = 0  # start of the first unconsumed byte in _buf
        self._broken: str | None = None  # why the stream became unreadable

    def receive_data(self, data: bytes | bytearray | memoryview) -> None:
        """Buffer bytes received from the peer (ignored once the stream is unreadable)."""
        if self._broken is None:
            self._buf += data

    def next_event(self) -> Event:
        """The next complete message, or NEED_DATA; see the class docstring for errors."""
        if self._broken is not None:
            raise RemoteProtocolError(f"connection is unusable: {self._broken}")
        buf, pos = self._buf, self._pos
        if len(buf) - pos < _LENGTH.size:
            return self._need_data()
        (length,) = _LENGTH.unpack_from(buf, pos)
        if not MIN_FRAME <= length <= MAX_FRAME:
            self._broken = f"frame length {length} outside [{MIN_FRAME}, {MAX_FRAME}]"
            self._buf = bytearray()
            raise RemoteProtocolError(self._broken)
        end = pos + _LENGTH.size + length
        if len(buf) < end:
            return self._need_data()
        version, opcode, flags, request_id = _HEADER.unpack_from(buf, pos + _LENGTH.size)
        self._pos = end  # consume the frame first: a bad one is skipped, not retried
        try:
            return self._read(buf, pos + _FRAME.size, end, version, opcode, flags, request_id)
        finally:
            if self._pos == len(buf):
                buf.clear()
                self._pos = 0

    def _read(
        self, buf: bytearray, start: int, end: int, version: int, opcode: int, flags: int, rid: int
    ) -> Message:
        if version != PROTOCOL_VERSION:
            detail = f"protocol version {version} is not {PROTOCOL_VERSION}"
            raise self._remote_error(rid, opcode, detail, Status.EBADVERSION)
        op = _OPS.get(opcode)
        if op is None:
            raise self._remote_error(rid, opcode, "unknown opcode")
        if self._reads_requests:
            allowed, reader = op.request_flags, op.read_request
        else:
            allowed, reader = 0, op.read_response
        if flags & ~allowed:
            detail = f"flags {flags:#06x} not allowed (only {allowed:#06x})"
            raise self._remote_error(rid, opcode, detail)
        try:
            return reader(buf, start, end, flags, rid)
        except ProtocolError as exc:
            raise self._remote_error(rid, opcode, str(exc)) from exc

    def _remote_error(
        self, rid: int, opcode: int, detail: str, status: Status = Status.EBADREQ
    ) -> RemoteProtocolError:
        """An error naming the frame ("READ request 7: ...") that a server can answer."""
        name = Opcode(opcode).name if opcode in _OPS else f"opcode {opcode}"
        kind = "request" if self._reads_requests else "response"
        return RemoteProtocolError(
            f"{name} {kind} {rid}: {detail}", request_id=rid, opcode=opcode, status=status
        )

    def _need_data(self) -> Literal[_NeedData.NEED_DATA]:
        """Drop consumed bytes when they are worth moving, then ask for more."""
        if self._pos >= _COMPACT_AT or (self._pos and self._pos * 2 >= len(self._buf)):
            del self._buf[: self._pos]
            self._pos = 0
        return NEED_DATA

    def send(self, message: Message) -> bytes:
        """The bytes of one frame carrying ``message``."""
        sender = _SENDERS.get(type(message))
        if sender is None:
            raise LocalProtocolError(f"cannot send {message!r}: not a protocol message")
        opcode, is_request, write = sender
        if is_request == self._reads_requests:
            kind = "request" if is_request else "response"
            raise LocalProtocolError(
                f"a {self.role.value} connection cannot send {type(message).__name__}"
                f" (a {kind}; {'clients' if is_request else 'servers'} send those)"
            )
        flags, chunks = write(message)
        length = _HEADER.size + sum(map(len, chunks))
        if length > MAX_FRAME:
            raise LocalProtocolError(
                f"{type(message).__name__} {message.request_id} needs a {length}-byte frame,"
                f" over MAX_FRAME ({MAX_FRAME})"
            )
        head = _FRAME.pack(length, PROTOCOL_VERSION, opcode, flags, message.request_id)
        return b"".join((head, *chunks))


def error_response(error: RemoteProtocolError) -> Response | None:
    """The response a server sends for a request it could not decode, carrying the error's
    status (EBADREQ or EBADVERSION), a zero ledger id and entry id / LAC −1; or None when
    the request id or the opcode is unknown, and the server must close the connection.
    """
    op = None if error.opcode is None else _OPS.get(error.opcode)
    if op is None or error.request_id is None:
        return None
    return op.refuse(error.request_id, error.status)
