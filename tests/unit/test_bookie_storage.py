"""The bookie's storage stack in-process: journal, group commit, store, replay, request rules.

No ZooKeeper and no sockets: a `Node` wires the same Store, Journal and Bookie the service
uses onto temporary dirs, and "crash" means dropping them without a final checkpoint.
"""

from __future__ import annotations

import asyncio
import io
import json
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bookie_image.bookie.bookie import Bookie
from bookie_image.bookie.env import InlineOffload, SystemClock, ThreadOffload
from bookie_image.bookie.events import EventLog
from bookie_image.bookie.files import MANIFEST, OsFileLayer
from bookie_image.bookie.journal import FILE_BYTES, Journal, journal_seqs, replay
from bookie_image.bookie.storage import LOG_BYTES, PILE_UP_BYTES, STORE_DIR, Store
from bookie_image.bugs import NO_BUGS, Bugs
from bookie_image.protocol import (
    AddRequest,
    DigestType,
    LedgerId,
    ReadLacRequest,
    ReadRequest,
    Status,
    WriteLacRequest,
    encode_entry,
    master_key_for,
)
from nemesis import nodeops

KEY = master_key_for(b"pw")
OTHER_KEY = master_key_for(b"other")
L1 = LedgerId(0, 1)


def entry(ledger: LedgerId, entry_id: int, lac: int = -1, payload: bytes = b"x") -> bytes:
    return encode_entry(ledger, entry_id, lac, entry_id + 1, payload, DigestType.CRC32C, KEY)


class Node:
    """One bookie's storage stack on `root`; reopen it to simulate a restart."""

    def __init__(
        self,
        root: Path,
        max_wait_s: float = 0.001,
        bugs: Bugs = NO_BUGS,
        journal_bytes: int = FILE_BYTES,
        log_bytes: int = LOG_BYTES,
    ):
        self.root = root
        self.log = io.StringIO()
        self.journal_files = OsFileLayer(root / "journal")
        self.ledger_files = [OsFileLayer(root / "ledgers0"), OsFileLayer(root / "ledgers1")]
        for layer in (self.journal_files, *self.ledger_files):
            layer.root.mkdir(parents=True, exist_ok=True)
        self.store = Store(self.ledger_files, ThreadOffload(), log_bytes=log_bytes)  # type: ignore[arg-type]
        self.journal = Journal(
            self.journal_files,
            SystemClock(),
            InlineOffload(),
            max_wait_s=max_wait_s,
            file_bytes=journal_bytes,
            after_seq=self.store.checkpointed[0],
        )
        self.replayed = 0
        for record, _ in replay(self.journal_files, self.store.checkpointed, lambda bad: None):
            self.store.apply_record(record)
            self.replayed += 1
        self.events = EventLog(self.log)
        self.bookie = Bookie(
            self.store, self.journal, self.events, [layer.root for layer in self.ledger_files], bugs
        )

    @classmethod
    async def open(cls, root: Path, **kw: Any) -> Node:
        node = cls(root, **kw)
        node.journal.start()
        return node

    async def call(self, request: Any) -> Any:
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.bookie.handle(request, fut.set_result)
        return await fut

    async def checkpoint(self) -> None:
        position = self.journal.durable
        await self.store.checkpoint(position)
        self.journal.release_before(position[0])

    async def crash(self) -> None:
        """Stop without a checkpoint: only the journal's fsynced records survive."""
        await self.journal.close()
        self.store.close()

    def events_named(self, name: str) -> list[dict[str, Any]]:
        lines = [json.loads(line) for line in self.log.getvalue().splitlines()]
        return [e for e in lines if e["event"] == name]


async def add(node: Node, ledger: LedgerId, eid: int, **kw: Any) -> Status:
    lac = kw.pop("lac", eid - 1)
    key = kw.pop("key", KEY)
    payload = kw.pop("payload", b"x")
    response = await node.call(AddRequest(eid, key, entry(ledger, eid, lac, payload), **kw))
    return response.status


async def read(node: Node, ledger: LedgerId, eid: int, **kw: Any) -> Any:
    return await node.call(ReadRequest(1, ledger, eid, **kw))


async def test_group_commit_many_adds_share_few_fsyncs(tmp_path: Path) -> None:
    node = await Node.open(tmp_path, max_wait_s=0.005)
    statuses = await asyncio.gather(*(add(node, L1, i) for i in range(200)))
    assert set(statuses) == {Status.EOK}
    assert node.journal_files.syncs <= 20, node.journal_files.syncs
    await node.crash()


