"""Ledger metadata as data: JSON round trip and fragment lookup (no ZooKeeper)."""

import json
from dataclasses import replace

import pytest

from bookie_image.client.metadata import LedgerMetadata, LedgerState, ledger_name

BASE = LedgerMetadata(
    ledger=42,
    ensemble_size=3,
    write_quorum=2,
    ack_quorum=2,
    digest="CRC32C",
    password_hash="ab",
    ensembles=((0, ("a:1", "b:1", "c:1")),),
)


def test_json_round_trip_keeps_every_field() -> None:
    full = replace(
        BASE.with_ensemble(7, ("a:1", "d:1", "c:1")),
        scope=9,
        state=LedgerState.CLOSED,
        last_entry_id=11,
        length=99,
        ctime_ms=5,
        custom={"k": b"\x00\xff"},
        unbounded=True,
        term=3,
        noops=(4,),
        max_fragment_entries=100,
        guaranteed_write_quorum=True,
    )
    assert LedgerMetadata.from_json(full.to_json()) == full


def test_metadata_written_before_guaranteed_write_quorum_reads_as_without_it() -> None:
    doc = json.loads(BASE.to_json())
    del doc["guaranteed_write_quorum"]
    assert LedgerMetadata.from_json(json.dumps(doc).encode()) == BASE


def test_unknown_format_is_refused() -> None:
    with pytest.raises(ValueError, match="format"):
        LedgerMetadata.from_json(b'{"format": 99}')


def test_fragments() -> None:
    m = BASE.with_ensemble(5, ("a:1", "d:1", "c:1")).with_ensemble(9, ("e:1", "d:1", "c:1"))
    assert [m.ensemble_at(e)[0] for e in (0, 4, 5, 8, 9, 100)] == [0, 0, 5, 5, 9, 9]
    # A change before any entry of the last fragment was confirmed replaces that fragment.
    again = m.with_ensemble(9, ("f:1", "d:1", "c:1"))
    assert [first for first, _ in again.ensembles] == [0, 5, 9]
    assert again.last_ensemble == (9, ("f:1", "d:1", "c:1"))


def test_names() -> None:
    assert ledger_name(0, 42) == 42 == BASE.name
    assert replace(BASE, scope=1).name == "0000000000000001000000000000002a"
