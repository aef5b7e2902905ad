"""The `sim` runtime: one whole test, deterministically, inside one Python process.

ZooKeeper, the bookies and the client agents run on a simulated event loop
(harness/sim/loop.py) with a simulated network, disks and clocks; the controller, the
workload, the generator and the checkers are the ones every runtime uses, and the
history has the same format, timed by the virtual clock. All randomness comes from one
`random.Random(seed)`: the workload's and the nemesis's rngs are the controller's own
seeded ones, the network and the disks draw from the simulation's, and the module-level
`random` the client uses to pick ensembles is seeded from it for the run. So the same
seed gives a byte-identical history, in the same process or (with the same
PYTHONHASHSEED) in another.

A simulated second costs far less than a real one: nothing waits, time jumps to the
next timer when every node is idle.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import json
import os
import random
import tempfile
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import checkers
from bookie_image import bugs
from bookie_image.probes import coverage, listening
from checkers.result import FORMAT
from core.generator import Generator, Workload
from core.history import HistoryWriter
from harness.controller import Controller, RunCounters
from harness.sim.buggify import Perturbation, perturbing
from harness.sim.cluster import SimCluster
from harness.sim.loop import CURRENT_NODE, SimLoop
from harness.sim.nemesis import SimNemesis
from harness.sim.net import Network
from harness.sim.triggers import TriggeredFaults, triggered_steps
from harness.testspec import TestSpec
from nemesis.base import Composed
from nemesis.kinds import PLUGIN_KINDS
from nemesis.schedule import ScheduleReplay, is_triggered
from workloads import WORKLOADS

SETTLE_S = 1.0  # simulated seconds for the cluster to settle before the workload starts


REPLAY_MIN_S = 2.0
"""The shortest run `SimSpec.as_replay` asks of a real runtime."""


@dataclass(frozen=True)
class SimSpec:
    """One simulated test: the fields mean what they mean in `TestSpec` (`workload`,
    `id_bits`, `pipeline`, the quorums and the shares of takeovers and writer crashes shape
    the workload `run_sim` builds when it is given none),
    plus the network's `latency` range and `loss` probability (see harness/sim/net.py), and
    `buggify`: whether the product's perturbation points fire (harness/sim/buggify.py; the
    simulation only, so a replay on real nodes runs without them)."""

    seed: int = 0
    time_limit: float = 10.0
    bookies: int = 3
    clients: int = 2
    concurrency: int = 4
    rate: float = 100.0
    op_timeout: float = 5.0
    add_timeout: float = 2.0
    bugs: tuple[str, ...] = ()
    schedule: tuple[dict[str, Any], ...] = ()
    workload: str = "ledger"
    id_bits: int = 64
    pipeline: int = 1
    write_quorum: int = 2
    ack_quorum: int = 2
    takeovers: float | None = None
    writer_crashes: float = 0.0
    latency: tuple[float, float] = (0.0002, 0.002)
    loss: float = 0.0
    buggify: bool = False
    name: str = "sim"
    runtime: str = field(default="sim", init=False)

    def __post_init__(self) -> None:
        bugs.parse(",".join(self.bugs))  # a misspelt bug must not silently test nothing

    def as_test(self) -> TestSpec:
        """The `bkchaos test --runtime sim` spec of this test's workload settings, checked
        by the same rules (a bad one is a UserError, exit 254 at the CLI)."""
        return TestSpec(
            runtime="sim",
            workload=self.workload,
            id_bits=self.id_bits,
            pipeline=self.pipeline,
            write_quorum=self.write_quorum,
            ack_quorum=self.ack_quorum,
            takeovers=self.takeovers,
            writer_crashes=self.writer_crashes,
            bookies=self.bookies,
            clients=self.clients,
            concurrency=self.concurrency,
            bugs=self.bugs,
        )

    def as_replay(self, runtime: str) -> TestSpec:
        """This test as `bkchaos test --runtime RUNTIME` replays it on real nodes: the same
        workload, rate, seed and schedule, for at least `REPLAY_MIN_S` (real faults take
        real time: a docker power loss about 3 s). A schedule with faults triggered by
        probes replays only in the simulation: then RUNTIME is `sim`."""
        if any(is_triggered(step) for step in self.schedule):
            runtime = "sim"
        return dataclasses.replace(
            self.as_test(),
            name=self.name,
            runtime=runtime,
            seed=self.seed,
            time_limit=max(REPLAY_MIN_S, self.time_limit),
            rate=self.rate,
            op_timeout=self.op_timeout,
            schedule=self.schedule,
        )

    def to_json(self) -> str:
        return json.dumps({"format": FORMAT, **dataclasses.asdict(self)}, indent=2)


@dataclass
class SimResult:
    results: dict[str, Any]
    simulated_s: float
    errors: list[dict[str, Any]]


@contextlib.contextmanager
def _process_state(spec: SimSpec, rng: random.Random) -> Iterator[Path]:
    """What the product reads from the process, set for one run and restored after: the
    seeded-bug switch, the module-level random, and a scratch dir for SQLite indexes."""
    saved_random = random.getstate()
    saved_bugs = os.environ.get(bugs.ENV_VAR)
    random.seed(rng.getrandbits(64))
    os.environ[bugs.ENV_VAR] = ",".join(spec.bugs)
    shm = Path("/dev/shm")
    try:
        with tempfile.TemporaryDirectory(
            prefix="bkchaos-sim-", dir=shm if shm.is_dir() else None
        ) as scratch:
            yield Path(scratch)
    finally:
        random.setstate(saved_random)
        if saved_bugs is None:
            os.environ.pop(bugs.ENV_VAR, None)
        else:
            os.environ[bugs.ENV_VAR] = saved_bugs


def run_sim(
    spec: SimSpec,
    run_dir: Path,
    workload: Workload | None = None,
    faults: Generator | None = None,
    test_json: str | None = None,
    on_progress: Callable[[RunCounters, float], None] | None = None,
) -> SimResult:
    """Run `spec` into `run_dir` (test.json, history.jsonl, results.json, logs/).

    By default `spec.workload` runs with its default settings and `spec.schedule` is
    replayed; a `bkchaos test --runtime sim` run passes its own workload and seeded fault
    schedule, and its TestSpec as the `test_json` to record (so it replays as a real run
    would). Steps of `spec.schedule` triggered by probes (harness/sim/triggers.py) fire
    whichever generator drives the clock-driven faults. `on_progress`
    hears of every completed op, with the simulated time (it schedules nothing in the
    simulated loop, so a seed replays the same with or without it)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "test.json").write_text(test_json or spec.to_json())
    if faults is None and spec.schedule:
        faults = ScheduleReplay(tuple(spec.schedule))
    history_path = run_dir / "history.jsonl"
    history_path.unlink(missing_ok=True)
    counters = RunCounters()
    rng = random.Random(spec.seed)
    probes: Counter[str] = Counter()
    triggers: TriggeredFaults | None = None

    def heard(name: str, fields: dict[str, Any]) -> None:
        probes[name] += 1
        if triggers is not None:
            triggers.on_probe(name, fields, CURRENT_NODE.get())

    loop = SimLoop()
    if on_progress is not None:
        counters.listener = lambda: on_progress(counters, loop.time())
    loop.network = Network(loop, random.Random(rng.getrandbits(64)), spec.latency, spec.loss)
    with (
        _process_state(spec, rng) as scratch,
        listening(heard),
        perturbing(spec.seed, spec.buggify) as perturbed,
    ):
        cluster = SimCluster(
            loop,
            scratch,
            run_dir / "logs",
            bookies=spec.bookies,
            clients=spec.clients,
            add_timeout=spec.add_timeout,
        )
        nemesis = Composed(
            [
                SimNemesis(cluster, random.Random(rng.getrandbits(64))),
                *(
                    k.sim_nemesis(cluster, random.Random(rng.getrandbits(64)))
                    for k in PLUGIN_KINDS
                    if k.sim_nemesis
                ),
            ]
        )
        if triggered := triggered_steps(spec.schedule):
            faults = triggers = TriggeredFaults(cluster, triggered, faults)
        try:
            with HistoryWriter(history_path, clock=lambda: round(loop.time() * 1e9)) as history:
                controller = functools.partial(
                    _controller,
                    triggers,
                    history=history,
                    workload=workload or _default_workload(spec),
                    agents=[(name, "sim", 0) for name in cluster.agents],
                    nemesis=nemesis,
                    fault_schedule=faults,
                    seed=spec.seed,
                    concurrency=spec.concurrency,
                    time_limit=spec.time_limit,
                    op_timeout=spec.op_timeout,
                    rate=spec.rate,
                    counters=counters,
                    connect=cluster.connect,
                    bookie_names={b.id: name for name, b in cluster.bookies.items()},
                )
                loop.run_until_complete(_settled(cluster, controller, perturbed))
        finally:
            cluster.stop()
            loop.run_until_complete(asyncio.sleep(SETTLE_S))  # let the cancellations land
            loop.close()
    results = checkers.check(history_path)  # the nemesis verdict too, from the history
    results["sim"] = {"simulated_s": round(loop.time(), 6), "loop_errors": len(loop.errors)}
    results["coverage"] = coverage(probes)
    if perturbed is not None:
        results["buggify"] = perturbed.summary()
    (run_dir / "results.json").write_text(json.dumps(results, indent=2, default=str))
    if loop.errors:
        lines = [json.dumps(e, default=str) for e in loop.errors]
        (run_dir / "logs" / "sim-errors.jsonl").write_text("\n".join(lines) + "\n")
    return SimResult(results, loop.time(), loop.errors)


def _controller(triggers: TriggeredFaults | None, **settings: Any) -> Controller:
    """The run's controller; triggered faults arm on its clock and wake its nemesis
    worker when they fire."""
    controller = Controller(**settings)
    if triggers is not None:
        triggers.wake = controller.nudge
        triggers.now = controller.history.elapsed_s
    return controller


def _default_workload(spec: SimSpec) -> Workload:
    """`spec.workload` as `bkchaos test` would build it with default options."""
    return WORKLOADS[spec.workload](spec.as_test())


async def _settled(
    cluster: SimCluster, controller: Callable[[], Controller], perturbed: Perturbation | None
) -> None:
    """Start the cluster, let it settle (bookies register and checkpoint), arm the
    perturbation if any, then run the test (the controller is made here, inside the
    simulated loop)."""
    await cluster.start()
    await asyncio.sleep(SETTLE_S)
    if perturbed is not None:
        perturbed.armed = True
    await controller().run()