async def test_large_entries_split_batches_by_bytes(tmp_path: Path) -> None:
    node = await Node.open(tmp_path)
    big = b"z" * (1024 * 1024)
    statuses = await asyncio.gather(*(add(node, L1, i, payload=big) for i in range(10)))
    assert set(statuses) == {Status.EOK}
    assert node.journal.batches == 4  # records are just over 1 MiB: 3 + 3 + 3 + 1
    await node.crash()


async def test_add_is_acknowledged_only_after_its_fsync(tmp_path: Path) -> None:
    node = await Node.open(tmp_path)
    replied: list[Any] = []
    seen_in_write: list[tuple[int, int]] = []
    original = node.journal._write

    def watched_write(data: bytes) -> tuple[int, int]:
        position = original(data)
        seen_in_write.append((node.journal_files.syncs, len(replied)))  # fsynced, not acked
        return position

    node.journal._write = watched_write  # type: ignore[method-assign]
    done = asyncio.Event()

    def on_reply(response: Any) -> None:
        replied.append(response)
        done.set()

    node.bookie.handle(AddRequest(1, KEY, entry(L1, 0)), on_reply)
    assert not replied  # nothing is answered synchronously
    await asyncio.wait_for(done.wait(), 5)
    assert seen_in_write == [(1, 0)]
    assert replied[0].status == Status.EOK
    await node.crash()


async def test_replay_after_crash_makes_acknowledged_entries_readable(tmp_path: Path) -> None:
    node = await Node.open(tmp_path)
    for i in range(5):
        assert await add(node, L1, i, payload=b"p%d" % i) == Status.EOK
    await node.checkpoint()
    for i in range(5, 10):
        assert await add(node, L1, i, payload=b"p%d" % i) == Status.EOK
    await node.crash()

    node = await Node.open(tmp_path)
    assert node.replayed == 5  # only what the checkpoint did not cover
    for i in range(10):
        response = await read(node, L1, i)
        assert response.status == Status.EOK
        assert response.entry == entry(L1, i, i - 1, b"p%d" % i)
    last = await read(node, L1, -1)
    assert (last.status, last.entry_id) == (Status.EOK, 9)
    # Replaying over the checkpoint again (idempotence): crash once more without a checkpoint.
    await node.crash()
    node = await Node.open(tmp_path)
    assert (await read(node, L1, 7)).status == Status.EOK
    await node.crash()


async def test_fence_key_lac_and_term_survive_reopen(tmp_path: Path) -> None:
    node = await Node.open(tmp_path)
    l2, l3 = LedgerId(0, 2), LedgerId(7, 3)
    assert await add(node, L1, 0) == Status.EOK
    fenced = await read(node, L1, 0, fence=True, master_key=KEY)
    assert fenced.status == Status.EOK
    assert await add(node, L1, 1) == Status.EFENCED
    assert await add(node, L1, 1, recovery=True) == Status.EOK
    assert node.events_named("fenced") == [
        {"ts": node.events_named("fenced")[0]["ts"], "event": "fenced", "ledger": "1"}
    ]
    lac = await node.call(WriteLacRequest(2, KEY, l2, 41))
    assert lac.status == Status.EOK
    assert await add(node, l3, 0, term=5) == Status.EOK
    await node.crash()

    node = await Node.open(tmp_path)
    assert await add(node, L1, 2) == Status.EFENCED
    assert await add(node, L1, 2, key=OTHER_KEY, recovery=True) == Status.EUA
    assert (await node.call(ReadLacRequest(3, l2))).lac == 41
    assert await add(node, l3, 1, term=4) == Status.EINVALIDTERM
    assert await add(node, l3, 1, term=5) == Status.EOK
    await node.checkpoint()
    await node.crash()

    node = await Node.open(tmp_path)  # from the index this time, not the journal
    assert node.replayed == 0
    assert await add(node, L1, 3) == Status.EFENCED
    assert await add(node, l2, 0, key=OTHER_KEY) == Status.EUA
    assert (await node.call(ReadLacRequest(3, l2))).lac == 41
    assert await add(node, l3, 2, term=4) == Status.EINVALIDTERM
    await node.crash()


