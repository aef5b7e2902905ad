"""Frames, messages and the sans-IO Connection of bookie_image.protocol (docs/protocol.md)."""

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

import bookie_image.protocol as protocol
from bookie_image.protocol import (
    MAX_FRAME,
    NEED_DATA,
    PROTOCOL_VERSION,
    AddRequest,
    AddResponse,
    BookieInfoRequest,
    BookieInfoResponse,
    Connection,
    DigestType,
    LedgerId,
    LocalProtocolError,
    ReadLacRequest,
    ReadLacResponse,
    ReadRequest,
    ReadResponse,
    RemoteProtocolError,
    Role,
    Status,
    WriteLacRequest,
    WriteLacResponse,
    encode_entry,
    error_response,
)

U32 = st.integers(0, 2**32 - 1)
U64 = st.integers(0, 2**64 - 1)
I64 = st.integers(0, 2**63 - 1)
LAC = st.integers(-1, 2**63 - 1)
KEYS = st.binary(min_size=20, max_size=20)
TERMS = st.none() | I64
LEDGERS = st.builds(LedgerId, st.just(0) | U64, U64)
STATUSES = st.sampled_from(Status)
KEY = bytes(range(20))


@st.composite
def encoded_entries(draw):
    ledger = draw(LEDGERS.filter(lambda ledger: ledger.scope or ledger.id < 2**63))
    return encode_entry(
        ledger,
        draw(I64),
        draw(LAC),
        draw(I64),
        draw(st.binary(max_size=200)),
        draw(st.sampled_from(DigestType)),
        KEY,
    )


@st.composite
def read_requests(draw):
    fence = draw(st.booleans())
    key = draw(KEYS) if fence else None
    return ReadRequest(draw(U64), draw(LEDGERS), draw(LAC), fence, key, draw(TERMS))


@st.composite
def read_lac_requests(draw):
    if draw(st.booleans()):
        return ReadLacRequest(draw(U64), draw(LEDGERS))
    return ReadLacRequest(draw(U64), draw(LEDGERS), draw(LAC), draw(U32))


@st.composite
def read_responses(draw):
    status = draw(STATUSES)
    entry = draw(encoded_entries() | st.just(b"")) if status is Status.EOK else b""
    return ReadResponse(draw(U64), status, draw(LEDGERS), draw(LAC), entry)


requests = st.one_of(
    st.builds(AddRequest, U64, KEYS, encoded_entries(), st.booleans(), TERMS, st.booleans()),
    read_requests(),
    read_lac_requests(),
    st.builds(WriteLacRequest, U64, KEYS, LEDGERS, LAC),
    st.builds(BookieInfoRequest, U64),
)
responses = st.one_of(
    st.builds(AddResponse, U64, STATUSES, LEDGERS, LAC),
    read_responses(),
    st.builds(ReadLacResponse, U64, STATUSES, LEDGERS, LAC, encoded_entries() | st.just(b"")),
    st.builds(WriteLacResponse, U64, STATUSES, LEDGERS),
    st.builds(BookieInfoResponse, U64, STATUSES, U64, U64),
)


def pair():
    return Connection(Role.CLIENT), Connection(Role.SERVER)


def drain(connection):
    """Every complete message buffered in ``connection``."""
    out = []
    while (event := connection.next_event()) is not NEED_DATA:
        out.append(event)
    return out


def frame(opcode, body=b"", *, flags=0, request_id=7, version=PROTOCOL_VERSION, length=None):
    """A hand-built frame, so tests can say things the codec would refuse to send."""
    length = 12 + len(body) if length is None else length
    return struct.pack(">IBBHQ", length, version, opcode, flags, request_id) + body


def test_all_is_the_public_api():
    assert sorted(protocol.__all__) == sorted(
        [
            "Status",
            "LedgerId",
            "DigestType",
            "master_key_for",
            "EntryHeader",
            "Entry",
            "encode_entry",
            "decode_entry",
            "peek_entry_header",
            "AddRequest",
            "ReadRequest",
            "ReadLacRequest",
            "WriteLacRequest",
            "BookieInfoRequest",
            "AddResponse",
            "ReadResponse",
            "ReadLacResponse",
            "WriteLacResponse",
            "BookieInfoResponse",
            "Connection",
            "Role",
            "NEED_DATA",
            "ProtocolError",
            "LocalProtocolError",
            "RemoteProtocolError",
            "DigestError",
            "MAX_FRAME",
            "PROTOCOL_VERSION",
            "error_response",
        ]
    )
    for name in protocol.__all__:
        assert getattr(protocol, name) is not None


