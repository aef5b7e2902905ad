"""The bkchaos wire protocol (docs/protocol.md) as a sans-IO codec: no sockets here.

This module only re-exports; ``__all__`` is the public API and is checked by a test.
"""

from .codec import MAX_FRAME, NEED_DATA, PROTOCOL_VERSION, Connection, Role, error_response
from .digest import DigestType, master_key_for
from .entry import Entry, EntryHeader, decode_entry, encode_entry, peek_entry_header
from .errors import DigestError, LocalProtocolError, ProtocolError, RemoteProtocolError
from .ids import LedgerId
from .messages import (
    AddRequest,
    AddResponse,
    BookieInfoRequest,
    BookieInfoResponse,
    ReadLacRequest,
    ReadLacResponse,
    ReadRequest,
    ReadResponse,
    WriteLacRequest,
    WriteLacResponse,
)
from .status import Status

__all__ = [
    "MAX_FRAME",
    "NEED_DATA",
    "PROTOCOL_VERSION",
    "AddRequest",
    "AddResponse",
    "BookieInfoRequest",
    "BookieInfoResponse",
    "Connection",
    "DigestError",
    "DigestType",
    "Entry",
    "EntryHeader",
    "LedgerId",
    "LocalProtocolError",
    "ProtocolError",
    "ReadLacRequest",
    "ReadLacResponse",
    "ReadRequest",
    "ReadResponse",
    "RemoteProtocolError",
    "Role",
    "Status",
    "WriteLacRequest",
    "WriteLacResponse",
    "decode_entry",
    "encode_entry",
    "error_response",
    "master_key_for",
    "peek_entry_header",
]
