"""Entry formats, digests and ledger ids of bookie_image.protocol (docs/protocol.md)."""

import hashlib
import hmac
import struct
import zlib

import crc32c
import pytest
from hypothesis import given
from hypothesis import strategies as st

from bookie_image.protocol import (
    DigestError,
    DigestType,
    LedgerId,
    LocalProtocolError,
    ProtocolError,
    decode_entry,
    encode_entry,
    master_key_for,
    peek_entry_header,
)

U64 = st.integers(0, 2**64 - 1)
I64 = st.integers(0, 2**63 - 1)
KEY = master_key_for(b"secret")

ledgers_64 = st.builds(LedgerId, st.just(0), I64)
ledgers_128 = st.builds(LedgerId, st.integers(1, 2**64 - 1), U64)


@st.composite
def entries(draw):
    """Arguments of encode_entry for either format, with any digest type."""
    entry_format = draw(st.sampled_from([None, 1, 2]))
    return {
        "ledger": draw(ledgers_64 if entry_format == 1 else ledgers_64 | ledgers_128),
        "entry_id": draw(I64),
        "lac": draw(st.integers(-1, 2**63 - 1)),
        "length": draw(I64),
        "payload": draw(st.binary(max_size=300)),
        "digest_type": draw(st.sampled_from(DigestType)),
        "master_key": draw(st.binary(min_size=20, max_size=20)),
        "entry_format": entry_format,
    }


@given(entries())
def test_entry_round_trip(args):
    data = encode_entry(**args)
    entry = decode_entry(data, args["digest_type"], args["master_key"])
    expected_format = args["entry_format"] or (2 if args["ledger"].scope else 1)
    header = entry.header
    assert entry.payload == args["payload"]
    assert (header.format, header.ledger, header.entry_id, header.lac, header.length) == (
        expected_format,
        args["ledger"],
        args["entry_id"],
        args["lac"],
        args["length"],
    )
    assert header.digest_type == (args["digest_type"] if expected_format == 2 else None)
    assert peek_entry_header(data) == header
    # The msb of the first byte alone tells the formats apart.
    assert bool(data[0] & 0x80) == (expected_format == 2)
    assert len(data) == header.size + args["digest_type"].size + len(args["payload"])


def test_v1_layout_is_byte_exact():
    data = encode_entry(LedgerId(0, 5), 1, 0, 9, b"xyz", DigestType.CRC32, None)
    header = bytes.fromhex("0000000000000005000000000000000100000000000000000000000000000009")
    assert data == header + struct.pack(">Q", zlib.crc32(header + b"xyz")) + b"xyz"


def test_v2_layout_is_byte_exact():
    ledger = LedgerId(0x0102030405060708, 0x1112131415161718)
    data = encode_entry(ledger, 2, 1, 6, b"abcdef", DigestType.CRC32C, None)
    header = bytes.fromhex(
        "83"  # 0x80 | version 0 << 4 | CRC32C (3)
        "0102030405060708"
        "1112131415161718"
        "0000000000000002"
        "0000000000000001"
        "0000000000000006"
    )
    assert len(header) == 41
    assert data == header + struct.pack(">I", crc32c.crc32c(header + b"abcdef")) + b"abcdef"


def test_hmac_is_keyed_with_the_master_key():
    data = encode_entry(LedgerId(0, 1), 0, -1, 1, b"p", DigestType.HMAC_SHA1, KEY)
    assert data[32:52] == hmac.new(KEY, data[:32] + b"p", hashlib.sha1).digest()


def test_default_format_is_v2_only_for_128_bit_ids():
    assert encode_entry(LedgerId(0, 1), 0, -1, 0, b"", "dummy", None)[0] == 0
    assert encode_entry(LedgerId(1, 1), 0, -1, 0, b"", "dummy", None)[0] == 0x84
    assert encode_entry(LedgerId(0, 1), 0, -1, 0, b"", "dummy", None, entry_format=2)[0] == 0x84


@given(entries(), st.data())
def test_flipped_payload_or_digest_bit_is_a_digest_error(args, data):
    encoded = encode_entry(**args)
    header_size = peek_entry_header(encoded).size
    if args["digest_type"] is DigestType.DUMMY or len(encoded) == header_size:
        return
    position = data.draw(st.integers(header_size, len(encoded) - 1))
    corrupted = bytearray(encoded)
    corrupted[position] ^= 1 << data.draw(st.integers(0, 7))
    with pytest.raises(DigestError):
        decode_entry(bytes(corrupted), args["digest_type"], args["master_key"])


@given(entries(), st.data())
def test_any_flipped_header_bit_is_detected(args, data):
    encoded = encode_entry(**args)
    if args["digest_type"] is DigestType.DUMMY:
        return
    corrupted = bytearray(encoded)
    corrupted[data.draw(st.integers(0, peek_entry_header(encoded).size - 1))] ^= 1 << data.draw(
        st.integers(0, 7)
    )
    with pytest.raises(ProtocolError):  # DigestError, or garbage once the format bit flips
        decode_entry(bytes(corrupted), args["digest_type"], args["master_key"])


def test_wrong_master_key_for_hmac_is_a_digest_error():
    data = encode_entry(LedgerId(0, 1), 0, -1, 1, b"p", "hmac_sha1", KEY)
    with pytest.raises(DigestError, match="digest mismatch"):
        decode_entry(data, "hmac_sha1", master_key_for(b"other"))


