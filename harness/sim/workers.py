"""Simulated tests run side by side in worker processes, their results taken in order.

A simulated test is pure CPU in one process, so a search that runs one at a time uses one
core. `Workers` runs up to `jobs` tests at once, each in its own process (started by a
fork server that has already imported the simulation, so a worker restarts in
milliseconds); a test a search no longer needs is stopped by ending its worker, which is
the only way to stop a running test promptly. `Inline` is one "worker" that is the calling
process itself: `--jobs 1`, exactly as the search ran before workers existed.

`in_order` hands a search its results in the order its tests were drawn, whichever worker
finished first: the search's walk (what it draws next, what it keeps, what it finds first)
depends on its seed and its number of jobs, not on the machine's timing.

Workers import the code the driver's `sys.path` and `PYTHONPATH` name (`bkchaos bench
mutants` points both at a mutated copy of the tree), and each worker runs one test at a
time, as the driver did: the simulation's module-level state is per process either way.
Their log records are sent back with each result and logged by the driver, so its
handlers (stderr at the -v/-q level) treat them as its own.
"""

from __future__ import annotations

import logging
import logging.handlers
import math
import multiprocessing
import os
import queue
import shutil
import signal
import tempfile
import time
import traceback
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from pathlib import Path
from typing import Any, Protocol, TypeVar

from harness.runtime.sim import SimSpec

Run = Callable[[SimSpec], dict[str, Any]]
"""Runs one simulated test and returns its results. With workers, a module-level function
(it is sent to them by name)."""

Item = TypeVar("Item")

FIRST_RUN_IMPORTS = ("networkx",)
"""What a simulated test imports only when it first runs (the graph checker loads networkx
then, so that `import checkers` stays light): the fork server imports it once, so a worker
restarted after a stopped test does not pay for it again (0.3 s, longer than a test)."""


class Runner(Protocol):
    """Where tests run: `slots` at a time, each started under a key and finished by it."""

    slots: int

    def start(self, key: int, spec: SimSpec) -> None: ...

    def finished(self, timeout: float) -> list[tuple[int, dict[str, Any]]]:
        """Results of tests that finished, waiting up to `timeout` s for one."""
        ...

    def cancel(self, keys: Iterable[int]) -> None:
        """Stop the tests started under `keys` that are still running."""
        ...

    def running(self) -> set[int]: ...


class Inline:
    """The calling process as the only worker: a test runs when its result is asked for
    (so a search with it runs exactly one test at a time, as it always did)."""

    slots = 1

    def __init__(self, run: Run) -> None:
        self._run = run
        self._started: tuple[int, SimSpec] | None = None

    def start(self, key: int, spec: SimSpec) -> None:
        self._started = (key, spec)

    def finished(self, timeout: float) -> list[tuple[int, dict[str, Any]]]:
        if self._started is None:
            return []
        (key, spec), self._started = self._started, None
        return [(key, self._run(spec))]

    def cancel(self, keys: Iterable[int]) -> None:
        if self._started is not None and self._started[0] in set(keys):
            self._started = None

    def running(self) -> set[int]:
        return set() if self._started is None else {self._started[0]}


@dataclass
class _Slot:
    process: Any  # a multiprocessing Process of the fork server's context
    connection: Connection
    key: int | None = None