def test_constants_and_status_values():
    assert (MAX_FRAME, PROTOCOL_VERSION) == (5 * 1024 * 1024 + 1024, 1)
    assert {s.name: s.value for s in Status} == {
        "EOK": 0,
        "ENOLEDGER": 1,
        "ENOENTRY": 2,
        "EBADREQ": 100,
        "EIO": 101,
        "EUA": 102,
        "EBADVERSION": 103,
        "EFENCED": 104,
        "EREADONLY": 105,
        "ETOOMANYREQUESTS": 106,
        "EUNKNOWNLEDGERSTATE": 107,
        "EINVALIDTERM": 108,
    }
    assert repr(NEED_DATA) == "NEED_DATA"


@given(requests)
def test_request_round_trip(message):
    client, server = pair()
    server.receive_data(client.send(message))
    assert drain(server) == [message]


@given(responses)
def test_response_round_trip(message):
    client, server = pair()
    client.receive_data(server.send(message))
    assert drain(client) == [message]
    assert type(message.status) is Status


@given(st.lists(requests, max_size=8), st.data())
def test_chunking_never_changes_what_is_decoded(messages, data):
    client, _ = pair()
    stream = b"".join(client.send(m) for m in messages)

    whole = Connection(Role.SERVER)
    whole.receive_data(stream)
    assert drain(whole) == messages

    byte_by_byte = Connection(Role.SERVER)
    decoded = []
    for i in range(len(stream)):
        byte_by_byte.receive_data(stream[i : i + 1])
        decoded += drain(byte_by_byte)
    assert decoded == messages

    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=10)))
    chunked = Connection(Role.SERVER)
    decoded = []
    for start, end in zip([0, *cuts], [*cuts, len(stream)], strict=True):
        chunked.receive_data(stream[start:end])
        decoded += drain(chunked)
    assert decoded == messages


def test_truncated_frame_is_need_data_not_an_error():
    client, _ = pair()
    entry = encode_entry(LedgerId(0, 1), 0, -1, 3, b"abc", DigestType.CRC32, None)
    data = client.send(AddRequest(1, KEY, entry))
    for cut in range(len(data)):
        server = Connection(Role.SERVER)
        server.receive_data(data[:cut])
        assert server.next_event() is NEED_DATA
        server.receive_data(data[cut:])
        assert server.next_event() == AddRequest(1, KEY, entry)


def test_large_frames_arriving_in_chunks():
    client, server = pair()
    entry = encode_entry(LedgerId(0, 1), 0, -1, 1, bytes(MAX_FRAME - 200), DigestType.DUMMY, None)
    message = AddRequest(1, KEY, entry)
    data = client.send(message) * 3
    decoded = []
    for i in range(0, len(data), 65536):
        server.receive_data(data[i : i + 65536])
        decoded += drain(server)
    assert decoded == [message] * 3


def test_add_frame_is_byte_exact():
    # docs/protocol.md: ADD request, RECOVERY_ADD, with a V1 DUMMY entry (ledger 5, entry 0).
    entry = (
        bytes.fromhex("00000000000000050000000000000000ffffffffffffffff0000000000000003") + b"abc"
    )
    expected = bytes.fromhex("00000043010100010000000000000007") + b"\x11" * 20 + entry
    message = AddRequest(7, b"\x11" * 20, entry, recovery=True)
    client, server = pair()
    assert client.send(message) == expected
    server.receive_data(expected)
    assert server.next_event() == message
    assert message.header.ledger == LedgerId(0, 5)
    assert message.header.lac == -1


def test_read_frame_is_byte_exact():
    # READ of entry -1 of ledger (scope 1, id 2), fencing, with a term.
    expected = (
        bytes.fromhex(
            "0000004001020006000000000000000900000000000000010000000000000002ffffffffffffffff"
        )
        + b"\x22" * 20
        + bytes.fromhex("0000000000000004")
    )
    message = ReadRequest(9, LedgerId(1, 2), -1, fence=True, master_key=b"\x22" * 20, term=4)
    client, server = pair()
    assert client.send(message) == expected
    server.receive_data(expected)
    assert server.next_event() == message


def test_read_response_frame_is_byte_exact():
    expected = bytes.fromhex(
        "0000002801020000000000000000000900000002000000000000000000000000000000050000000000000003"
    )
    client, server = pair()
    message = ReadResponse(9, Status.ENOENTRY, LedgerId(0, 5), 3)
    assert server.send(message) == expected
    client.receive_data(expected)
    assert client.next_event() == message


