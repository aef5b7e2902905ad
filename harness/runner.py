"""`run_test`: a TestSpec in, a checked run directory out.

Start the cluster, run the controller, always heal and tear down (also on Ctrl-C and
SIGTERM), collect the node logs, check the history and write `results.json`. An
interrupted run still writes and checks what it recorded.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import checkers
from bookie_image.client.metadata import LedgerMetadata
from core.generator import Generator
from core.history import HistoryWriter
from core.signals import sigterm_as_interrupt
from harness.controller import Controller, RunCounters
from harness.coverage import count_logs
from harness.progress import ThrottledProgress, both, run_log
from harness.report import try_write_report
from harness.runtime import make_cluster
from harness.runtime.local import LocalCluster
from harness.runtime.ownership import controller_id
from harness.runtime.probe_tail import cluster_triggered_faults, following_probes
from harness.store import (
    RUN_RECORD,
    collect_logs,
    link_current,
    link_latest,
    new_run_dir,
    unlink_current,
)
from harness.testspec import TestSpec, parsed_grudge
from nemesis.base import Composed, FaultNotProven
from nemesis.clock import ClockNemesis
from nemesis.combined import CombinedCycle, NestedCycle
from nemesis.disk import CorruptNemesis, DiskFullNemesis, PowerLossNemesis, WipeNemesis
from nemesis.kinds import PLUGIN_KINDS
from nemesis.net import PacketNemesis, PartitionNemesis, parsed_packet
from nemesis.process import KillNemesis, PauseNemesis
from nemesis.schedule import FaultCycle, ScheduleReplay, Targets
from nemesis.triggers import TriggeredFaults
from workloads import make_workload

log = logging.getLogger("bkchaos.runner")
CLUSTER_READY_TIMEOUT_S = 60.0
EXIT_CODES = {True: 0, False: 1, "unknown": 2}


def exit_code(results: dict[str, Any]) -> int:
    return EXIT_CODES[results["valid"]]


def _wait_until_serving(cluster: LocalCluster) -> Callable[[], None]:
    """After the heal: wait until ZooKeeper serves and every bookie is registered, or
    raise FaultNotProven saying what is still down (the final reads need them)."""

    def wait() -> None:
        deadline = time.monotonic() + CLUSTER_READY_TIMEOUT_S
        while True:
            state = cluster.status()
            down = [b["name"] for b in state["bookies"] if not b["registered"]]
            if state["zk_serving"] and not down:
                return
            if time.monotonic() > deadline:
                break
            time.sleep(0.2)
        missing = ["ZooKeeper not serving"] if not state["zk_serving"] else []
        missing += [f"{name} not registered" for name in down]
        raise FaultNotProven(
            f"the cluster does not serve {CLUSTER_READY_TIMEOUT_S:.0f}s after the heal: "
            + ", ".join(missing)
        )

    return wait


def _nemesis(cluster: Any, seed: int) -> Composed:
    """Every nemesis; a kind the runtime cannot inject never gets here, as the spec's
    validation refuses it (nemesis.kinds). They heal in this order: the network
    first, so that a bookie restarted by a later heal (power-on, restore) reaches ZooKeeper
    instead of giving up on it while a partition still stands."""
    return Composed(
        [
            PartitionNemesis(cluster, seed),
            PacketNemesis(cluster),
            PauseNemesis(cluster),
            KillNemesis(cluster),
            WipeNemesis(cluster),
            PowerLossNemesis(cluster),
            CorruptNemesis(cluster, seed),
            DiskFullNemesis(cluster),
            ClockNemesis(cluster, seed),
            *(k.nemesis(cluster, seed) for k in PLUGIN_KINDS if k.nemesis),
        ]
    )


def _cluster_schedule(spec: TestSpec, cluster: Any) -> Generator | None:
    """The run's fault schedule, aimed at the nodes of a real cluster (with the steps a
    protocol probe triggers: harness/runtime/probe_tail.py)."""
    if triggered := cluster_triggered_faults(spec.schedule, cluster):
        return triggered
    if spec.targets in ("zk", "client"):  # docker and ssh only (TestSpec refuses the rest)
        pool = tuple(n.name for n in cluster.with_role(spec.targets))
    else:
        pool = tuple(b.name for b in cluster.bookies)
    live = (lambda: writer_bookies(cluster)) if spec.targets == "writer" else None
    return fault_schedule(spec, pool, live)


def fault_schedule(
    spec: TestSpec, pool: tuple[str, ...], live: Callable[[], tuple[str, ...]] | None = None
) -> Generator | None:
    """Replay an explicit schedule, cycle one fault kind, or combine several, drawing the
    targets from `pool` (or hitting what `live` returns when each fault starts)."""
    if spec.schedule:
        return ScheduleReplay(spec.schedule)
    if not spec.nemesis:
        return None
    group = max(1, (len(pool) - 1) // 2) if spec.targets == "minority" else 1
    grudge = parsed_grudge(spec.grudge) if spec.grudge else ""
    packet = parsed_packet(spec.packet) if spec.packet else {}
    targets = Targets(pool, group, grudge, live, spec.corruption, packet)
    if spec.nemesis_order == "nested":
        return NestedCycle(spec.nemesis, pool, spec.nemesis_interval, targets)
    cycle = FaultCycle if len(spec.nemesis) == 1 else CombinedCycle
    return cycle(spec.nemesis, pool, spec.nemesis_interval, targets)


def writer_bookies(cluster: Any) -> tuple[str, ...]:
    """The bookies (node names) of the last fragment of the newest open ledger: where its
    writer is writing now. Empty while no ledger is open."""
    newest: tuple[int, LedgerMetadata] | None = None
    with cluster.zk_client() as zk:
        for child in zk.get_children(cluster.ledgers_root):
            data, stat = zk.get(f"{cluster.ledgers_root}/{child}")
            try:
                metadata = LedgerMetadata.from_json(data)
            except (ValueError, KeyError, TypeError):  # available/, idgen, cookies …
                continue
            if not metadata.closed and (newest is None or stat.ctime > newest[0]):
                newest = (stat.ctime, metadata)
    if newest is None:
        return ()
    _, bookies = newest[1].last_ensemble
    return tuple(sorted(cluster.node(bookie).name for bookie in bookies))


def run_test(
    spec: TestSpec,
    on_progress: Callable[[RunCounters, float], None] | None = None,
    log_level: int = logging.INFO,
) -> tuple[Path, dict[str, Any]]:
    """Run `spec` and return (run directory, results). While it runs, the store's
    `current` points at it and the controller's log goes to its `bkchaos.log` (progress
    lines included, every few seconds)."""
    run_dir = new_run_dir(Path(spec.store), spec.name)
    link_current(run_dir)
    try:
        with run_log(run_dir, log_level):
            log.info("run %s: %s", run_dir, json.dumps(json.loads(spec.to_json())))
            progress = both(on_progress, ThrottledProgress(log.info))
            if spec.runtime == "sim":  # run_sim records test.json itself
                results = _run_simulated(spec, run_dir, progress)
            else:
                results = _run_cluster(spec, run_dir, progress)
            log.info("verdict %s: %s", results["valid"], results.get("anomaly_types"))
    finally:
        unlink_current(run_dir)
    return run_dir, results


def _run_cluster(
    spec: TestSpec, run_dir: Path, on_progress: Callable[[RunCounters, float], None]
) -> dict[str, Any]:
    """`spec` on a real cluster: up, run, heal, down, check, report."""
    (run_dir / "test.json").write_text(spec.to_json())
    nodes_dir = run_dir / "nodes"
    cluster = make_cluster(spec, nodes_dir)
    _record_owner(run_dir, spec.runtime, cluster.run_id)
    history_path = run_dir / "history.jsonl"
    counters = RunCounters()
    interrupted = False
    with sigterm_as_interrupt(), HistoryWriter(history_path) as history:
        try:
            log.info("starting the %s cluster", spec.runtime)
            cluster.up()
            log.info("cluster up: run id %s", getattr(cluster, "run_id", None))
            schedule = _cluster_schedule(spec, cluster)
            controller = Controller.for_test(
                spec,
                history=history,
                workload=make_workload(spec),
                agents=[(a.name, a.host, a.port) for a in cluster.agents],
                nemesis=_nemesis(cluster, spec.seed),
                fault_schedule=schedule,
                counters=counters,
                bookie_names={b.id: b.name for b in cluster.bookies},
                wait_for_cluster=_wait_until_serving(cluster),
            )
            if isinstance(schedule, TriggeredFaults):  # armed on the run's clock
                schedule.wake, schedule.now = controller.nudge, history.elapsed_s
            asyncio.run(_with_progress(controller, history, on_progress, cluster))
        except KeyboardInterrupt:
            interrupted = True
            log.warning("interrupted: healing and tearing down")
        finally:
            cluster.down()
            log.info("cluster down")
            collect_logs(nodes_dir, run_dir)
            shutil.rmtree(nodes_dir, ignore_errors=True)
    results = checkers.check(history_path)  # the nemesis verdict too, from the history
    results["coverage"] = count_logs(run_dir / "logs")
    if interrupted:
        results["interrupted"] = True
    (run_dir / "results.json").write_text(json.dumps(results, indent=2, default=str))
    try_write_report(run_dir)  # a report failure is logged; the run and its results stay
    link_latest(run_dir)
    return results


def _record_owner(run_dir: Path, runtime: str, run_id: str | None) -> None:
    """RUN_RECORD: the run id every node of the run carries (none on the sim runtime) and
    the controller owning the run (harness/runtime/ownership.py): `bkchaos gc` reads it
    to tell whether the store's `current` link outlived its run."""
    record = {"run_id": run_id, "runtime": runtime, "owner": controller_id()}
    (run_dir / RUN_RECORD).write_text(json.dumps(record) + "\n")


