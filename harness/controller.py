"""Runs one test: workers and the nemesis against a cluster, then the final phase.

Like Jepsen's `core/run!`: client workers ask the generator for ops and execute them
through the client agents, a nemesis worker injects faults, every invocation and
completion goes to the history the moment it is observed. When the time limit is up the
final phase always runs: heal every fault, wait until the cluster serves (if it does not,
the heal did not take effect: an unproven fault, so the verdict is unknown, with what is
still down), recover and read every ledger in full, then check that the healed cluster
still makes progress (a fresh ledger's whole life; `stuck-after-heal` in
checkers/liveness.py judges it). An op that completes `info` retires
its process id and the worker carries on as a fresh process (id + concurrency), as in
Jepsen.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from core.generator import Context, Generator, Pending, Workload, clients, interleave, nemesis
from core.history import HistoryWriter
from harness.agent_client import AgentConnection
from nemesis.base import Nemesis
from nemesis.kinds import START_STOP, STEP_KIND

if TYPE_CHECKING:
    from harness.testspec import TestSpec

log = logging.getLogger("bkchaos.controller")

IDLE_POLL_S = 0.01
"""How soon a worker asks again when the generator waits on something other than the clock."""
MIN_WAIT_S = 1e-6
"""The shortest wait for a due time: a loop timer within its clock's resolution fires at
once, without time moving, and the generator would answer the same wait again."""
FINAL_READ_ATTEMPTS = 5
FINAL_READ_BACKOFF_S = 2.0
PROGRESS_ATTEMPTS = 4
PROGRESS_BACKOFF_S = 5.0
"""The progress check after the heal (checkers/liveness.py): attempt k waits
(k − 1) × this first, so a bookie still re-registering or a client still reconnecting
has half a minute before the check's last attempt."""
PROGRESS_APPENDS = 2
PROGRESS_READ_ATTEMPTS = 2
"""Closed reads of a ledger an attempt left unread: fewer than the final reads' tries, so
a stuck real cluster does not hold the run for minutes (a ledger still unread leaves the
run unknown, never wrong)."""


def _wake(sleeper: asyncio.Future[None]) -> None:
    """Wake a sleeping worker unless something else already has: its timer and a
    finishing worker may both fire in one loop iteration, before it cancels the timer."""
    if not sleeper.done():
        sleeper.set_result(None)


@dataclass
class RunCounters:
    """Live figures for progress display and the closing summary."""

    ok: int = 0
    fail: int = 0
    info: int = 0
    faults: list[str] = field(default_factory=list)
    fault_errors: list[str] = field(default_factory=list)
    phase: str = "starting"
    in_force: dict[str, set[str]] = field(default_factory=dict)
    """Fault kind -> the nodes it holds now (started, not yet stopped or healed)."""
    listener: Callable[[], None] | None = None
    """Called after every completed op (the simulation's progress: it has no wall clock
    of its own to report on)."""

    def count(self, kind: str) -> None:
        setattr(self, kind, getattr(self, kind) + 1)
        if self.listener is not None:
            self.listener()

    def fault_done(self, f: str, value: Any) -> None:
        """Track what a proven fault op leaves in force."""
        nodes = (value or {}).get("nodes") if isinstance(value, dict) else None
        names = {str(n) for n in nodes} if isinstance(nodes, list) else set()
        kind = STEP_KIND.get(f)
        if kind is None:
            return
        if f == START_STOP[kind][0]:
            self.in_force.setdefault(kind, set()).update(names)
        else:
            held = self.in_force.get(kind, set())
            held -= names if names else held.copy()
            if not held:
                self.in_force.pop(kind, None)


def _brief(value: Any) -> str:
    """A fault op's value without its proof (which goes to the history in full)."""
    if isinstance(value, dict):
        return str({k: v for k, v in value.items() if k != "proof"})
    return str(value)