RESPONSE_TYPES = {
    1: AddResponse,
    2: ReadResponse,
    3: ReadLacResponse,
    4: WriteLacResponse,
    5: BookieInfoResponse,
}
GOOD_READ = frame(2, struct.pack(">QQq", 0, 1, 0), request_id=99)


@pytest.mark.parametrize(
    ("data", "opcode", "status", "match"),
    [
        (frame(9), 9, Status.EBADREQ, "opcode 9 request 7: unknown opcode"),
        (frame(5, version=2), 5, Status.EBADVERSION, "protocol version 2 is not 1"),
        (frame(5, b"x"), 5, Status.EBADREQ, "body must be exactly 0 bytes, got 1"),
        (frame(4, bytes(43)), 4, Status.EBADREQ, "WRITE_LAC request 7: body must be exactly 44"),
        (frame(2, bytes(23)), 2, Status.EBADREQ, "body must be exactly 24"),
        (frame(2, bytes(24), flags=0x0002), 2, Status.EBADREQ, "exactly 44 bytes, got 24"),
        (frame(2, bytes(24), flags=0x0001), 2, Status.EBADREQ, "flags 0x0001 not allowed"),
        (frame(3, bytes(16), flags=0x0008), 3, Status.EBADREQ, "exactly 28 bytes"),
        (frame(1, bytes(19)), 1, Status.EBADREQ, "ADD request 7: body must be at least 20"),
        (frame(1, bytes(40)), 1, Status.EBADREQ, "entry is not an encoded entry: V1 entry"),
        (frame(1, KEY + b"\x90" + bytes(60)), 1, Status.EBADREQ, "V2 entry version 1"),
        (
            frame(2, struct.pack(">QQq", 0, 1, -2)),
            2,
            Status.EBADREQ,
            "READ request 7: entry_id must be an integer in \\[-1, .*got -2",
        ),
        (
            frame(4, struct.pack(">20sQQq", KEY, 0, 1, -5)),
            4,
            Status.EBADREQ,
            "lac must be .*got -5",
        ),
    ],
)
def test_bad_request_frames_name_their_request_and_are_skipped(data, opcode, status, match):
    server = Connection(Role.SERVER)
    server.receive_data(data + GOOD_READ)
    with pytest.raises(RemoteProtocolError, match=match) as caught:
        server.next_event()
    assert (caught.value.request_id, caught.value.opcode, caught.value.status) == (
        7,
        opcode,
        status,
    )
    assert server.next_event() == ReadRequest(99, LedgerId(0, 1), 0)
    assert server.next_event() is NEED_DATA
    # The server answers what it could not read, if the opcode says how.
    reply = error_response(caught.value)
    if opcode == 9:
        assert reply is None
    else:
        client = Connection(Role.CLIENT)
        client.receive_data(server.send(reply))
        answer = client.next_event()
        assert (type(answer), answer.request_id, answer.status) == (
            RESPONSE_TYPES[opcode],
            7,
            status,
        )


@pytest.mark.parametrize(
    ("data", "match"),
    [
        (frame(1, struct.pack(">iQQq", 42, 0, 1, 0)), "status must be a Status, got 42"),
        (frame(1, struct.pack(">iQQq", 0, 0, 1, 0), flags=1), "flags 0x0001 not allowed"),
        (frame(2, struct.pack(">iQQq", 2, 0, 1, 0) + b"x"), "entry must be empty unless"),
        (frame(5, bytes(21)), "GET_BOOKIE_INFO response 7: body must be exactly 20"),
    ],
)
def test_bad_response_frames(data, match):
    client = Connection(Role.CLIENT)
    client.receive_data(data + frame(5, struct.pack(">iQQ", 0, 1, 2), request_id=8))
    with pytest.raises(RemoteProtocolError, match=match) as caught:
        client.next_event()
    assert caught.value.request_id == 7
    assert client.next_event() == BookieInfoResponse(8, Status.EOK, 1, 2)


@pytest.mark.parametrize("length", [0, 11, MAX_FRAME + 1, 2**32 - 1])
def test_length_prefix_out_of_range_breaks_the_connection(length):
    server = Connection(Role.SERVER)
    server.receive_data(frame(5, length=length) + GOOD_READ)
    with pytest.raises(RemoteProtocolError, match=f"frame length {length} outside") as caught:
        server.next_event()
    assert caught.value.request_id is None
    assert caught.value.opcode is None
    assert error_response(caught.value) is None
    server.receive_data(GOOD_READ)
    for _ in range(2):
        with pytest.raises(RemoteProtocolError, match="connection is unusable: frame length"):
            server.next_event()