async def test_fencing_read_with_higher_term_raises_it_without_fence_bit(tmp_path: Path) -> None:
    node = await Node.open(tmp_path)
    assert await add(node, L1, 0, term=1) == Status.EOK
    response = await read(node, L1, -1, fence=True, master_key=KEY, term=2)
    assert (response.status, response.entry_id) == (Status.EOK, 0)
    assert await add(node, L1, 1, term=1) == Status.EINVALIDTERM
    assert await add(node, L1, 1, term=2) == Status.EOK  # terms, not a once-only fence
    assert (await read(node, L1, 0, term=1)).status == Status.EINVALIDTERM
    assert [e["term"] for e in node.events_named("term-advanced")] == [1, 2]
    await node.crash()


async def test_master_key_mismatch_is_eua(tmp_path: Path) -> None:
    node = await Node.open(tmp_path)
    assert await add(node, L1, 0) == Status.EOK
    assert await add(node, L1, 1, key=OTHER_KEY) == Status.EUA
    fence = await read(node, L1, 0, fence=True, master_key=OTHER_KEY)
    assert fence.status == Status.EUA
    assert (await node.call(WriteLacRequest(2, OTHER_KEY, L1, 0))).status == Status.EUA
    await node.crash()


async def test_truncate_flag_drops_later_entries_across_layers(tmp_path: Path) -> None:
    node = await Node.open(tmp_path)
    for i in range(4):
        assert await add(node, L1, i) == Status.EOK
    await node.checkpoint()  # 0..3 in the index
    for i in range(4, 7):
        assert await add(node, L1, i) == Status.EOK  # 4..6 in memory
    assert await add(node, L1, 2, recovery=True, truncate=True, payload=b"noop") == Status.EOK
    assert await add(node, L1, 5, payload=b"new") == Status.EOK
    for eid in (3, 4, 6):
        assert (await read(node, L1, eid)).status == Status.ENOENTRY
    assert (await read(node, L1, 2)).entry == entry(L1, 2, 1, b"noop")
    assert (await read(node, L1, -1)).entry_id == 5
    assert node.events_named("truncated")[0]["after"] == 2

    for reopen_with_checkpoint in (False, True):
        if reopen_with_checkpoint:
            await node.checkpoint()
        await node.crash()
        node = await Node.open(tmp_path)
        for eid in (3, 4, 6):
            assert (await read(node, L1, eid)).status == Status.ENOENTRY
        assert (await read(node, L1, 5)).entry == entry(L1, 5, 4, b"new")
        assert (await read(node, L1, -1)).entry_id == 5
    await node.crash()


async def test_unknown_ledger_and_missing_entry(tmp_path: Path) -> None:
    node = await Node.open(tmp_path)
    assert (await read(node, L1, 0)).status == Status.ENOLEDGER
    assert (await node.call(ReadLacRequest(1, L1))).status == Status.ENOLEDGER
    # A fencing read creates the ledger: afterwards entries are explicit negatives.
    assert (await read(node, L1, 0, fence=True, master_key=KEY)).status == Status.ENOENTRY
    assert (await read(node, L1, 0)).status == Status.ENOENTRY
    assert (await read(node, L1, -1)).status == Status.ENOENTRY
    await node.crash()


def _corrupt_entry(node_root: Path, needle: bytes) -> None:
    for log in sorted(node_root.glob("ledgers*/current/entrylog-*.log")):
        data = bytearray(log.read_bytes())
        at = data.find(needle)
        if at >= 0:
            data[at] ^= 0x01
            log.write_bytes(bytes(data))
            return
    raise AssertionError("entry not found in any entry log")


@pytest.mark.parametrize("damage", ["bitflip", "truncate"])
async def test_corrupt_entry_is_eio_never_enoentry(tmp_path: Path, damage: str) -> None:
    node = await Node.open(tmp_path)
    assert await add(node, L1, 0, payload=b"A" * 100) == Status.EOK
    assert await add(node, L1, 1, payload=b"B" * 100) == Status.EOK
    await node.checkpoint()
    await node.crash()
    if damage == "bitflip":
        _corrupt_entry(tmp_path, b"B" * 100)
    else:
        for log in tmp_path.glob("ledgers*/current/entrylog-*.log"):
            data = log.read_bytes()
            log.write_bytes(data[: data.find(b"B" * 100) + 10] if b"B" * 50 in data else data)
    node = await Node.open(tmp_path)
    assert (await read(node, L1, 0)).status == Status.EOK
    assert (await read(node, L1, 1)).status == Status.EIO
    assert (await read(node, L1, -1)).status == Status.EIO
    assert (await node.call(ReadLacRequest(1, L1))).status == Status.EIO
    assert node.events_named("corrupt-entry")
    await node.crash()