class Workers:
    """`jobs` worker processes running `run`; use as a context manager (leaving it ends
    them, whatever they were doing). Their temporary files go under one `scratch`
    directory, removed on leaving: a worker stopped mid-test cannot clean up its own."""

    def __init__(self, jobs: int, run: Run) -> None:
        if jobs < 1:
            raise ValueError(f"jobs must be >= 1, not {jobs}")
        self.slots = jobs
        self._run = run
        methods = multiprocessing.get_all_start_methods()
        self._context = multiprocessing.get_context(
            "forkserver" if "forkserver" in methods else "spawn"
        )
        if "forkserver" in methods:
            self._context.set_forkserver_preload([run.__module__, *FIRST_RUN_IMPORTS])
        root = logging.getLogger()  # workers log what some handler of ours would show
        shown = min((handler.level for handler in root.handlers), default=logging.WARNING)
        self._log_level = max(root.getEffectiveLevel(), shown)
        self._slots: list[_Slot | None] = [None] * jobs
        self.scratch = Path(tempfile.mkdtemp(prefix="bkchaos-workers-"))

    def __enter__(self) -> Workers:
        return self

    def __exit__(self, *_: object) -> None:
        for i in range(self.slots):
            self._end(i)
        shutil.rmtree(self.scratch, ignore_errors=True)

    def start(self, key: int, spec: SimSpec) -> None:
        i = next(i for i, slot in enumerate(self._slots) if slot is None or slot.key is None)
        slot = self._slots[i] or self._spawn(i)
        slot.connection.send((key, spec))
        slot.key = key

    def finished(self, timeout: float) -> list[tuple[int, dict[str, Any]]]:
        busy = {slot.connection: slot for slot in self._slots if slot and slot.key is not None}
        done = []
        for connection in wait(list(busy), max(0.0, timeout) if timeout < math.inf else None):
            slot = busy[connection]  # type: ignore[index]
            try:
                key, results, records, failure = connection.recv()
            except (EOFError, OSError):
                raise RuntimeError(
                    f"a search worker died running test {slot.key} "
                    f"(exit code {slot.process.exitcode})"
                ) from None
            for record in records:
                logging.getLogger(record.name).handle(record)
            if failure is not None:
                raise RuntimeError(f"a search worker's test raised:\n{failure}")
            slot.key = None
            done.append((key, results))
        return done

    def cancel(self, keys: Iterable[int]) -> None:
        stopped = set(keys)
        for i, slot in enumerate(self._slots):
            if slot is not None and slot.key in stopped:
                self._end(i)

    def running(self) -> set[int]:
        return {slot.key for slot in self._slots if slot is not None and slot.key is not None}

    def _spawn(self, i: int) -> _Slot:
        ours, theirs = self._context.Pipe()
        process = self._context.Process(
            target=_serve, args=(theirs, self._run, self._log_level, self.scratch), daemon=True
        )
        process.start()
        theirs.close()
        self._slots[i] = _Slot(process, ours)
        return self._slots[i]  # type: ignore[return-value]

    def _end(self, i: int) -> None:
        slot, self._slots[i] = self._slots[i], None
        if slot is None:
            return
        slot.process.terminate()
        slot.process.join()
        slot.connection.close()


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity, which a container or `taskset`
    narrows), else the machine's."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def runner_for(jobs: int, run: Run) -> AbstractContextManager[Runner]:
    """`jobs` workers, or for one job the driver itself (`Inline`)."""
    return nullcontext(Inline(run)) if jobs == 1 else Workers(jobs, run)


def _serve(connection: Connection, run: Run, log_level: int, scratch: Path) -> None:
    """A worker: run each test it is sent, send back (key, results, log records, None) or
    (key, None, records, the traceback), its temporary files under `scratch`. Ctrl-C is
    the driver's to handle: it ends us."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    tempfile.tempdir = str(scratch)
    records: queue.SimpleQueue[logging.LogRecord] = queue.SimpleQueue()
    root = logging.getLogger()
    root.handlers = [logging.handlers.QueueHandler(records)]
    root.setLevel(log_level)
    while True:
        try:
            key, spec = connection.recv()
        except EOFError:
            return
        results, failure = None, None
        try:
            results = run(spec)
        except Exception:
            failure = traceback.format_exc()
        logged = []
        while not records.empty():
            logged.append(records.get())
        connection.send((key, results, logged, failure))


def in_order(
    runner: Runner,
    tests: Iterator[tuple[Item, SimSpec]],
    until: float,
    decisive: Callable[[dict[str, Any]], bool],
    ahead: float = math.inf,
) -> Iterator[tuple[Item, SimSpec, dict[str, Any]]]:
    """Run `tests` on `runner` and yield (item, spec, results) in the tests' order.

    At most `ahead` tests are drawn from `tests` and not yet yielded: the next is drawn
    only once the one `ahead` places before it was yielded (a search then draws it from a
    corpus that holds every earlier result up to that one, however fast each ran). No
    test starts once the clock reaches `until`; when it does, tests still running are
    stopped and those already finished are yielded (in order, skipping the stopped) — a
    result that came is not thrown away. The first `decisive` result ends the walk: once
    it came nothing after it starts, what runs after it is stopped, and it is the last
    yielded. Close the iterator when done (`contextlib.closing`): that stops whatever
    still runs."""
    drawn: list[tuple[Item, SimSpec]] = []
    results: dict[int, dict[str, Any]] = {}
    yielded = 0
    last = math.inf  # no test after this index is needed (a decisive result came)
    exhausted = False

    def draw() -> None:
        nonlocal exhausted
        while not exhausted and len(drawn) - yielded < ahead and len(drawn) <= last:
            test = next(tests, None)
            if test is None:
                exhausted = True
            else:
                drawn.append(test)

    try:
        draw()
        started = 0
        while True:
            while yielded in results:
                item, spec = drawn[yielded]
                yield item, spec, results.pop(yielded)
                if yielded == last:
                    return
                yielded += 1
                draw()
            while (
                started < len(drawn)
                and started <= last
                and len(runner.running()) < runner.slots
                and time.monotonic() < until
            ):
                runner.start(started, drawn[started][1])
                started += 1
            if not runner.running():
                return  # every test drawn has been yielded, or none may start
            for key, result in runner.finished(until - time.monotonic()):
                results[key] = result
                if decisive(result) and key < last:
                    last = key
                    runner.cancel(k for k in runner.running() if k > last)
            if time.monotonic() >= until and yielded not in results:
                runner.cancel(runner.running())
                for key in sorted(k for k in results if k <= last):
                    item, spec = drawn[key]
                    yield item, spec, results.pop(key)
                return
    finally:
        runner.cancel(runner.running())
