"""Synthetic histories of a *correct* BookKeeper-like log, for tests and the benchmark.

A seeded model of what a correct cluster and honest client agents can produce:
- entry ids are assigned when an append is issued; bookies acknowledge a contiguous
  prefix (`acked`); readers see a LAC that lags it; an append completes ok only once
  acknowledged, and may time out (info) before or after its entry lands;
- recovery closes a ledger at any point between the acknowledged prefix and the last
  issued entry, so in-flight and info appends may or may not survive; appends issued
  to a closed ledger fail;
- ledgers belong to streams (the log workload, ordered by seq) or stand alone; a
  stream's next ledger is created only once the previous one is closed;
- tail reads return a range ending at a LAC between the process's last one and the
  current one (so per process it never goes down); closed reads return everything;
- nemesis ops, an unknown `f`, invokes never completed, and a final phase that recovers
  and closed-reads every ledger (except `unchecked` ones).
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

_FAULTS = (
    ("start-partition", "stop-partition"),
    ("kill", "restart"),
    ("pause", "resume"),
    ("clock-bump", "clock-reset"),
)


@dataclass(slots=True)
class _Ledger:
    id: Any
    stream: str | None
    seq: int | None
    entries: list[str] = field(default_factory=list)  # payload of each issued entry
    acked: int = -1  # highest entry of the contiguous prefix acknowledged by bookies
    lac: int = -1  # what readers can learn; never above `acked`
    last: int | None = None  # closed at this entry


@dataclass(slots=True)
class _Slot:
    """A place appends go: one stream, or one standalone ledger (with failover)."""

    stream: str | None
    current: _Ledger | None = None
    seq: int = 0
    busy: bool = False  # a create or recover of this slot is in flight


class _Model:
    def __init__(self, seed: int, slots: int, streams: int, processes: int, rollover: float):
        self.rng = random.Random(seed)
        self.rollover = rollover
        self.lines = 0
        self.time = 0
        self.slots = [_Slot(f"s{i}" if i < streams else None) for i in range(slots)]
        self.ledgers: list[_Ledger] = []
        self.workers: list[list[Any]] = [[w, None] for w in range(processes)]  # pid, op
        self.next_pid = processes
        self.known: dict[tuple[int, Any], int] = {}  # (process, ledger) -> lac seen
        self.payloads = 0
        self.seed = seed
        self.created = 0  # ledgers, over every epoch

    def new_epoch(self, epoch: int) -> None:
        """Fresh ledgers and streams (named for the epoch), as a soak rolls them over."""
        self.slots = [_Slot(f"{s.stream}.{epoch}" if s.stream else None) for s in self.slots]
        self.ledgers = []
        self.known = {}

    def emit(self, kind: str, process: Any, f: str, value: Any, **extra: Any) -> dict:
        self.time += self.rng.randint(1_000, 1_000_000)
        op = {"index": self.lines, "time": self.time, "type": kind, "process": process}
        op.update(f=f, value=value, **extra)
        self.lines += 1
        return op

    def new_ledger(self, slot: _Slot) -> _Ledger:
        n = self.created
        self.created += 1
        lid: Any = f"{self.seed % 65536:04x}-{n:016x}" if n % 5 == 4 else 1000 + n
        slot.seq += 1
        ledger = _Ledger(lid, slot.stream, slot.seq if slot.stream else None)
        self.ledgers.append(ledger)
        return ledger

    def ack(self, ledger: _Ledger) -> None:
        """Bookies acknowledge the next entry; readers may learn a higher LAC."""
        if ledger.last is None and ledger.acked < len(ledger.entries) - 1:
            ledger.acked += 1
        ledger.lac = self.rng.randint(ledger.lac, ledger.acked)

    def recover(self, ledger: _Ledger) -> int:
        """Close at any entry the acknowledged prefix and the issued entries allow."""
        if ledger.last is None:
            ledger.last = self.rng.randint(ledger.acked, len(ledger.entries) - 1)
            del ledger.entries[ledger.last + 1 :]
            ledger.acked = ledger.lac = ledger.last
        return ledger.last

    # -- client ops: invoke returns (f, value, state); complete returns the completion

    def invoke(self, pid: int, read_fraction: float) -> tuple[str, dict | None, list[Any]]:
        rng = self.rng
        slot = rng.choice(self.slots)
        cur = slot.current
        if (cur is None or cur.last is not None) and not slot.busy:
            slot.busy = True
            return "create", ({"stream": slot.stream} if slot.stream else {}), [slot]
        if self.ledgers and rng.random() < read_fraction:
            ledger = rng.choice(self.ledgers)
            roll = rng.random()
            if ledger.last is not None and roll < 0.2:
                return "read", {"ledger": ledger.id, "mode": "closed"}, [ledger]
            if roll < 0.4:
                return "read-lac", {"ledger": ledger.id}, [ledger]
            return "read", {"ledger": ledger.id, "mode": "tail"}, [ledger]
        if cur is None or rng.random() < 0.002:
            return "noop", None, []
        if not slot.busy and rng.random() < self.rollover:
            slot.busy = True
            return "recover", {"ledger": cur.id}, [slot, cur]
        self.payloads += 1
        payload = f"p{self.payloads}"
        value = {"stream": slot.stream} if slot.stream else {"ledger": cur.id}
        value["payload"] = payload
        if cur.last is not None:
            return "append", value, [cur, None]
        cur.entries.append(payload)
        return "append", value, [cur, len(cur.entries) - 1]

    def complete(self, pid: int, f: str, value: Any, state: list[Any]) -> tuple[str, Any] | None:
        """(type, value) of the completion, or None if it must wait for bookies."""
        rng = self.rng
        if f == "append":
            ledger, entry = state
            if entry is None:
                return "fail", None
            if entry <= ledger.acked:
                if rng.random() < 0.03:
                    return "info", None
                ok = {"ledger": ledger.id, "entry": entry}
                if ledger.stream:
                    ok["seq"] = ledger.seq
                return "ok", {**value, **ok}
            if ledger.last is not None or rng.random() < 0.02:
                return "info", None
            self.ack(ledger)
            return None
        if f == "create":
            (slot,) = state
            slot.current = self.new_ledger(slot)
            slot.busy = False
            ok = {"ledger": slot.current.id, "ensemble": 3, "wq": 2, "aq": 2}
            if slot.stream:
                ok.update(stream=slot.stream, seq=slot.current.seq)
            return "ok", {**value, **ok}
        if f == "recover":
            slot, ledger = state
            slot.busy = False
            return "ok", {**value, "last_entry": self.recover(ledger)}
        if f in ("read", "read-lac"):
            (ledger,) = state
            roll = rng.random()
            if roll < 0.01:
                return "fail", None
            if roll < 0.02:
                return "info", None
            key = (pid, ledger.id)
            if value.get("mode") == "closed":
                lac = ledger.last
                entries = list(enumerate(ledger.entries))
            else:
                lac = rng.randint(self.known.get(key, -1), ledger.lac)
                start = rng.randint(max(0, lac - 4), lac + 1)
                entries = [[e, ledger.entries[e]] for e in range(start, lac + 1)]
            self.known[key] = lac
            if f == "read-lac":
                return "ok", {**value, "lac": lac}
            if value.get("mode") == "tail":  # the reader asked from where it had got to
                value = {**value, "from": start}
            return "ok", {**value, "lac": lac, "entries": [list(x) for x in entries]}
        return "ok", value


def synthesize(
    seed: int,
    *,
    ops: int = 1000,
    ledgers: int = 4,
    streams: int = 2,
    processes: int = 5,
    read_fraction: float = 0.1,
    rollover: float = 0.005,
    nemesis: bool = True,
    abandon: float = 0.2,
    unchecked: int = 0,
    epochs: int = 1,
) -> Iterator[dict[str, Any]]:
    """Yield about `ops` op dicts of a valid history (spec §1-3), then its final phase.

    `ledgers` appends go to at once (`streams` of them are streams), each taken over
    (recovered, then replaced) with probability `rollover` per op; `abandon` is the
    chance an op in flight at the end is never completed; the last `unchecked` ledgers
    get no closed read, so the history checks "unknown" if they have ok appends.
    `epochs` > 1 runs that many times back to back (`ops` each, one sequence of
    indexes, payloads and processes), each with fresh ledgers and streams and its own
    final phase: a soak's shape, which a streaming check cuts between epochs, and which
    is generated in memory bounded by one epoch.
    """
    m = _Model(seed, ledgers, min(streams, ledgers), processes, rollover)
    rng = m.rng
    fault: tuple[str, str] | None = None
    for epoch in range(epochs):
        if epoch:
            m.new_epoch(epoch)
        last = epoch == epochs - 1
        while m.lines < ops * (epoch + 1):
            if nemesis and rng.random() < 0.002:
                f = fault[1] if fault else rng.choice(_FAULTS)[0]
                fault = None if fault else next(pair for pair in _FAULTS if pair[0] == f)
                target = {"nodes": [f"b{rng.randint(1, 3)}"]}
                yield m.emit("invoke", "nemesis", f, target)
                yield m.emit("info", "nemesis", f, {**target, "proof": {"observed": True}})
            worker = rng.choice(m.workers)
            pid, pending = worker
            if pending is None:
                f, value, state = m.invoke(pid, read_fraction)
                worker[1] = (f, value, state)
                yield m.emit("invoke", pid, f, value)
                continue
            done = m.complete(pid, *pending)
            if done is not None:
                yield _finish(m, worker, done)
        for worker in m.workers:
            while worker[1] is not None and (not last or rng.random() >= abandon):
                done = m.complete(worker[0], *worker[1])
                if done is not None:
                    yield _finish(m, worker, done)
        if fault and last:
            yield m.emit("invoke", "nemesis", "heal", None)
            yield m.emit("info", "nemesis", "heal", {"proof": {"healed": True}})
        final = m.next_pid
        m.next_pid += not last
        checked = m.ledgers[: max(0, len(m.ledgers) - unchecked)]
        for ledger in checked:
            if ledger.last is None:
                yield m.emit("invoke", final, "recover", {"ledger": ledger.id})
                end = m.recover(ledger)
                yield m.emit("ok", final, "recover", {"ledger": ledger.id, "last_entry": end})
        for ledger in checked:
            value = {"ledger": ledger.id, "mode": "closed"}
            yield m.emit("invoke", final, "read", value)
            entries = [[e, p] for e, p in enumerate(ledger.entries)]
            yield m.emit("ok", final, "read", {**value, "lac": ledger.last, "entries": entries})


def _finish(m: _Model, worker: list[Any], done: tuple[str, Any]) -> dict[str, Any]:
    """Emit a completion; after info, the worker goes on under a fresh process id."""
    pid, (f, value, _) = worker
    kind, out = done
    op = m.emit(kind, pid, f, out if kind == "ok" else value)
    if kind == "fail":
        op["error"] = "EFENCED" if f == "append" else "ENOLEDGER"
    worker[1] = None
    if kind == "info":
        worker[0] = m.next_pid
        m.next_pid += 1
    return op
