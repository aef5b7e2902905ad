"""Streams with one designated writer at a time, handed over between processes.

The shared machinery of the `log` and `unbounded` workloads. The workload plays the part
of the external leader election BookKeeper assumes (reference 000): it designates which
process should write each stream. A designated process first *acquires* the stream (a
sequence of ops that fences whoever wrote before), then appends until it loses its
handle. A process that is superseded is not told: like a deposed leader that has not
noticed yet, it keeps appending through its old handle until the bookies refuse it —
which is exactly what fencing must get right.

Processes that hold no stream read its tail, and now and then take a stream over. With
`--pipeline K`, each designated writer has K−1 co-writers on its client agent appending
through the same handle, so a deposed writer has several adds in flight when it is fenced:
the dirty entries a takeover's truncating no-op must clear (reference 000).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from core.generator import PENDING, Context
from workloads.common import BaseWorkload, Op, Payloads, WorkloadSettings


@dataclass
class Stream:
    """One stream: its current ledger and who is designated to write it."""

    name: str
    ledger: Any = None
    seq: int = -1
    sealed: bool = True
    """The current ledger is closed (or there is none): the next one may be created."""
    owner: int | None = None
    """The designated writer (acquiring or writing); None: up for takeover."""


@dataclass
class Writing:
    """What a writing process holds: a handle on `ledger` of `stream` (in `term`)."""

    stream: Stream
    ledger: Any
    extra: dict[str, Any]
    """Fields every append carries besides ledger and payload (`stream` and `seq`/`term`)."""


@dataclass
class StreamWorkload(BaseWorkload):
    """Designated writers per stream; subclasses say how a stream is acquired."""

    streams: list[Stream] = field(default_factory=list)
    acquiring: dict[int, Stream] = field(default_factory=dict)
    takeover_fraction: float = 0.02
    """Per op of a process without a stream: chance it takes one over from its writer."""

    @classmethod
    def own_settings(cls, spec: WorkloadSettings) -> dict[str, Any]:
        return {} if spec.takeovers is None else {"takeover_fraction": spec.takeovers}

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.streams:  # half the leaders write, the others read and take over
            leaders = [w for w in range(self.concurrency) if self.leader(w) is None]
            self.streams = [Stream(f"s{i}") for i in range(max(1, len(leaders) // 2))]

    def rolled(self, epoch: int, payloads: Payloads) -> StreamWorkload:
        """As BaseWorkload's, with the streams named for the epoch (`s0.3`): a stream of
        an earlier epoch is over, and its `seq` would clash with the new one's."""
        for stream in self.streams:
            stream.name = f"{stream.name}.{epoch}" if epoch else stream.name
        return super().rolled(epoch, payloads)  # type: ignore[return-value]

    def next_op(self, ctx: Context) -> Op | Any:
        p: int = ctx.process  # type: ignore[assignment]
        leader = self.leader(p)
        if leader is not None:  # a co-writer (`--pipeline`): it appends with its leader
            shared = self.leaders_writing(leader)
            return PENDING if shared is None else self.append(ctx, shared.ledger, **shared.extra)
        stream = self.acquiring.get(p)
        if stream is not None:
            return self.acquire_op(p, stream)
        mine = self.writing.get(p)
        if mine is not None:
            return self.writer_op(ctx, mine)
        idle = [s for s in self.streams if s.owner is None]
        busy = [s for s in self.streams if s.owner not in self.acquiring]
        if idle or (busy and ctx.rng.random() < self.takeover_fraction):
            stream = ctx.rng.choice(idle or busy)
            stream.owner = p
            self.acquiring[p] = stream
            return self.acquire_op(p, stream)
        return self.reader_op(ctx)

    def writer_op(self, ctx: Context, mine: Writing) -> Op:
        return self.append(ctx, mine.ledger, **mine.extra)

    def reader_op(self, ctx: Context) -> Op | Any:
        """A tail read of the current ledger of some stream (PENDING before there is one)."""
        with_ledgers = [s for s in self.streams if s.ledger is not None]
        if not with_ledgers:
            return PENDING
        return self.tail_read(ctx.rng.choice(with_ledgers).ledger)

    def acquire_op(self, p: int, stream: Stream) -> Op:
        """The next op of process `p` acquiring `stream`."""
        raise NotImplementedError

    def learn(self, process: int, op: Op, kind: str, value: Any, error: str | None) -> None:
        f = op["f"]
        stream = self.acquiring.get(process)
        if f == "append" and kind != "ok":
            # Whatever the reason, this handle is done for (fenced, closed, lost with its
            # process id): the stream goes to whoever takes it over next.
            lost = self.writing.pop(process, None)
            if lost is not None and lost.stream.owner == process:
                lost.stream.owner = None
        elif stream is not None and f != "append":
            if kind == "ok":
                self.acquired(process, stream, op, value)
            else:  # unknown or failed: give the stream up; a later taker starts over
                self.acquiring.pop(process)
                self.writing.pop(process, None)
                if stream.owner == process:
                    stream.owner = None

    def acquired(self, p: int, stream: Stream, op: Op, value: Any) -> None:
        """One acquiring op of `p` succeeded (`value` is its ok value)."""
        raise NotImplementedError

    def start_writing(self, p: int, stream: Stream, ledger: Any, **extra: Any) -> None:
        """`p` holds a handle on the stream's current ledger: it is the stream's writer."""
        self.acquiring.pop(p, None)
        self.writing[p] = Writing(stream, ledger, {"stream": stream.name, **extra})