async def test_seeded_bug_corrupt_returns_noentry(tmp_path: Path) -> None:
    node = await Node.open(tmp_path)
    assert await add(node, L1, 0, payload=b"C" * 100) == Status.EOK
    await node.checkpoint()
    await node.crash()
    _corrupt_entry(tmp_path, b"C" * 100)
    node = await Node.open(tmp_path, bugs=Bugs({"corrupt-returns-noentry"}))
    assert (await read(node, L1, 0)).status == Status.ENOENTRY
    await node.crash()


async def test_long_poll_read_lac(tmp_path: Path) -> None:
    node = await Node.open(tmp_path)
    assert await add(node, L1, 0, lac=-1) == Status.EOK
    # The known LAC (-1) does not pass previous_lac -1: wait until an add piggybacks 0.
    poll = asyncio.ensure_future(node.call(ReadLacRequest(2, L1, -1, 5000)))
    await asyncio.sleep(0.05)
    assert not poll.done()
    assert await add(node, L1, 1, lac=0) == Status.EOK
    response = await asyncio.wait_for(poll, 1)
    assert response.status == Status.EOK
    assert response.last_entry == entry(L1, 1, 0)
    # A WRITE_LAC also wakes pollers; a timeout answers with what is known.
    poll = asyncio.ensure_future(node.call(ReadLacRequest(3, L1, 0, 5000)))
    await asyncio.sleep(0.01)
    assert (await node.call(WriteLacRequest(4, KEY, L1, 1))).status == Status.EOK
    assert (await asyncio.wait_for(poll, 1)).lac == 1
    timed_out = await asyncio.wait_for(node.call(ReadLacRequest(5, L1, 5, 50)), 1)
    assert (timed_out.status, timed_out.lac) == (Status.EOK, 1)
    await node.crash()


async def test_readonly_refuses_adds_but_serves_reads(tmp_path: Path) -> None:
    node = await Node.open(tmp_path)
    assert await add(node, L1, 0) == Status.EOK
    node.bookie.set_readonly("disk-usage")
    assert await add(node, L1, 1) == Status.EREADONLY
    assert (await node.call(WriteLacRequest(2, KEY, L1, 0))).status == Status.EREADONLY
    assert (await read(node, L1, 0)).status == Status.EOK
    node.bookie.set_writable()
    assert await add(node, L1, 1) == Status.EOK
    assert [e["event"] for e in map(json.loads, node.log.getvalue().splitlines())] == [
        "readonly",
        "writable",
    ]
    await node.crash()


async def test_journal_write_failure_answers_eio_and_goes_readonly(tmp_path: Path) -> None:
    node = await Node.open(tmp_path)

    def failing(data: bytes) -> tuple[int, int]:
        raise OSError(28, "No space left on device")

    node.journal._write = failing  # type: ignore[method-assign]
    assert await add(node, L1, 0) == Status.EIO
    assert node.bookie.readonly == "disk-full"
    assert await add(node, L1, 0) == Status.EREADONLY
    node.bookie.set_writable()  # the disk check saw space again
    assert node.bookie.readonly is None

    def broken(data: bytes) -> tuple[int, int]:
        raise OSError(5, "Input/output error")

    node.journal._write = broken  # type: ignore[method-assign]
    assert await add(node, L1, 0) == Status.EIO
    node.bookie.set_writable()
    assert node.bookie.readonly == "io-error"  # sticky: the disk itself is suspect
    await node.crash()


async def test_manifest_records_fsynced_lengths(tmp_path: Path) -> None:
    node = await Node.open(tmp_path)
    for i in range(3):
        assert await add(node, L1, i) == Status.EOK
    manifest = json.loads((tmp_path / "journal" / MANIFEST).read_text())["files"]
    (seq,) = journal_seqs(node.journal_files)
    name = f"current/journal-{seq:016d}.log"
    assert manifest[name] == (tmp_path / "journal" / name).stat().st_size
    await node.checkpoint()
    ledger_manifests = [
        json.loads((tmp_path / d / MANIFEST).read_text())["files"]
        for d in ("ledgers0", "ledgers1")
        if (tmp_path / d / MANIFEST).exists()
    ]
    logs = {k: v for m in ledger_manifests for k, v in m.items() if "entrylog" in k}
    assert logs and all(v > 0 for v in logs.values())
    wal = tmp_path / "ledgers0" / "current/index.sqlite-wal"
    assert ledger_manifests[0]["current/index.sqlite-wal"] == wal.stat().st_size
    await node.crash()


