"""Process wiring: config, cookies, replay, the server, registration, background tasks.

Start-up order matters: cookies are checked before anything touches the data dirs'
contents; the journal is replayed and checkpointed before the port is opened; the bookie
registers in ZooKeeper (and logs `ready`) only once it can serve.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sqlite3
from collections.abc import Callable
from typing import Any

from kazoo.handlers.threading import KazooTimeoutError

from bookie_image.bugs import NO_BUGS, Bugs
from bookie_image.probes import reach

from .bookie import Bookie
from .config import BookieConfig
from .cookies import COOKIE_FILE, Cookie, CookieRefused, DirCookie, reconcile
from .env import Clock, InlineOffload, Offload, SystemClock, ThreadOffload
from .events import EventLog
from .files import FileLayer, OsFileLayer
from .journal import SHORT_RECORD, BadRecord, Journal, journal_seqs, replay
from .registry import Registry
from .server import BookieConnection
from .storage import PILE_UP_BYTES, Store

DISK_CHECK_INTERVAL_S = 1.0
STATS_INTERVAL_S = 0.5
ZK_START_TIMEOUT_S = 30.0


class StartupError(Exception):
    """Bad environment at start-up (exit 254)."""


def _read_dir_cookie(layer: FileLayer) -> DirCookie:
    try:
        data = layer.read_all(COOKIE_FILE)
    except FileNotFoundError:
        return None
    except OSError as exc:
        return ValueError(str(exc))
    try:
        return Cookie.decode(data)
    except ValueError as exc:
        return exc


class BookieService:
    """``files`` (a :class:`FileLayer` per data dir) and ``zk_client`` (kazoo-compatible)
    replace the real disk and ZooKeeper, as the clock and offload do: for a simulation.
    ``bugs``: the seeded bugs this bookie has."""

    def __init__(
        self,
        cfg: BookieConfig,
        events: EventLog,
        clock: Clock | None = None,
        offload: Offload | None = None,
        files: Callable[..., FileLayer] = OsFileLayer,
        zk_client: Any = None,
        bugs: Bugs = NO_BUGS,
    ) -> None:
        self.cfg = cfg
        self.events = events
        self.clock = clock or SystemClock()
        self.offload = offload or ThreadOffload()
        self.bugs = bugs
        fsync = cfg.journal_fsync and not bugs.enabled("no-journal-fsync")
        self.journal_files = files(cfg.journal_dir, fsync=fsync)
        self.ledger_files = [files(d) for d in cfg.ledger_dirs]
        self.registry = Registry(
            cfg.zk, cfg.zk_ledgers_root, cfg.bookie_id, cfg.host, cfg.port, zk_client
        )
        self._stop = asyncio.Event()
        self._checkpoint_now = asyncio.Event()
        """Set on stopping and when entries pile up in memory: wakes the checkpoint loop."""
        self._cleanup = contextlib.AsyncExitStack()
        self._registration: asyncio.Task[None] | None = None
        self._old_disks = False  # the cookie check found this bookie's disks from before

    # -- start-up --------------------------------------------------------------------------

    def _check_cookies(self) -> None:
        cfg = self.cfg
        layers = [self.journal_files, *self.ledger_files]
        expected = Cookie.new(cfg.bookie_id, cfg.journal_dir, cfg.ledger_dirs)
        if self.bugs.enabled("no-cookie"):
            self.events.emit("cookie-checked", action="skipped (seeded bug no-cookie)")
            return
        try:
            zk_cookie = self.registry.read_cookie()
        except ValueError as exc:
            raise CookieRefused(
                None,
                f"the ZooKeeper cookie at {self.registry.cookie_path} is unreadable ({exc})",
                "Inspect it; delete it only if this bookie's disks are known to be intact",
            ) from None
        found = {layer.root: _read_dir_cookie(layer) for layer in layers}
        try:
            action = reconcile(expected, zk_cookie, found)
        except CookieRefused as exc:
            reach("bookie-cookie-mismatch", dir=None if exc.dir is None else str(exc.dir))
            raise
        if action == "new":
            for layer in layers:
                layer.write_atomic(COOKIE_FILE, expected.encode())
            self.registry.write_cookie(expected)
        elif action == "restore-zk":
            cookie = next(c for c in found.values() if isinstance(c, Cookie))
            self.registry.write_cookie(cookie)
        self.events.emit("cookie-checked", action=action, dirs=[str(p) for p in found])
        self._old_disks = action != "new"

    async def start(self) -> None:
        """Bring the bookie up; `stop` undoes whatever part of this succeeded."""
        cfg = self.cfg
        for d in cfg.data_dirs:
            try:
                d.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise StartupError(
                    f"cannot create data dir {d}: {exc.strerror}; fix 'journal_dir'/'ledger_dirs'"
                ) from None
        try:
            await self.offload.run(self.registry.start, ZK_START_TIMEOUT_S)
        except KazooTimeoutError:
            raise StartupError(
                f"cannot reach ZooKeeper at {cfg.zk} within {ZK_START_TIMEOUT_S:.0f}s; "
                "start it or fix config key 'zk'"
            ) from None
        self._cleanup.push_async_callback(self.offload.run, self.registry.stop)
        await self.offload.run(self._check_cookies)

        try:
            self.store = Store(
                self.ledger_files, self.offload, self._checkpoint_now.set, cfg.entry_log_bytes
            )
        except sqlite3.DatabaseError as exc:
            raise StartupError(
                f"the ledger index in {cfg.ledger_dirs[0]} is unreadable ({exc}); this bookie "
                "cannot vouch for its entries: decommission it and wipe its dirs"
            ) from None
        self._cleanup.callback(self.store.close)
        self.journal = Journal(
            self.journal_files,
            self.clock,
            # The journal fsyncs on the loop thread: a thread hop per batch costs more than
            # the fsync (GIL hand-off), and requests that arrive meanwhile wait in socket
            # buffers and simply join the next batch.
            InlineOffload(),
            cfg.journal_max_batch,
            cfg.journal_max_wait_ms / 1000,
            cfg.journal_file_bytes,
            after_seq=self.store.checkpointed[0],
        )
        indexed = sum(st.last_entry >= 0 for st in self.store.ledgers.values())
        if indexed:
            reach("bookie-index-reloaded", ledgers=indexed)
        count = self._replay()
        await self.store.checkpoint(self.journal.durable)
        self.journal.release_before(self.journal.durable[0])
        self.events.emit("journal-replayed", count=count, ledgers=len(self.store.ledgers))
        self.bookie = Bookie(self.store, self.journal, self.events, cfg.ledger_dirs, self.bugs)
        self.bookie.restarted = self._old_disks
        self.journal.start()
        self._cleanup.push_async_callback(self.checkpoint)
        connections: set[BookieConnection] = set()
        self._cleanup.callback(_close_all, connections)
        # Answer everything already queued before the connections close.
        self._cleanup.push_async_callback(self.journal.close)
        self.bookie.on_mode_change = self._mode_changed
        self._check_disk()

        loop = asyncio.get_running_loop()
        try:
            server = await loop.create_server(
                lambda: BookieConnection(self.bookie, self.events, connections),
                cfg.host,
                cfg.port,
            )
        except OSError as exc:
            raise StartupError(
                f"cannot listen on {cfg.host}:{cfg.port}: {exc.strerror}; "
                "fix config keys 'host'/'port' or stop whatever holds the port"
            ) from None
        self._cleanup.callback(_stop_serving, server, connections)
        self.events.emit("listening", host=cfg.host, port=cfg.port)
        await self.offload.run(self.registry.register, self.bookie.readonly is not None)
        self._cleanup.push_async_callback(self.offload.run, self.registry.unregister)
        checkpoints = loop.create_task(self._checkpoints())
        self._cleanup.push_async_callback(asyncio.gather, checkpoints)  # ends on _stop
        monitors = [loop.create_task(self._disk()), loop.create_task(self._stats())]
        self._cleanup.push_async_callback(_cancel, monitors)
        self.events.emit(
            "ready",
            bookie_id=cfg.bookie_id,
            readonly=self.bookie.readonly is not None,
            znode=self.registry.node,
        )

    def _replay(self) -> int:
        damage: list[BadRecord] = []

        def damaged(bad: BadRecord) -> None:
            self.events.emit("journal-damaged", file=bad.seq, offset=bad.offset, reason=bad.reason)
            damage.append(bad)
            torn = bad.reason == SHORT_RECORD
            reach("journal-replay-torn-tail" if torn else "journal-replay-corrupt", file=bad.seq)

        start_seq, start_offset = start = self.store.checkpointed
        seqs = journal_seqs(self.journal_files)
        if start_offset and seqs and seqs[-1] > start_seq:  # before, whatever replay reads
            reach("journal-replay-crossed-files", checkpoint=list(start), last_file=seqs[-1])
        count = 0
        for record, _ in replay(self.journal_files, start, damaged):
            self.store.apply_record(record)
            count += 1
        if count and not damage:
            reach("journal-replay-intact", records=count)
        return count

    # -- running -----------------------------------------------------------------------------

    def _mode_changed(self, readonly: bool) -> None:
        """Re-register in the current mode, after any registration still under way."""
        previous = self._registration

        async def register() -> None:
            if previous is not None:
                await previous
            try:
                await self.offload.run(self.registry.register, self.bookie.readonly is not None)
            except Exception as exc:  # kazoo errors; the session listener retries later
                self.events.emit("registration-failed", error=str(exc))

        self._registration = asyncio.get_running_loop().create_task(register())

    def _check_disk(self) -> None:
        """Read-only while any data dir's disk is filled past the threshold, writable
        again once none is (BookKeeper's LedgerDirsMonitor); asked of the file layers, so
        the simulation's disks answer for themselves."""
        worst = 0.0
        for layer in (self.journal_files, *self.ledger_files):
            try:
                worst = max(worst, layer.usage())
            except OSError:
                continue
        if worst >= self.cfg.readonly_threshold:
            self.bookie.set_readonly(
                "disk-usage", usage=round(worst, 4), threshold=self.cfg.readonly_threshold
            )
        else:
            self.bookie.set_writable()

    async def _disk(self) -> None:
        while True:
            await asyncio.sleep(DISK_CHECK_INTERVAL_S)
            self._check_disk()

    async def _checkpoints(self) -> None:
        """Checkpoint every interval, or sooner when unflushed entries pile up in memory,
        until stopping; it ends by itself, never cancelled (a cancelled checkpoint would
        leave its flush thread running)."""
        interval = self.cfg.checkpoint_interval_ms / 1000
        due_at = self.clock.monotonic() + interval
        while not self._stop.is_set():
            try:
                wait = max(due_at - self.clock.monotonic(), 0.0)
                await asyncio.wait_for(self._checkpoint_now.wait(), wait)
            except TimeoutError:
                due = True  # the loop's own timer says so: no clock arithmetic to round
            else:
                self._checkpoint_now.clear()
                due = self.store.pending_bytes >= PILE_UP_BYTES
            if due:
                await self.checkpoint()
                due_at = self.clock.monotonic() + interval

    async def checkpoint(self) -> None:
        if not self.store.needs_checkpoint:
            return
        position = self.journal.durable
        try:
            await self.store.checkpoint(position)
            self.journal.release_before(position[0])
        except Exception as exc:  # OSError, or sqlite3.Error (not an OSError)
            self.events.emit("checkpoint-failed", error=str(exc))
            self.bookie.io_failed("checkpoint", exc)

    async def _stats(self) -> None:
        """A `journal-stats` line at start (a reader's baseline), then once the journal has
        written, at most one per interval: an idle bookie neither logs nor wakes."""

        def report() -> None:
            syncs, batches = self.journal_files.syncs, self.journal.batches
            self.events.emit("journal-stats", fsyncs=syncs, batches=batches)

        report()
        while True:
            await self.journal.wrote.wait()
            self.journal.wrote.clear()
            report()
            await asyncio.sleep(STATS_INTERVAL_S)

    async def stop(self) -> None:
        """Unregister, stop serving, drain the journal, checkpoint, close (in that order)."""
        self.events.emit("stopping")
        self._stop.set()
        self._checkpoint_now.set()
        if self._registration is not None:
            await asyncio.gather(self._registration, return_exceptions=True)
        await self._cleanup.aclose()
        self.events.emit("stopped")

    async def run_until_stopped(self) -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self._stop.set)
        await self._stop.wait()


def _stop_serving(server: asyncio.Server, connections: set[BookieConnection]) -> None:
    """No new connections, no new requests; queued ones still get their answers."""
    server.close()
    for connection in connections:
        connection.pause()


def _close_all(connections: set[BookieConnection]) -> None:
    for connection in list(connections):
        connection.close()


async def _cancel(tasks: list[asyncio.Task[None]]) -> None:
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
