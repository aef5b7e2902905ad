"""Status codes, with Apache BookKeeper's names and values so logs read like BookKeeper's."""

from __future__ import annotations

import enum


class Status(enum.IntEnum):
    """The i32 that starts every response body (docs/protocol.md, "Status codes")."""

    EOK = 0
    ENOLEDGER = 1
    ENOENTRY = 2
    EBADREQ = 100
    EIO = 101
    EUA = 102
    EBADVERSION = 103
    EFENCED = 104
    EREADONLY = 105
    ETOOMANYREQUESTS = 106
    EUNKNOWNLEDGERSTATE = 107
    EINVALIDTERM = 108