def test_v2_entry_of_another_digest_type_is_a_digest_error():
    data = encode_entry(LedgerId(3, 1), 0, -1, 1, b"p", DigestType.CRC32, None)
    with pytest.raises(DigestError, match="CRC32 digest, the ledger uses CRC32C"):
        decode_entry(data, DigestType.CRC32C, None)


@pytest.mark.parametrize(
    ("data", "match"),
    [
        (b"", "V1 entry needs at least 32 bytes, got 0"),
        (bytes(31), "V1 entry needs at least 32 bytes"),
        (b"\x81" + bytes(39), "V2 entry needs at least 41 bytes"),
        (b"\xf1" + bytes(60), "V2 entry version 7 is unknown"),
        (b"\x85" + bytes(60), "V2 entry digest type 5 is unknown"),
        (b"\x82" + bytes(50), "V2 HMAC_SHA1 entry is too short"),
        (bytes(8) + b"\xff" * 8 + bytes(16), "out of range: entry_id=-1"),
        (bytes(16) + b"\xff" * 7 + b"\xfe" + bytes(8), "lac=-2"),
    ],
)
def test_garbage_is_a_protocol_error(data, match):
    with pytest.raises(ProtocolError, match=match):
        peek_entry_header(data)


@pytest.mark.parametrize("wrap", [bytes, bytearray, memoryview])
def test_decode_accepts_any_bytes_like(wrap):
    data = encode_entry(LedgerId(2, 1), 0, -1, 2, b"hi", "crc32c", None)
    assert decode_entry(wrap(data), "crc32c", None).payload == b"hi"
    assert peek_entry_header(wrap(data)).ledger == LedgerId(2, 1)


def test_v1_entry_shorter_than_its_digest():
    with pytest.raises(ProtocolError, match="shorter than its header and digest"):
        decode_entry(bytes(32 + 7), DigestType.CRC32, None)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"entry_id": -1}, "entry_id must be an integer in .0, .*got -1"),
        ({"lac": -2}, "lac must be"),
        ({"length": True}, "length must be"),
        ({"ledger": 5}, "ledger must be a LedgerId"),
        ({"ledger": LedgerId(1, 1), "entry_format": 1}, "V1 cannot carry"),
        ({"ledger": LedgerId(0, 2**63)}, "V1 cannot carry"),
        ({"entry_format": 3}, "entry_format must be 1, 2 or None, got 3"),
        ({"digest_type": "md5"}, "digest type must be one of .*got 'md5'"),
        ({"digest_type": "hmac_sha1", "master_key": None}, "HMAC_SHA1 needs the 20-byte"),
    ],
)
def test_encode_rejects_bad_arguments(kwargs, match):
    args = {
        "ledger": LedgerId(0, 1),
        "entry_id": 0,
        "lac": -1,
        "length": 0,
        "payload": b"",
        "digest_type": "crc32",
        "master_key": KEY,
    } | kwargs
    with pytest.raises(LocalProtocolError, match=match):
        encode_entry(**args)


def test_master_key_is_sha1_of_ledger_and_password():
    assert master_key_for(b"pw") == hashlib.sha1(b"ledgerpw").digest()
    assert len(master_key_for(b"")) == 20
    with pytest.raises(LocalProtocolError, match="password must be bytes"):
        master_key_for("pw")


@pytest.mark.parametrize(
    ("text", "member"),
    [
        ("crc32", DigestType.CRC32),
        ("CRC32C", DigestType.CRC32C),
        ("hmac-sha1", DigestType.HMAC_SHA1),
        ("mac", DigestType.HMAC_SHA1),
        ("dummy", DigestType.DUMMY),
        (3, DigestType.CRC32C),
        (DigestType.DUMMY, DigestType.DUMMY),
    ],
)
def test_digest_type_parse(text, member):
    assert DigestType.parse(text) is member


def test_digest_sizes():
    assert {t.name: t.size for t in DigestType} == {
        "CRC32": 8,
        "HMAC_SHA1": 20,
        "CRC32C": 4,
        "DUMMY": 0,
    }
    assert [int(t) for t in DigestType] == [1, 2, 3, 4]


@given(U64, U64)
def test_ledger_id_qualified_name_round_trip(scope, ledger_id):
    ledger = LedgerId(scope, ledger_id)
    assert len(ledger.qualified_name) == 32
    assert ledger.qualified_name == ledger.qualified_name.lower()
    assert LedgerId.parse(ledger.qualified_name) == ledger
    assert LedgerId.parse(scope << 64 | ledger_id) == ledger
    assert ledger.is_128 == (scope != 0)


def test_ledger_id_parse():
    assert LedgerId(1, 2).qualified_name == "00000000000000010000000000000002"
    assert LedgerId.parse("42") == LedgerId(0, 42)
    assert LedgerId.parse(str(2**64 + 3)) == LedgerId(1, 3)
    assert LedgerId.parse("0" * 31 + "a") == LedgerId(0, 10)
    for bad in ("x1", "-1", "0x10", "", 2**128, -1):
        with pytest.raises(LocalProtocolError, match="ledger id"):
            LedgerId.parse(bad)


def test_ledger_id_rejects_out_of_range_parts():
    with pytest.raises(LocalProtocolError, match=r"scope must be an integer in .*got -1"):
        LedgerId(-1, 0)
    with pytest.raises(LocalProtocolError, match=f"id must be .*got {2**64}"):
        LedgerId(0, 2**64)