def _run_simulated(
    spec: TestSpec, run_dir: Path, on_progress: Callable[[RunCounters, float], None]
) -> dict[str, Any]:
    """`spec` inside the deterministic simulation (harness/runtime/sim.py): the same
    workload, fault schedule and checkers, in virtual time; the results, stored as a real
    run's are (results.json, report, `latest`)."""
    from harness.runtime.sim import SimSpec, run_sim

    _record_owner(run_dir, spec.runtime, None)
    sim = SimSpec.of(spec)
    pool = tuple(spec.client_names() if spec.targets == "client" else spec.bookie_names())
    workload = make_workload(spec)
    faults = fault_schedule(spec, pool)
    results = run_sim(sim, run_dir, workload, faults, spec.to_json(), on_progress).results
    try_write_report(run_dir)
    link_latest(run_dir)
    return results


async def _with_progress(
    controller: Controller,
    history: HistoryWriter,
    on_progress: Callable[[RunCounters, float], None],
    cluster: Any,
) -> None:
    """Run the controller, reporting progress, and following the nodes' probes while it
    runs if its faults wait for them."""

    async def report() -> None:
        while True:
            on_progress(controller.counters, history.elapsed_s())
            await asyncio.sleep(0.5)

    faults = controller.fault_schedule
    following = (
        following_probes(cluster, faults, history.elapsed_s, asyncio.get_running_loop())
        if isinstance(faults, TriggeredFaults)
        else contextlib.nullcontext()
    )
    reporter = asyncio.create_task(report())
    try:
        with following:
            await controller.run()
    finally:
        reporter.cancel()