def test_length_prefix_is_checked_before_the_frame_arrives():
    server = Connection(Role.SERVER)
    server.receive_data(struct.pack(">I", MAX_FRAME + 1))
    with pytest.raises(RemoteProtocolError):
        server.next_event()


def test_frame_of_exactly_max_frame_is_accepted():
    entry = encode_entry(LedgerId(0, 1), 0, -1, 0, bytes(MAX_FRAME - 12 - 20 - 32), "dummy", None)
    client, server = pair()
    data = client.send(AddRequest(1, KEY, entry))
    assert struct.unpack(">I", data[:4])[0] == MAX_FRAME
    server.receive_data(data)
    assert server.next_event().entry == entry
    with pytest.raises(LocalProtocolError, match="over MAX_FRAME"):
        client.send(AddRequest(1, KEY, entry + b"x"))


def test_each_role_sends_only_its_own_kind():
    client, server = pair()
    with pytest.raises(LocalProtocolError, match="a server connection cannot send ReadRequest"):
        server.send(ReadRequest(1, LedgerId(0, 1), 0))
    with pytest.raises(LocalProtocolError, match="a client connection cannot send AddResponse"):
        client.send(AddResponse(1, Status.EOK, LedgerId(0, 1), 0))
    with pytest.raises(LocalProtocolError, match="not a protocol message"):
        client.send("hello")
    with pytest.raises(LocalProtocolError, match="role must be"):
        Connection("client")


ENTRY = encode_entry(LedgerId(0, 1), 0, -1, 0, b"", "crc32", None)


@pytest.mark.parametrize(
    ("build", "match"),
    [
        (lambda: AddRequest(-1, KEY, ENTRY), "request_id must be an integer in .*got -1"),
        (lambda: AddRequest(2**64, KEY, ENTRY), "request_id must be"),
        (lambda: AddRequest(1, KEY[:19], ENTRY), "master_key must be 20 bytes, got 19"),
        (lambda: AddRequest(1, KEY, bytearray(ENTRY)), "entry must be bytes, got bytearray"),
        (lambda: AddRequest(1, KEY, b"short"), "entry is not an encoded entry"),
        (lambda: AddRequest(1, KEY, ENTRY, term=-1), "term must be"),
        (lambda: ReadRequest(1, LedgerId(0, 1), 0, fence=True), "master_key must be bytes"),
        (lambda: ReadRequest(1, LedgerId(0, 1), 0, master_key=KEY), "only with fence=True"),
        (lambda: ReadRequest(1, (0, 1), 0), "ledger must be a LedgerId, got \\(0, 1\\)"),
        (lambda: ReadRequest(1, LedgerId(0, 1), -2), "entry_id must be"),
        (lambda: ReadLacRequest(1, LedgerId(0, 1), 3), "previous_lac and timeout_ms go together"),
        (lambda: ReadLacRequest(1, LedgerId(0, 1), 3, 2**32), "timeout_ms must be"),
        (lambda: WriteLacRequest(1, KEY, LedgerId(0, 1), -2), "lac must be"),
        (lambda: AddResponse(1, 7, LedgerId(0, 1), 0), "status must be a Status, got 7"),
        (lambda: ReadResponse(1, Status.EIO, LedgerId(0, 1), 0, ENTRY), "empty unless"),
        (lambda: BookieInfoResponse(1, Status.EOK, -1, 0), "free_bytes must be"),
    ],
)
def test_messages_reject_bad_fields(build, match):
    with pytest.raises(LocalProtocolError, match=match):
        build()


def test_messages_are_frozen_and_slotted():
    message = BookieInfoRequest(1)
    with pytest.raises(AttributeError):
        message.request_id = 2
    assert not hasattr(message, "__dict__")
    assert AddResponse(1, 0, LedgerId(0, 1), 0).status is Status.EOK


@given(st.sampled_from(Role), st.lists(requests | responses, max_size=4), st.data())
def test_corrupted_streams_raise_only_remote_protocol_errors(role, messages, data):
    """Whatever the peer sends, the codec answers with messages or RemoteProtocolError."""
    stream = bytearray()
    for message in messages:
        is_request = type(message).__name__.endswith("Request")
        stream += Connection(Role.CLIENT if is_request else Role.SERVER).send(message)
    for _ in range(data.draw(st.integers(0, 3))):
        if stream:
            stream[data.draw(st.integers(0, len(stream) - 1))] = data.draw(st.integers(0, 255))
    stream += data.draw(st.binary(max_size=40))
    connection = Connection(role)
    connection.receive_data(stream)
    for _ in range(len(messages) + 50):
        try:
            if connection.next_event() is NEED_DATA:
                break
        except RemoteProtocolError:
            pass