@dataclass
class Controller:
    """One run's moving parts; `run()` drives them to completion."""

    history: HistoryWriter
    workload: Workload
    agents: list[tuple[str, str, int]]
    nemesis: Nemesis
    fault_schedule: Generator | None
    seed: int
    concurrency: int
    time_limit: float
    op_timeout: float
    rate: float
    wait_for_cluster: Callable[[], None] | None = None
    """Returns once the cluster serves again after the heal; raises if it does not."""
    counters: RunCounters = field(default_factory=RunCounters)
    connect: Callable[[str, str, int], Any] = AgentConnection
    """Opens a worker's connection to an agent (the sim runtime's agents are in-process)."""
    bookie_names: dict[str, str] = field(default_factory=dict)
    """Bookie id (`host:port`, as ledger metadata names it) -> node name (`b1`): the
    ensembles of create, close and recover are recorded by name (docs/history.md §2)."""
    hush: Callable[[bool], None] | None = None
    """The simulation's perturbation switch (True: off): off while the progress check
    runs, on again after. A runtime that passes one is idle after the heal — nothing but
    the product can delay an op — so the check's timeouts count (`after_heal.idle`);
    real runtimes pass none and only definite errors count (checkers/liveness.py)."""
    _held: dict[tuple[str, Any, Any], None] = field(default_factory=dict)
    """(agent, ledger, term) of every write handle an agent holds: created or taken over
    there and not closed since (docs/history.md §2, the held writers' closes)."""
    _outstanding: int = 0
    _sleepers: dict[asyncio.Future[None], None] = field(default_factory=dict)
    """Workers waiting for a generator's due time; a worker that finishes wakes them, in
    the order they went to sleep (a set's order would vary between runs of one seed)."""

    @classmethod
    def for_test(
        cls,
        spec: TestSpec,
        *,
        history: HistoryWriter,
        workload: Workload,
        agents: list[tuple[str, str, int]],
        nemesis: Nemesis,
        fault_schedule: Generator | None,
        counters: RunCounters,
        bookie_names: dict[str, str],
        **seams: Any,
    ) -> Controller:
        """The controller of `spec`'s run, whichever runtime runs it: the seed, workers,
        length, rate and op timeout are the spec's; the parts are the runtime's, and
        `seams` (`wait_for_cluster`, `connect`) what differs between real and simulated
        nodes."""
        return cls(
            history=history,
            workload=workload,
            agents=agents,
            nemesis=nemesis,
            fault_schedule=fault_schedule,
            seed=spec.seed,
            concurrency=spec.concurrency,
            time_limit=spec.time_limit,
            op_timeout=spec.op_timeout,
            rate=spec.rate,
            counters=counters,
            bookie_names=bookie_names,
            **seams,
        )

    async def run(self) -> None:
        client_rng = random.Random(self.seed)
        nemesis_rng = random.Random(self.seed ^ 0x5EED)
        parts = [clients(self.workload.generator().stagger(1.0 / self.rate))]
        if self.fault_schedule is not None:
            parts.append(nemesis(self.fault_schedule))
        gen = interleave(*parts).time_limit(self.time_limit)
        self.counters.phase = "running"
        tasks = [
            asyncio.create_task(self._worker(i, gen, client_rng)) for i in range(self.concurrency)
        ]
        if self.fault_schedule is not None:
            tasks.append(asyncio.create_task(self._nemesis_worker(gen, nemesis_rng)))
        try:
            await asyncio.gather(*tasks)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            self.counters.phase = "healing"
            healed = await self.heal()
        self.counters.phase = "final reads"
        await self._final_reads()
        if healed:  # after an unproven heal a stall proves nothing: not even tried
            self.counters.phase = "progress check"
            await self._progress_check()
        self.counters.phase = "done"

    def _context(self, process: int | str, rng: random.Random) -> Context:
        return Context(self.history.elapsed_s(), process, rng, self._outstanding)

    async def _worker(self, worker: int, gen: Generator, rng: random.Random) -> None:
        name, host, port = self.agents[worker % len(self.agents)]
        conn = self.connect(name, host, port)
        process = worker
        try:
            while (op := gen.op(self._context(process, rng))) is not None:
                if isinstance(op, Pending):
                    await self._idle(op)
                    continue
                kind = await self._execute(conn, process, op)
                if kind == "info":
                    process += self.concurrency
        finally:
            conn.close()
            self._wake_sleepers()

    async def _idle(self, pending: Pending) -> None:
        """Wait until the generator's answer may change: its due time (or a worker's end,
        which may end the whole generator), or soon when it waits on no clock."""
        delay = None if pending.until is None else pending.until - self.history.elapsed_s()
        if delay is None or delay <= 0:  # no clock, or a time already come: poll, never spin
            await asyncio.sleep(IDLE_POLL_S)
            return
        loop = asyncio.get_running_loop()
        wake: asyncio.Future[None] = loop.create_future()
        timer = None
        if delay < float("inf"):
            timer = loop.call_later(max(delay, MIN_WAIT_S), _wake, wake)
        self._sleepers[wake] = None
        try:
            await wake
        finally:
            self._sleepers.pop(wake, None)
            if timer is not None:
                timer.cancel()

    def nudge(self) -> None:
        """Something other than the clock may have changed a generator's answer (in the
        simulation, a probe fired a triggered fault): let every idle worker ask again."""
        self._wake_sleepers()

    def _wake_sleepers(self) -> None:
        for wake in self._sleepers:
            _wake(wake)

    async def _execute(self, conn: AgentConnection, process: int, op: dict[str, Any]) -> str:
        """Run a workload's `op` as `process`, recorded; the workload hears of it."""
        kind, result, error = await self._call(conn, process, op)
        self.workload.observe(process, op, kind, result, error)
        return kind

    async def _call(
        self, conn: AgentConnection, process: int, op: dict[str, Any]
    ) -> tuple[str, Any, str | None]:
        """Run `op` as `process`, recorded in the history: (type, value, error)."""
        value = op.get("value") or {}
        self.history.record("invoke", process, op["f"], value, node=conn.name)
        self._outstanding += 1
        try:
            kind, result, error = await conn.call(op["f"], value, self.op_timeout)
        finally:
            self._outstanding -= 1
        if kind == "ok" and isinstance(result, dict) and "ensembles" in result:
            result = {**result, "ensembles": self._by_name(result["ensembles"])}
        self.history.record(
            kind, process, op["f"], result if kind == "ok" else value, error=error, node=conn.name
        )
        self.counters.count(kind)
        if kind == "ok" and op["f"] in ("create", "take-over"):
            self._held[(conn.name, result["ledger"], result.get("term"))] = None
        elif op["f"] == "close":  # the agent lets go of the handle whatever the outcome
            self._held.pop((conn.name, value.get("ledger"), value.get("term")), None)
        return kind, result, error

    def _by_name(self, ensembles: list[list[Any]]) -> list[list[Any]]:
        """Fragments with node names for bookie ids (an unknown id stays as it is)."""
        names = self.bookie_names
        return [[first, [names.get(b, b) for b in bookies]] for first, bookies in ensembles]

    async def _nemesis_worker(self, gen: Generator, rng: random.Random) -> None:
        try:
            while (op := gen.op(self._context("nemesis", rng))) is not None:
                if isinstance(op, Pending):
                    await self._idle(op)
                    continue
                await self._fault(op)
        finally:
            self._wake_sleepers()

    async def _fault(self, op: dict[str, Any]) -> None:
        self.history.record("invoke", "nemesis", op["f"], op.get("value"))
        try:
            value = await self.nemesis.invoke(op)
        except asyncio.CancelledError:  # the run ends mid-fault: its effect is unknown
            message = "interrupted before the fault was proven"
            self.history.record("info", "nemesis", op["f"], op.get("value"), error=message)
            self.counters.fault_errors.append(f"{op['f']}: {message}")
            raise
        except Exception as exc:  # FaultNotProven or a runtime error: recorded, never silent
            message = f"{type(exc).__name__}: {exc}"
            self.history.record("info", "nemesis", op["f"], op.get("value"), error=message)
            self.counters.fault_errors.append(f"{op['f']}: {message}")
            log.warning("fault %s %s not proven: %s", op["f"], op.get("value"), message)
            return
        self.history.record("info", "nemesis", op["f"], value)
        self.counters.faults.append(op["f"])
        self.counters.fault_done(op["f"], value)
        log.info("fault %s %s", op["f"], _brief(value))

    async def heal(self) -> bool:
        """Undo every fault still in force, recorded as a `heal` nemesis op with proofs;
        whether it was proven."""
        self.history.record("invoke", "nemesis", "heal", None)
        proofs = None
        try:
            proofs = await self.nemesis.heal()
            if self.wait_for_cluster is not None:  # a heal that leaves it down did not heal
                await asyncio.to_thread(self.wait_for_cluster)
        except Exception as exc:  # recorded, never silent; with the proofs if the wait failed
            message = f"{type(exc).__name__}: {exc}"
            done = None if proofs is None else {"proof": proofs}
            self.history.record("info", "nemesis", "heal", done, error=message)
            self.counters.fault_errors.append(f"heal: {message}")
            log.warning("heal not proven: %s", message)
            return False
        self.history.record("info", "nemesis", "heal", {"proof": proofs})
        self.counters.in_force.clear()
        log.info("healed: %s", [p.get("f") for p in proofs or [] if isinstance(p, dict)])
        return True

    async def _final_reads(self) -> None:
        """The workload's final ops, each retried: a closed read of every ledger (the
        authoritative content), then audits of their copies."""
        conn = self.connect(*self.agents[0])
        process = 10 * self.concurrency + 1_000_000  # clear of every worker's ids
        try:
            for op in self.workload.final_ops():
                for attempt in range(FINAL_READ_ATTEMPTS):
                    kind = await self._execute(conn, process, op)
                    if kind == "info":
                        process += 1
                    if kind == "ok":
                        break
                    await asyncio.sleep(FINAL_READ_BACKOFF_S * (attempt + 1))
        finally:
            conn.close()

    async def _progress_check(self) -> None:
        """After the final reads: can the healed cluster still do a ledger's whole life?
        Attempts (ops tagged `after_heal`, docs/history.md §2) until one succeeds; the
        `stuck-after-heal` checker judges them. The workload never hears of these ledgers;
        one an attempt left open or unread is read closed here, so it is checked too."""
        writer = self.connect(*self.agents[0])
        reader = self.connect(*self.agents[-1])  # a second client where there is one
        processes = itertools.count(10 * self.concurrency + 2_000_000)  # one id per op
        unread: list[Any] = []
        if self.hush is not None:
            self.hush(True)
        try:
            if self.hush is not None:
                await self._close_held(processes)
            for attempt in range(1, PROGRESS_ATTEMPTS + 1):
                await asyncio.sleep(PROGRESS_BACKOFF_S * (attempt - 1))
                tag = {"attempt": attempt, "idle": self.hush is not None}
                done, left = await self._progress_attempt(writer, reader, processes, tag)
                unread += left
                if done:
                    break
            for ledger in unread:
                op = {"f": "read", "value": {"ledger": ledger, "mode": "closed"}}
                for attempt in range(PROGRESS_READ_ATTEMPTS):
                    if (await self._call(reader, next(processes), op))[0] == "ok":
                        break
                    await asyncio.sleep(FINAL_READ_BACKOFF_S * (attempt + 1))
        finally:
            if self.hush is not None:
                self.hush(False)
            writer.close()
            reader.close()

    async def _close_held(self, processes: Iterator[int]) -> None:
        """Close every write handle the run left open, as a client shutting down does —
        only where nothing but the product can delay an op (the simulation, perturbation
        off): a writer whose adds or ensemble change hang forever (a crashed background
        task, a future never completed) cannot drain, and its close then never completes
        (`writer-stuck-after-heal`), where the run's own timeouts of it are valid."""
        agents = {agent[0]: agent for agent in self.agents}
        conns = {name: self.connect(*agent) for name, agent in agents.items()}
        tag = {"held": True, "idle": True}
        try:
            for name, ledger, term in list(self._held):
                value = {"ledger": ledger, **({} if term is None else {"term": term})}
                op = {"f": "close", "value": {**value, "after_heal": tag}}
                await self._call(conns[name], next(processes), op)
        finally:
            for conn in conns.values():
                conn.close()

    async def _progress_attempt(
        self,
        writer: AgentConnection,
        reader: AgentConnection,
        processes: Iterator[int],
        tag: dict[str, Any],
    ) -> tuple[bool, list[Any]]:
        """One attempt: ledger A created, appended, closed, read back; ledger B created,
        appended, read closed by the other client (recovering it). Stops at the first op
        that is not ok; returns whether all were, and the ledger it stopped on, if any."""
        for closes in (True, False):
            create = {"f": "create", "value": {"mode": "bounded", "after_heal": tag}}
            kind, created, _ = await self._call(writer, next(processes), create)
            if kind != "ok":
                return False, []
            ledger = created["ledger"]
            steps = [
                (writer, {"f": "append", "value": {"ledger": ledger, "payload": payload}})
                for payload in (
                    f"after-heal-{tag['attempt']}-{ledger}-{n}" for n in range(PROGRESS_APPENDS)
                )
            ]
            if closes:
                steps.append((writer, {"f": "close", "value": {"ledger": ledger}}))
            steps.append((reader, {"f": "read", "value": {"ledger": ledger, "mode": "closed"}}))
            for conn, op in steps:
                op["value"]["after_heal"] = tag
                if (await self._call(conn, next(processes), op))[0] != "ok":
                    return False, [ledger]
        return True, []