async def test_power_loss_truncation_to_manifest_keeps_acknowledged_adds(tmp_path: Path) -> None:
    node = await Node.open(tmp_path)
    for i in range(20):
        assert await add(node, L1, i) == Status.EOK
    await node.crash()
    # Unsynced garbage after the last fsync, as a crash mid-write leaves it.
    (seq,) = journal_seqs(node.journal_files)
    path = tmp_path / "journal" / f"current/journal-{seq:016d}.log"
    with path.open("ab") as f:
        f.write(b"\x00\x00\x01\x00garbage")
    manifest = json.loads((tmp_path / "journal" / MANIFEST).read_text())["files"]
    with path.open("r+b") as f:
        f.truncate(manifest[f"current/journal-{seq:016d}.log"])
    node = await Node.open(tmp_path)
    assert node.replayed == 20
    assert (await read(node, L1, -1)).entry_id == 19
    await node.crash()


async def test_a_lost_last_write_takes_only_the_last_checkpoints_entries(tmp_path: Path) -> None:
    """The `corrupt` nemesis's `tail` mode cuts into the last fsynced write of the newest
    entry log (the manifest's `last_flush`): what earlier checkpoints wrote stays, and the
    lost entries answer EIO, never "no such entry"."""
    node = await Node.open(tmp_path)
    for i in range(20):
        assert await add(node, L1, i) == Status.EOK
        if i in (9, 19):
            await node.checkpoint()
    await node.crash()
    dirs = [str(tmp_path / d) for d in ("ledgers0", "ledgers1")]
    (change,) = nodeops.corrupt(dirs, ["entrylog"], "tail", count=3, seed=1)["changes"]
    log = Path(change["file"])
    manifest = json.loads((log.parents[1] / MANIFEST).read_text())
    rel = str(log.relative_to(log.parents[1]))
    assert manifest["last_flush"][rel] <= change["to"] < change["truncated_from"]
    assert change["truncated_from"] == manifest["files"][rel]
    node = await Node.open(tmp_path)
    statuses = [(await read(node, L1, i)).status for i in range(20)]
    assert statuses[:10] == [Status.EOK] * 10 and statuses[19] == Status.EIO, statuses
    assert set(statuses) == {Status.EOK, Status.EIO}
    await node.crash()


async def test_torn_journal_tail_is_ignored_and_never_appended_to(tmp_path: Path) -> None:
    node = await Node.open(tmp_path)
    assert await add(node, L1, 0) == Status.EOK
    await node.crash()
    (seq,) = journal_seqs(node.journal_files)
    with (tmp_path / "journal" / f"current/journal-{seq:016d}.log").open("ab") as f:
        f.write(b"\x00\x00\x00\x50torn")
    node = await Node.open(tmp_path)
    assert await add(node, L1, 1) == Status.EOK
    assert journal_seqs(node.journal_files) == [seq, seq + 1]
    await node.crash()
    bad: list[Any] = []
    node = await Node.open(tmp_path)
    list(replay(node.journal_files, (0, 0), bad.append))
    assert [b.reason for b in bad] == ["short record"]
    assert (await read(node, L1, 1)).status == Status.EOK
    await node.checkpoint()
    assert journal_seqs(node.journal_files) == []  # all checkpointed; the next file is unborn
    await node.crash()


async def test_full_width_ledger_ids_round_trip_through_the_index(tmp_path: Path) -> None:
    big = LedgerId(2**64 - 1, 2**63 + 5)
    node = await Node.open(tmp_path)
    assert await add(node, big, 0, payload=b"v2") == Status.EOK
    await node.checkpoint()
    await node.crash()
    node = await Node.open(tmp_path)
    assert (await read(node, big, 0)).entry == entry(big, 0, -1, b"v2")
    assert (await read(node, LedgerId(0, 2**63 + 5), 0)).status == Status.ENOLEDGER
    await node.crash()


