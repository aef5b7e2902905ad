"""The `sim` runtime: one whole test, deterministically, inside one Python process.

ZooKeeper, the bookies and the client agents run on a simulated event loop
(harness/sim/loop.py) with a simulated network, disks and clocks; the controller, the
workload, the generator and the checkers are the ones every runtime uses, and the
history has the same format, timed by the virtual clock. All randomness comes from one
`random.Random(seed)`: the workload's and the nemesis's rngs are the controller's own
seeded ones, the network and the disks draw from the simulation's, and so does the stream
the clients pick ensembles with. The bookies and clients are given the seeded bugs when
they are built; nothing is read from or written to the process's environment. So the
same seed gives a byte-identical history, in the same process or (with the same
PYTHONHASHSEED) in another.

A simulated second costs far less than a real one: nothing waits, time jumps to the
next timer when every node is idle.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import json
import random
import tempfile
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import checkers
from bookie_image import bugs
from bookie_image.probes import coverage, listening
from checkers.availability import final_heal
from checkers.result import MAX_CASES, Case, case
from core.generator import Generator, Workload
from core.history import HistoryWriter
from harness.controller import Controller, RunCounters
from harness.sim.buggify import Perturbation, perturbing
from harness.sim.cluster import SimCluster
from harness.sim.loop import CURRENT_NODE, SimLoop, waiting_at
from harness.sim.nemesis import SimNemesis
from harness.sim.net import Network
from harness.sim.triggers import SimTriggerView
from harness.testspec import TestSpec
from nemesis.base import Composed
from nemesis.kinds import PLUGIN_KINDS, RUNTIME_NEMESES
from nemesis.schedule import ScheduleReplay, hits_clients, schedule_kinds
from nemesis.triggers import TriggeredFaults, triggered_steps
from workloads import WORKLOADS

SETTLE_S = 1.0  # simulated seconds for the cluster to settle before the workload starts
HANG_S = 60.0
"""Simulated seconds the ops still running past their timeout get after the run (the
heal, the final reads, the progress check) before one is a `hang`: with every fault
healed and the perturbation off, each step of the product ends within its own timeout
(a bookie request's 2 s, a ZooKeeper call's 10 s), so a correct call ended long before."""


REPLAY_MIN_S = 2.0
"""The shortest run `SimSpec.as_replay` asks of a real runtime."""


@dataclass(frozen=True)
class SimSpec(TestSpec):
    """One simulated test: a `TestSpec` on the `sim` runtime, its fields meaning what they
    mean there (the workload settings shape the workload `run_sim` builds when it is given
    none), with the simulation's own defaults for a run's name, length, rate and op
    timeout, and what only the simulation has: the clients' `add_timeout`, the network's
    `latency` range and `loss` probability (see harness/sim/net.py), `buggify`:
    whether the product's perturbation points fire (harness/sim/buggify.py; the simulation
    only, so a replay on real nodes runs without them), and the seconds between the
    bookies' checkpoints (`checkpoint_interval`, the bookie's `checkpoint_interval_ms`).

    It is checked as a test only by `as_test` (a search draws settings, then fits them):
    building one checks just its seeded bugs."""

    name: str = "sim"
    runtime: str = field(default="sim", init=False)
    time_limit: float = 10.0
    rate: float = 100.0
    op_timeout: float = 5.0
    add_timeout: float = 2.0
    latency: tuple[float, float] = (0.0002, 0.002)
    loss: float = 0.0
    buggify: bool = False
    checkpoint_interval: float = 1.0

    def __post_init__(self) -> None:
        bugs.parse(",".join(self.bugs))  # a misspelt bug must not silently test nothing

    @classmethod
    def of(cls, test: TestSpec) -> SimSpec:
        """`bkchaos test --runtime sim`'s spec, simulated with the simulation's settings."""
        return cls(**{name: getattr(test, name) for name in _TEST_FIELDS})

    def as_test(self) -> TestSpec:
        """This test as `bkchaos test --runtime sim` runs it, checked by the same rules (a
        bad one is a UserError, exit 254 at the CLI)."""
        return TestSpec(runtime="sim", **{name: getattr(self, name) for name in _TEST_FIELDS})

    def as_replay(self, runtime: str) -> TestSpec:
        """This test as `bkchaos test --runtime RUNTIME` replays it on real nodes: the same
        workload, rate, seed and schedule, for at least `REPLAY_MIN_S` (real faults take
        real time: a docker power loss about 3 s). A schedule with a fault RUNTIME
        cannot inject replays on the first of `local` and `sim` that can (`local` faults
        no client agent)."""
        kinds = set(schedule_kinds(self.schedule))
        local = kinds <= set(RUNTIME_NEMESES["local"]) and not hits_clients(
            self.schedule, self.client_names()
        )
        if not kinds <= set(RUNTIME_NEMESES[runtime]) or (runtime == "local" and not local):
            runtime = "local" if local else "sim"
        return dataclasses.replace(
            self.as_test(), runtime=runtime, time_limit=max(REPLAY_MIN_S, self.time_limit)
        )


_TEST_FIELDS = tuple(f.name for f in dataclasses.fields(TestSpec) if f.name != "runtime")
"""What a `SimSpec` and a `TestSpec` have in common, the runtime aside."""


@dataclass
class SimResult:
    results: dict[str, Any]
    simulated_s: float
    errors: list[dict[str, Any]]


def _scratch() -> tempfile.TemporaryDirectory[str]:
    """A scratch dir for the bookies' SQLite indexes, in memory where there is one."""
    shm = Path("/dev/shm")
    return tempfile.TemporaryDirectory(prefix="bkchaos-sim-", dir=shm if shm.is_dir() else None)


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
    would). Steps of `spec.schedule` triggered by probes (nemesis/triggers.py) fire
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

    hushed = False

    def heard(name: str, fields: dict[str, Any]) -> None:
        if hushed:  # the progress check's probes say nothing of the run's coverage
            return
        probes[name] += 1
        if triggers is not None:
            triggers.on_probe(name, fields, CURRENT_NODE.get())

    def hush(off: bool) -> None:
        """The controller's switch for the progress check after the heal: the
        perturbation (if any) off while it runs, so only the product can make it fail,
        and its probes not counted (every run would reach the same recovery corners)."""
        nonlocal hushed
        hushed = off
        if perturbed is not None:
            perturbed.armed = not off

    loop = SimLoop()
    if on_progress is not None:
        counters.listener = lambda: on_progress(counters, loop.time())
    loop.network = Network(loop, random.Random(rng.getrandbits(64)), spec.latency, spec.loss)
    clients_rng = random.Random(rng.getrandbits(64))
    with (
        _scratch() as scratch,
        listening(heard),
        perturbing(spec.seed, spec.buggify) as perturbed,
    ):
        cluster = SimCluster(
            loop,
            Path(scratch),
            run_dir / "logs",
            bugs.Bugs(spec.bugs),
            clients_rng,
            bookies=spec.bookies,
            clients=spec.clients,
            add_timeout=spec.add_timeout,
            checkpoint_interval=spec.checkpoint_interval,
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
            faults = triggers = TriggeredFaults(SimTriggerView(cluster), triggered, faults)
        hung: list[dict[str, Any]] = []
        try:
            started_ns = round(loop.time() * 1e9)  # the history's time 0 (HistoryWriter)
            with HistoryWriter(history_path, clock=lambda: round(loop.time() * 1e9)) as history:
                controller = functools.partial(
                    _controller,
                    triggers,
                    spec,
                    history=history,
                    workload=workload or _default_workload(spec),
                    agents=[(name, "sim", 0) for name in cluster.agents],
                    nemesis=nemesis,
                    fault_schedule=faults,
                    counters=counters,
                    bookie_names={b.id: name for name, b in cluster.bookies.items()},
                    connect=cluster.connect,
                    hush=hush,
                )
                hung = loop.run_until_complete(
                    _settled(cluster, controller, perturbed, hush, started_ns)
                )
        finally:
            cluster.stop()
            loop.run_until_complete(asyncio.sleep(SETTLE_S))  # let the cancellations land
            loop.close()
    results = with_crashes(checkers.check(history_path), loop.errors)  # nemesis verdict too
    results = with_hangs(results, hung, history_path)
    results["sim"] = {
        "simulated_s": round(loop.time(), 6),
        "loop_errors": len(loop.errors),
        "late_ops": cluster.ran_on,
    }
    results["coverage"] = coverage(probes)
    if perturbed is not None:
        results["buggify"] = perturbed.summary()
    (run_dir / "results.json").write_text(json.dumps(results, indent=2, default=str))
    if loop.errors:
        lines = [json.dumps(e, default=str) for e in loop.errors]
        (run_dir / "logs" / "sim-errors.jsonl").write_text("\n".join(lines) + "\n")
    return SimResult(results, loop.time(), loop.errors)


def with_crashes(results: dict[str, Any], errors: list[dict[str, Any]]) -> dict[str, Any]:
    """`results` with the run's crashes of the product (harness.sim.loop.crash_of) as the
    anomaly `crash`, one case per distinct crash, at its first time (docs/anomalies.md): a
    finding of the simulated run, not of its history, so `bkchaos check` of the history
    alone does not repeat it; its sub-result `checkers.crash` is what `check --write`
    keeps, as it keeps the simulation's figures, and logs/sim-errors.jsonl has every one."""
    first: dict[str, dict[str, Any]] = {}
    for error in errors:
        if crash := error.get("crash"):
            seen = first.setdefault(crash, {"time_s": round(error["time"], 6), "times": 0})
            seen["times"] += 1
    cases = [
        {**seen, "ops": [], "explanation": f"the product raised {crash}, and nothing handled it"}
        for crash, seen in first.items()
    ]
    return _with_finding(results, "crash", cases)


def with_hangs(
    results: dict[str, Any], hung: list[dict[str, Any]], history_path: Path
) -> dict[str, Any]:
    """`results` with the ops still running `HANG_S` after the run (`hung`, from
    `_settled`) as the anomaly `hang`, one case per op (docs/anomalies.md) — judged only
    after a final heal that completed with its proof, so every node was up and serving;
    otherwise `checkers.hang` says why not. Like `crash`, a finding of the simulated run,
    not of its history; each case cites the op's invoke and its `ETIMEOUT` completion."""
    if not hung:
        return results
    h = checkers.index_history(checkers.read_ops(history_path))
    heal = final_heal(h)
    if heal is None:
        why = {"valid": True, "not_judged": "no final heal completed with its proof"}
        return {**results, "checkers": {**results["checkers"], "hang": {**why, "hung": hung}}}
    ops = {(c.inv.node, c.inv.f, c.inv.time): c.ops for c in h.calls}
    cases = [
        case(
            f"after the final heal (op {heal.done.index}), with every node up and nothing "
            f"else running, agent {op['agent']}'s {op['f']} of ledger {op['ledger']} "
            f"(invoked at {op['invoked_s']:.3f} s, answered ETIMEOUT) was still running "
            f"{HANG_S:.0f} simulated s after the run ended, waiting at "
            f"{op['waiting_at'] or 'no line of the product'}: a call that never ends.",
            [*heal.ops, *ops.get((op["agent"], op["f"], op["time"]), [])],
            **{k: v for k, v in op.items() if k != "time"},
        )
        for op in hung
    ]
    return _with_finding(results, "hang", cases)


def _with_finding(results: dict[str, Any], name: str, cases: list[Case]) -> dict[str, Any]:
    """`results` with the simulation's own anomaly `name` (not a checker's: the history
    does not hold it) and its sub-result `checkers.<name>`, which `check --write` keeps."""
    if not cases:
        return results
    kept = cases[:MAX_CASES]
    found = {
        "valid": False,
        "anomaly_types": [name],
        "anomalies": {name: kept},
        "anomaly_counts": {name: len(cases)},
    }
    anomalies = {**results.get("anomalies", {}), name: kept}
    return {
        **results,
        "valid": False,
        "anomaly_types": sorted(anomalies),
        "anomalies": anomalies,
        "anomaly_counts": {**results.get("anomaly_counts", {}), name: len(cases)},
        "checkers": {**results.get("checkers", {}), name: found},
    }


def _controller(triggers: TriggeredFaults | None, spec: SimSpec, **parts: Any) -> Controller:
    """The run's controller; triggered faults arm on its clock and wake its nemesis
    worker when they fire."""
    controller = Controller.for_test(spec, **parts)
    if triggers is not None:
        triggers.wake = controller.nudge
        triggers.now = controller.history.elapsed_s
    return controller


def _default_workload(spec: SimSpec) -> Workload:
    """`spec.workload` as `bkchaos test` would build it with default options."""
    return WORKLOADS[spec.workload](spec.as_test())


async def _settled(
    cluster: SimCluster,
    controller: Callable[[], Controller],
    perturbed: Perturbation | None,
    hush: Callable[[bool], None],
    started_ns: int,
) -> list[dict[str, Any]]:
    """Start the cluster, let it settle (bookies register and checkpoint), arm the
    perturbation if any, then run the test (the controller is made here, inside the
    simulated loop). Then, the perturbation off, give the ops still running past their
    timeout `HANG_S` to end; returns those that did not (`with_hangs` judges them), each
    with its history invoke's `time` (ns since `started_ns`) and where it waits."""
    await cluster.start()
    await asyncio.sleep(SETTLE_S)
    if perturbed is not None:
        perturbed.armed = True
    await controller().run()
    hush(True)
    deadline = asyncio.get_running_loop().time() + HANG_S
    # An op of an agent resumed at the heal may outlive its timeout only now: wait for it too.
    while (late := [c.task for c in cluster.late_calls() if not c.task.done()]) and (
        left := deadline - asyncio.get_running_loop().time()
    ) > 0:
        await asyncio.wait(late, timeout=left)
    return [
        {
            "agent": call.agent,
            "f": call.f,
            "ledger": call.value.get("ledger"),
            "invoked_s": round(call.invoked_s, 6),
            "time": round(call.invoked_s * 1e9) - started_ns,
            "waiting_at": waiting_at(call.task),
        }
        for call in cluster.late_calls()
    ]
