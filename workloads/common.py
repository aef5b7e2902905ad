"""What every workload shares: how ledgers are made, unique payloads, writer bookkeeping
and the final phase.

A workload is an op source (`generator`) that learns from completions (`observe`) and
names the ledgers the final phase must read closed (`final_ops`). The base class keeps
what all of them need to know about the run so far, so each workload module only says
what is particular to it: which op a process runs next and what a completion teaches it.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

from core.generator import Context, Generator, Repeat

Op = dict[str, Any]


class WorkloadSettings(Protocol):
    """The test settings a workload is built from (a harness TestSpec has them all)."""

    ensemble: int
    write_quorum: int
    ack_quorum: int
    digest: str
    id_bits: int
    entry_size: int
    guaranteed_write_quorum: bool
    concurrency: int
    pipeline: int
    clients: int
    takeovers: float | None
    writer_crashes: float


ALL_CHECKERS = ("ledger", "stream", "graph", "replication", "stats", "perf")
SCOPES = 3
"""128-bit ledgers are spread over this many BP-35 scopes, each handing out ids from its own
counter, as the tenants of a multi-tenant deployment would: ids then repeat across scopes,
and only the scope tells two ledgers apart."""
TAIL_WINDOW = 32
"""Tail reads ask for the last few entries known acknowledged, not the whole ledger: a
reader following the log reads what is new, and long ledgers stay cheap to read."""


@dataclass(frozen=True)
class LedgerConfig:
    """How ledgers are created (the test's E/WQ/AQ, digest, id bits) and how big entries are."""

    ensemble: int = 3
    write_quorum: int = 2
    ack_quorum: int = 2
    digest: str = "crc32c"
    id_bits: int = 64
    entry_size: int = 0
    guaranteed_write_quorum: bool = False

    @classmethod
    def from_spec(cls, spec: WorkloadSettings) -> LedgerConfig:
        return cls(
            spec.ensemble,
            spec.write_quorum,
            spec.ack_quorum,
            spec.digest,
            spec.id_bits,
            spec.entry_size,
            spec.guaranteed_write_quorum,
        )

    def create(self, **extra: Any) -> Op:
        """A `create` op for a ledger of this configuration; `extra` adds to its value."""
        return {
            "f": "create",
            "value": {
                "ensemble": self.ensemble,
                "write_quorum": self.write_quorum,
                "ack_quorum": self.ack_quorum,
                "digest": self.digest,
                "id_bits": self.id_bits,
                # only when on, so histories of the default configuration stay as they were
                **({"guaranteed_write_quorum": True} if self.guaranteed_write_quorum else {}),
                **extra,
            },
        }


@dataclass
class Payloads:
    """Unique payload strings, padded with dots to `size` characters (entry size).

    The unpadded part never contains a dot, so padding cannot make two payloads equal."""

    size: int = 0
    _counter: itertools.count = field(default_factory=itertools.count)

    def next(self, process: Any) -> str:
        return f"{process}-{next(self._counter)}".ljust(self.size, ".")


LOST_WRITER_ERRORS = frozenset({"EFENCED", "ELEDGERCLOSED", "ENOHANDLE"})
"""Errors that mean someone else already took the ledger over (or it is gone)."""


@dataclass
class BaseWorkload:
    """State every workload keeps: ledgers created, who writes what, what was acked."""

    config: LedgerConfig = field(default_factory=LedgerConfig)
    concurrency: int = 4
    ledgers: list[Any] = field(default_factory=list)
    writing: dict[int, Any] = field(default_factory=dict)
    """Process -> what it writes (workload-specific); present while it holds a handle."""
    acked: dict[Any, int] = field(default_factory=dict)
    """Ledger -> the highest entry id an ok append returned."""
    pipeline: int = 1
    """Workers appending to each writer's ledger (`--pipeline`): its own and co-writers."""
    clients: int = 1
    """Client agents: worker w runs on agent w mod `clients` (harness.controller)."""
    payloads: Payloads = field(default_factory=Payloads)
    _creates: itertools.count = field(default_factory=itertools.count)

    read_closed: set[Any] = field(default_factory=set)
    """Ledgers a closed read returned: closed, so their copies can be audited."""

    checkers: ClassVar[tuple[str, ...]] = ALL_CHECKERS

    def __post_init__(self) -> None:
        self.payloads.size = self.config.entry_size

    @classmethod
    def from_spec(cls, spec: WorkloadSettings) -> BaseWorkload:
        return cls(
            config=LedgerConfig.from_spec(spec),
            concurrency=spec.concurrency,
            pipeline=spec.pipeline,
            clients=spec.clients,
            **cls.own_settings(spec),
        )

    @classmethod
    def own_settings(cls, spec: WorkloadSettings) -> dict[str, Any]:
        """The fields only this kind of workload has, as the spec sets them (none here)."""
        return {}

    def generator(self) -> Generator:
        return Repeat(self.next_op)

    def rolled(self, epoch: int, payloads: Payloads) -> BaseWorkload:
        """This fresh workload as a soak's epoch `epoch` (workloads/soak.py): payloads
        from the soak's one counter, so that no two epochs share one."""
        self.payloads = payloads
        return self

    def next_op(self, ctx: Context) -> Op:
        raise NotImplementedError

    def create(self, **extra: Any) -> Op:
        """A `create` op; 128-bit ledgers go round the scopes (`SCOPES`)."""
        if self.config.id_bits == 128:
            extra.setdefault("scope", 1 + next(self._creates) % SCOPES)
        return self.config.create(**extra)

    def append(self, ctx: Context, ledger: Any, **extra: Any) -> Op:
        """An append of a fresh payload to `ledger`; `extra` adds to its value."""
        payload = self.payloads.next(ctx.process)
        return {"f": "append", "value": {"ledger": ledger, **extra, "payload": payload}}

    def recover(self, ledger: Any) -> Op:
        """Open `ledger` with recovery: fence its writer, recover its tail, close it."""
        return {"f": "recover", "value": {"ledger": ledger}}

    def tail_read(self, ledger: Any, **extra: Any) -> Op:
        """A tail read of the newest entries of `ledger` known to be acknowledged."""
        first = max(0, self.acked.get(ledger, -1) - TAIL_WINDOW)
        return {"f": "read", "value": {"ledger": ledger, "mode": "tail", "from": first, **extra}}

    def observe(self, process: int, op: Op, kind: str, value: Any, error: str | None) -> None:
        """Record new ledgers and acked entries, then let the workload learn the rest."""
        f = op["f"]
        if f == "create" and kind == "ok":
            self.ledgers.append(value["ledger"])
        elif f == "append" and kind == "ok":
            ledger = value["ledger"]
            self.acked[ledger] = max(self.acked.get(ledger, -1), value["entry"])
        elif f == "read" and kind == "ok" and value.get("mode") == "closed":
            self.read_closed.add(value["ledger"])
        self.learn(process, op, kind, value, error)

    def learn(self, process: int, op: Op, kind: str, value: Any, error: str | None) -> None:
        """Workload-specific lessons from a completion (the base has none)."""

    def final_ops(self) -> Iterator[Op]:
        """Closed reads of every ledger: the authoritative content the checkers judge by;
        then an audit of the copies of every ledger read closed (the replication checker
        judges them: enough copies of every entry, and no two that differ). Lazy on
        purpose: the controller runs each op as it is yielded, so by the time the audits
        are drawn every closed read has completed and `read_closed` says which did."""
        for lid in self.ledgers:
            yield {"f": "read", "value": {"ledger": lid, "mode": "closed"}}
        for lid in [lid for lid in self.ledgers if lid in self.read_closed]:
            yield {"f": "audit", "value": {"ledger": lid}}

    def worker(self, process: int) -> int:
        """The worker (0 .. concurrency−1) a process id runs on; it survives retirements."""
        return process % self.concurrency

    def leader(self, process: int) -> int | None:
        """For a co-writer, the worker whose writes it joins: workers of one agent go in
        groups of `pipeline`, the first of each group writing on its own (None for it)."""
        worker = self.worker(process)
        agent, rank = worker % self.clients, worker // self.clients
        lead = rank - rank % self.pipeline
        return None if lead == rank else lead * self.clients + agent

    def leaders_writing(self, leader: int) -> Any:
        """What worker `leader` writes now (its `writing` entry), or None."""
        return next((w for p, w in self.writing.items() if self.worker(p) == leader), None)