async def journal_record_bytes(root: Path) -> int:
    """The journal bytes an `add` of entry 0 takes (every `add` of entry 0-99 with the same
    payload takes as many): what the rollover tests size files in."""
    node = await Node.open(root)
    assert await add(node, L1, 0) == Status.EOK
    await node.crash()
    return node.journal.durable[1]


async def test_restart_after_rollovers_replays_everything_since_a_checkpoint_inside_an_earlier_file(
    tmp_path: Path,
) -> None:
    """Three records to a journal file: the checkpoint lands one record into file 2, and
    replay must take the rest of file 2 from there and files 3 and 4 from their start."""
    size = await journal_record_bytes(tmp_path / "sizing")
    node = await Node.open(tmp_path, journal_bytes=3 * size)
    for i in range(4):
        assert await add(node, L1, i) == Status.EOK
    await node.checkpoint()
    assert node.store.checkpointed == (2, size)
    for i in range(4, 11):
        assert await add(node, L1, i) == Status.EOK
    await node.crash()
    assert journal_seqs(node.journal_files) == [2, 3, 4]  # file 1 released by the checkpoint

    node = await Node.open(tmp_path, journal_bytes=3 * size)
    assert node.replayed == 7
    assert [(await read(node, L1, i)).status for i in range(11)] == [Status.EOK] * 11
    assert (await read(node, L1, -1)).entry_id == 10
    await node.crash()


async def test_a_torn_tail_in_the_last_file_after_rollovers_loses_nothing_acknowledged(
    tmp_path: Path,
) -> None:
    size = await journal_record_bytes(tmp_path / "sizing")
    node = await Node.open(tmp_path, journal_bytes=2 * size)
    for i in range(7):
        assert await add(node, L1, i) == Status.EOK
    await node.crash()
    seqs = journal_seqs(node.journal_files)
    assert seqs == [1, 2, 3, 4]
    with (tmp_path / "journal" / f"current/journal-{seqs[-1]:016d}.log").open("ab") as f:
        f.write(b"\x00\x00\x00\x50torn")
    bad: list[Any] = []
    assert len(list(replay(node.journal_files, (0, 0), bad.append))) == 7
    assert [(b.seq, b.offset, b.reason) for b in bad] == [(4, size, "short record")]

    node = await Node.open(tmp_path, journal_bytes=2 * size)
    assert node.replayed == 7
    assert [(await read(node, L1, i)).status for i in range(7)] == [Status.EOK] * 7
    assert await add(node, L1, 7) == Status.EOK  # into a new file, never after the torn tail
    assert journal_seqs(node.journal_files) == [1, 2, 3, 4, 5]
    await node.crash()


async def test_entries_stay_readable_across_entry_log_rollovers_and_restarts(
    tmp_path: Path,
) -> None:
    """A tiny entry log: each checkpoint's flush starts a new log; every entry is read
    back from the log the index names, before and after a restart, and a restarted store
    never appends to a log of before."""
    node = await Node.open(tmp_path, log_bytes=1)
    for i in range(6):
        assert await add(node, L1, i, payload=b"p%d" % i) == Status.EOK
        await node.checkpoint()
    logs_dir = tmp_path / "ledgers1" / STORE_DIR  # L1 routes to the second ledger dir
    logs = sorted(p.name for p in logs_dir.glob("entrylog-*.log"))
    assert len(logs) == 6
    assert [(await read(node, L1, i)).entry for i in range(6)] == [
        entry(L1, i, i - 1, b"p%d" % i) for i in range(6)
    ]
    await node.crash()
    node = await Node.open(tmp_path, log_bytes=1)
    assert [(await read(node, L1, i)).status for i in range(6)] == [Status.EOK] * 6
    assert await add(node, L1, 6) == Status.EOK
    await node.checkpoint()
    assert len(list(logs_dir.glob("entrylog-*.log"))) == 7
    assert (await read(node, L1, 6)).status == Status.EOK
    await node.crash()


_OPS = st.lists(
    st.one_of(
        st.tuples(st.just("add"), st.integers(0, 1), st.integers(0, 8), st.booleans()),
        st.tuples(st.just("checkpoint")),
        st.tuples(st.just("reopen")),
    ),
    max_size=25,
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=_OPS, tiny_files=st.booleans())
def test_store_matches_a_model_under_adds_truncates_checkpoints_and_crashes(
    ops: list, tiny_files: bool
) -> None:
    """Whatever mix of layers (memory, frozen, index) holds an entry, reads agree with a
    dict model, before and after crashes; with tiny files, across journal and entry log
    rollovers too."""
    sizes = {"journal_bytes": 200, "log_bytes": 200} if tiny_files else {}

    async def run(root: Path) -> None:
        model: dict[LedgerId, dict[int, bytes]] = {}
        node = await Node.open(root, **sizes)
        for n, op in enumerate(ops):
            if op[0] == "add":
                _, which, eid, truncate = op
                ledger = LedgerId(0, 10 + which)
                payload = b"%d" % n
                status = await add(node, ledger, eid, payload=payload, truncate=truncate)
                assert status == Status.EOK
                entries = model.setdefault(ledger, {})
                if truncate:
                    for later in [e for e in entries if e > eid]:
                        del entries[later]
                entries[eid] = entry(ledger, eid, eid - 1, payload)
            elif op[0] == "checkpoint":
                await node.checkpoint()
            else:
                await node.crash()
                node = await Node.open(root, **sizes)
            for which in (0, 1):
                ledger = LedgerId(0, 10 + which)
                entries = model.get(ledger)
                for eid in range(-1, 10):
                    response = await read(node, ledger, eid)
                    if entries is None:
                        assert response.status == Status.ENOLEDGER
                        continue
                    want = max(entries) if eid == -1 and entries else eid
                    if want in entries:
                        assert (response.status, response.entry) == (Status.EOK, entries[want])
                    else:
                        assert response.status == Status.ENOENTRY
        await node.crash()

    with tempfile.TemporaryDirectory() as tmp:
        asyncio.run(run(Path(tmp)))


async def test_concurrent_checkpoints_run_one_after_the_other(tmp_path: Path) -> None:
    node = Node(tmp_path)
    node.store._offload = ThreadOffload()  # real thread: the two would otherwise overlap
    node.journal.start()
    for i in range(5):
        assert await add(node, L1, i) == Status.EOK
    first = asyncio.ensure_future(node.checkpoint())
    await asyncio.sleep(0)
    for i in range(5, 10):
        assert await add(node, L1, i) == Status.EOK
    await asyncio.gather(first, node.checkpoint())
    await node.crash()
    node = await Node.open(tmp_path)
    assert node.replayed == 0
    assert [(await read(node, L1, i)).status for i in range(10)] == [Status.EOK] * 10
    await node.crash()


async def test_seeded_bug_unbounded_no_truncate(tmp_path: Path) -> None:
    node = await Node.open(tmp_path, bugs=Bugs({"unbounded-no-truncate"}))
    for i in range(3):
        assert await add(node, L1, i) == Status.EOK
    assert await add(node, L1, 0, recovery=True, truncate=True) == Status.EOK
    assert (await read(node, L1, 2)).status == Status.EOK  # the dirty entry stays
    assert not node.events_named("truncated")
    await node.crash()


async def test_a_pile_up_of_unflushed_entries_calls_for_a_checkpoint(tmp_path: Path) -> None:
    """The bookie's checkpoint loop sleeps until its interval is up unless the store calls
    (`on_pile_up`): at PILE_UP_BYTES unflushed, and not again once a checkpoint took them."""
    calls: list[int] = []
    layer = OsFileLayer(tmp_path / "ledgers")
    layer.root.mkdir(parents=True)
    store = Store([layer], ThreadOffload(), lambda: calls.append(store.pending_bytes))  # type: ignore[arg-type]
    lk = (0, 1)
    store.apply_state(lk, KEY, 0)
    store.apply_add(lk, 0, b"x" * (PILE_UP_BYTES - 1), -1)
    assert calls == []
    store.apply_add(lk, 1, b"x", -1)
    assert calls == [PILE_UP_BYTES]
    await store.checkpoint((1, 0))
    store.apply_add(lk, 2, b"x", -1)
    assert calls == [PILE_UP_BYTES]
    store.close()


async def test_the_journal_signals_each_written_batch(tmp_path: Path) -> None:
    """What the bookie's `journal-stats` reporter waits on, instead of polling counters."""
    node = await Node.open(tmp_path)
    assert not node.journal.wrote.is_set()
    await node.call(AddRequest(0, KEY, entry(L1, 0)))
    assert node.journal.wrote.is_set() and node.journal.batches == 1
    await node.crash()
