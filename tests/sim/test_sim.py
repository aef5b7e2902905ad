"""The sim runtime: virtual time, determinism, a clean run that checks valid, and a seeded
bug that a simulated fault exposes."""

from __future__ import annotations

import asyncio
import json
import os
import random
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from harness.runtime.sim import SimSpec, run_sim
from harness.sim.disk import SimDisk, SimFileLayer
from harness.sim.loop import SimLoop, SimulationError
from harness.sim.nemesis import SimNemesis
from harness.sim.net import Network, Shaping

FAULTS = (
    {"at": 0.5, "f": "power-loss", "value": {"nodes": ["b1"]}},
    {"at": 1.0, "f": "power-on", "value": {"nodes": ["b1"]}},
    {"at": 1.2, "f": "start-partition", "value": {"nodes": ["b2"]}},
    {"at": 1.4, "f": "pause", "value": {"nodes": ["b3"]}},
    {"at": 1.9, "f": "resume", "value": {"nodes": ["b3"]}},
    {"at": 2.0, "f": "stop-partition", "value": {"nodes": ["b2"]}},
    {"at": 2.2, "f": "kill", "value": {"nodes": ["b3"]}},
    {"at": 2.5, "f": "clock-bump", "value": {"nodes": ["b2"], "delta_s": 30.0}},
    {"at": 2.6, "f": "corrupt", "value": {"nodes": ["b1"]}},
    {"at": 2.8, "f": "corrupt-restart", "value": {"nodes": ["b1"]}},
)
"""One of each kind of fault; the final phase heals what is still in force."""


def test_time_jumps_when_idle() -> None:
    loop = SimLoop()
    started = time.perf_counter()
    try:
        loop.run_until_complete(asyncio.sleep(3600))
        assert loop.time() == pytest.approx(3600)
    finally:
        loop.close()
    assert time.perf_counter() - started < 1


def test_a_clock_strobe_flips_the_offset_every_period_until_stopped() -> None:
    """`clock-strobe` in virtual time: the node's offset alternates between `delta_s` and
    none every `period_s`; `clock-strobe-stop` ends it and takes the offset away."""
    loop = SimLoop()
    cluster = SimpleNamespace(
        loop=loop, skews={}, bookies={"b1": SimpleNamespace(name="b1")}, nodes=["b1"]
    )
    nemesis = SimNemesis(cluster, random.Random(0))  # type: ignore[arg-type]

    async def strobe() -> tuple[list[float], dict[str, Any]]:
        value = {"nodes": ["b1"], "delta_s": 30.0, "period_s": 0.2}
        await nemesis.invoke({"f": "clock-strobe", "value": value})
        await asyncio.sleep(0.1)  # look between flips, never at one
        seen = []
        for _ in range(5):
            seen.append(cluster.skews["b1"])
            await asyncio.sleep(0.2)
        stopped = await nemesis.invoke({"f": "clock-strobe-stop", "value": {"nodes": ["b1"]}})
        await asyncio.sleep(1)
        return seen, stopped

    try:
        (seen, stopped) = loop.run_until_complete(strobe())
    finally:
        loop.close()
    assert seen == [30.0, 0.0, 30.0, 0.0, 30.0]
    assert stopped["proof"]["skews"] == {} and cluster.skews == {} and not nemesis.strobes


def test_threads_and_deadlocks_are_refused() -> None:
    loop = SimLoop()
    try:
        with pytest.raises(SimulationError, match="thread"):
            loop.run_until_complete(asyncio.to_thread(print))
        with pytest.raises(SimulationError, match="deadlock"):
            loop.run_until_complete(loop.create_future())
    finally:
        loop.close()


def test_a_paused_node_runs_nothing_until_resumed_and_a_kill_ends_the_pause() -> None:
    """SIGSTOP in virtual time: the node's timers and task steps wait (other nodes go on);
    SIGCONT runs the overdue ones at once; SIGKILL of a paused node still kills it."""
    loop = SimLoop()
    ticks: dict[str, list[float]] = {"b1": [], "b2": []}

    async def ticker(node: str) -> None:
        while True:
            ticks[node].append(round(loop.time(), 3))
            await asyncio.sleep(0.1)

    async def scenario() -> None:
        b1, b2 = loop.spawn("b1", ticker("b1")), loop.spawn("b2", ticker("b2"))
        await asyncio.sleep(0.35)
        loop.pause_node("b1")
        await asyncio.sleep(0.5)
        loop.resume_node("b1")
        await asyncio.sleep(0.25)
        loop.pause_node("b2")
        loop.kill_node("b2")  # its task is cancelled though paused
        await asyncio.sleep(0.3)
        assert b2.cancelled()
        b1.cancel()

    class NoNetwork:
        def kill(self, node: str) -> None:
            pass

    loop.network = NoNetwork()
    try:
        loop.run_until_complete(scenario())
    finally:
        loop.close()
    assert ticks["b1"] == [0.0, 0.1, 0.2, 0.3, 0.85, 0.95, 1.05, 1.15, 1.25, 1.35]
    assert ticks["b2"] == [round(0.1 * i, 3) for i in range(12)]  # up to 1.1, then killed
    assert not loop.paused


def test_power_loss_drops_exactly_the_unsynced_bytes(tmp_path: Path) -> None:
    disk = SimDisk(tmp_path)
    layer = SimFileLayer(disk)
    f = layer.open_append("current/journal-1")
    f.write(b"synced")
    f.sync()
    f.write(b"+lost")
    layer.write_atomic("current/cookie.json", b"{}")
    disk.crash()
    with pytest.raises(OSError):
        f.write(b"from a dead process")
    assert disk.lose_power() == {"current/journal-1": 5}
    fresh = SimFileLayer(disk)
    assert fresh.read_all("current/journal-1") == b"synced"
    assert fresh.list("current") == ["cookie.json", "journal-1"]


def test_a_lost_last_write_cuts_the_newest_log_inside_its_last_fsynced_write(
    tmp_path: Path,
) -> None:
    disk = SimDisk(tmp_path)
    layer = SimFileLayer(disk)
    for name, writes in (
        ("current/entrylog-00000001.log", 1),
        ("current/entrylog-00000002.log", 2),
    ):
        f = layer.open_append(name)
        for data in (b"first-write", b"second-write")[:writes]:
            f.write(data)
            f.sync()
    for seed in range(20):
        before = {rel: bytes(data) for rel, data in disk.files.items()}
        cut = disk.cut_tail(random.Random(seed), "current/entrylog-")
        assert cut is not None and cut["file"] == "current/entrylog-00000002.log"
        assert len(b"first-write") <= cut["to"] < cut["truncated_from"]
        assert disk.files[cut["file"]] == before[cut["file"]][: cut["to"]]
        assert disk.files["current/entrylog-00000001.log"] == b"first-write"
        disk.files[cut["file"]][:] = before[cut["file"]]
    assert disk.cut_tail(random.Random(0), "current/journal-") is None


@pytest.fixture(scope="module")
def clean_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The same faulty schedule run twice with seed 7 and once with seed 8."""
    runs = {}
    for name, seed in (("a", 7), ("b", 7), ("other", 8)):
        run_dir = tmp_path_factory.mktemp(f"sim-{name}")
        result = run_sim(SimSpec(seed=seed, time_limit=3.0, schedule=FAULTS), run_dir)
        assert result.results["valid"] is True, result.results["anomaly_types"]
        runs[name] = run_dir
    return runs


def test_same_seed_gives_byte_identical_history(clean_runs: dict[str, Path]) -> None:
    a, b = ((clean_runs[n] / "history.jsonl").read_bytes() for n in ("a", "b"))
    assert a == b and a.count(b"\n") > 200
    assert b'"f":"power-loss"' in a and b'"f":"start-partition"' in a


def test_same_seed_same_bytes_across_processes_and_hash_seeds(tmp_path: Path) -> None:
    """A seed found by a search replays later in another process: nothing in the run may
    depend on string hashing (set order) or on the process's history."""
    script = (
        "import sys; from pathlib import Path; from harness.runtime.sim import SimSpec, run_sim;"
        "run_sim(SimSpec(seed=5, time_limit=1.0, schedule=tuple(__import__('json').loads("
        "sys.argv[2]))), Path(sys.argv[1]))"
    )
    histories = []
    for hash_seed in ("1", "2"):
        run_dir = tmp_path / hash_seed
        env = {**os.environ, "PYTHONHASHSEED": hash_seed}
        subprocess.run(
            [sys.executable, "-c", script, str(run_dir), json.dumps(FAULTS[:4])],
            env=env,
            check=True,
        )
        histories.append((run_dir / "history.jsonl").read_bytes())
    assert histories[0] == histories[1] and histories[0].count(b"\n") > 50


def test_different_seeds_give_different_histories(clean_runs: dict[str, Path]) -> None:
    a, other = ((clean_runs[n] / "history.jsonl").read_bytes() for n in ("a", "other"))
    assert a != other


def test_clean_run_under_faults_checks_valid(clean_runs: dict[str, Path]) -> None:
    """Asserted by the fixture for every run; here the run is also shown to have worked:
    ops succeeded, every ledger was read closed, every fault was proven."""
    results = json.loads((clean_runs["a"] / "results.json").read_text())
    assert results["stats"]["appends_ok"] > 50 and not results["stats"]["unchecked_ledgers"]
    assert results["checkers"]["nemesis"] == {"valid": True, "faults": len(FAULTS), "errors": []}


def test_no_journal_fsync_is_found_by_power_loss(tmp_path: Path) -> None:
    """Acknowledged entries that were never fsynced vanish when two bookies of a write
    quorum lose power together: recovery then truncates the ledger."""
    schedule = (
        {"at": 0.5, "f": "power-loss", "value": {"nodes": ["b1", "b2"]}},
        {"at": 0.6, "f": "power-on", "value": {"nodes": ["b1", "b2"]}},
    )
    buggy = run_sim(
        SimSpec(seed=2, time_limit=1.0, schedule=schedule, bugs=("no-journal-fsync",)),
        tmp_path / "bug",
    )
    assert buggy.results["valid"] is False
    assert {"lost-append", "truncated-ledger"} <= set(buggy.results["anomaly_types"])
    fixed = run_sim(SimSpec(seed=2, time_limit=1.0, schedule=schedule), tmp_path / "fixed")
    assert fixed.results["valid"] is True


def _fault_proofs(run_dir: Path) -> dict[str, Any]:
    """Each completed nemesis op's value (with its proof) by op name, or its error."""
    done = {}
    for line in (run_dir / "history.jsonl").read_text().splitlines():
        op = json.loads(line)
        if op["process"] == "nemesis" and op["type"] == "info":
            done[op["f"]] = op.get("error") or op["value"]
    return done


def test_a_wiped_bookie_is_refused_by_its_cookie_check_until_its_disks_are_back(
    tmp_path: Path,
) -> None:
    """`wipe` pulls the disks (blank ones in their place): the cookie check refuses them, a
    restart cannot bring the bookie back either, and `restore` returns every byte."""
    schedule = (
        {"at": 0.5, "f": "wipe", "value": {"nodes": ["b1"]}},
        {"at": 0.7, "f": "restart", "value": {"nodes": ["b1"]}},
        {"at": 1.0, "f": "restore", "value": {"nodes": ["b1"]}},
    )
    run = run_sim(SimSpec(seed=3, time_limit=1.5, schedule=schedule), tmp_path / "clean")
    done = _fault_proofs(tmp_path / "clean")
    wiped = done["wipe"]["proof"]["b1"]
    assert wiped["cookie_check"] == "refused" and wiped["running"] is False
    assert "FaultNotProven: b1 did not come back" in done["restart"]
    moved = {d: m["bytes"] for d, m in wiped["moved"].items()}
    restored = done["restore"]["proof"]["b1"]["restored"]
    assert min(moved.values()) > 0 and {d: r["bytes"] for d, r in restored.items()} == moved
    assert run.results["anomaly_types"] == [] and run.results["stats"]["appends_ok"] > 20
    assert set(moved) == {"b1/journal", "b1/ledgers"}  # not the run's own scratch directory
    run_sim(SimSpec(seed=3, time_limit=1.5, schedule=schedule), tmp_path / "again")
    history = (tmp_path / "clean" / "history.jsonl").read_bytes()
    assert (tmp_path / "again" / "history.jsonl").read_bytes() == history

    buggy = run_sim(
        SimSpec(seed=3, time_limit=1.5, schedule=schedule[::2], bugs=("no-cookie",)),
        tmp_path / "no-cookie",
    )
    wiped = _fault_proofs(tmp_path / "no-cookie")["wipe"]["proof"]["b1"]
    assert wiped["cookie_check"] == "accepted a blank disk", buggy.results


def test_a_packet_fault_delays_what_the_shaped_node_sends_and_heals(tmp_path: Path) -> None:
    """`start-packet` shapes b1's egress as netem would: while it stands, adds whose write
    set includes b1 wait its 200 ms delay; after `stop-packet` they are quick again, and a
    correct build stays valid."""
    schedule = (
        {"at": 0.5, "f": "start-packet", "value": {"nodes": ["b1"], "delay_ms": 200}},
        {"at": 1.5, "f": "stop-packet", "value": {"nodes": ["b1"]}},
    )
    run = run_sim(SimSpec(seed=4, time_limit=2.5, schedule=schedule), tmp_path)
    assert run.results["valid"] is True, run.results["anomaly_types"]
    done = _fault_proofs(tmp_path)
    as_recorded = json.loads(json.dumps(asdict(Shaping(0.2))))
    assert done["start-packet"]["proof"]["shaped"] == {"b1": as_recorded}
    assert done["stop-packet"]["proof"]["shaped"] == {}
    ops = [json.loads(line) for line in (tmp_path / "history.jsonl").read_text().splitlines()]
    shaped_at, healed_at = (
        op["time"] / 1e9 for op in ops if op["f"].endswith("-packet") and op["type"] == "info"
    )
    invoked: dict[int, float] = {}
    slow_while_shaped, slow_after = [], []
    for op in ops:
        if op["f"] != "append":
            continue
        if op["type"] == "invoke":
            invoked[op["process"]] = op["time"] / 1e9
        elif op["type"] == "ok":
            start = invoked[op["process"]]
            slow = op["time"] / 1e9 - start > 0.2
            if shaped_at < start < healed_at - 0.3:
                slow_while_shaped.append(slow)
            elif start > healed_at + 0.1:
                slow_after.append(slow)
    assert slow_while_shaped and sum(slow_while_shaped) >= len(slow_while_shaped) / 2
    assert slow_after and not any(slow_after)


def test_a_clients_link_to_one_bookie_is_shaped_in_a_replayed_schedule(tmp_path: Path) -> None:
    """A schedule may shape a client agent's link to a bookie (`to`), as the real nemesis
    shapes one with an htb filter; a correct build stays valid."""
    schedule = (
        {
            "at": 0.2,
            "f": "start-packet",
            "value": {"nodes": ["c1"], "to": ["b1"], "rate": "64kbit"},
        },
        {"at": 1.2, "f": "stop-packet", "value": {"nodes": ["c1"]}},
    )
    run = run_sim(SimSpec(seed=6, time_limit=1.5, schedule=schedule), tmp_path)
    assert run.results["valid"] is True, run.results["anomaly_types"]
    shaped = _fault_proofs(tmp_path)["start-packet"]["proof"]["shaped"]
    assert list(shaped) == ["c1"] and shaped["c1"]["to"] == ["b1"]
    assert shaped["c1"]["rate_bps"] == 64_000


def _shaped(shaping: Shaping) -> Network:
    """A network (at virtual time 0) whose node b1 sends through `shaping`."""
    network = Network(SimLoop(), random.Random(0))
    network.shape("b1", shaping)
    return network


def test_a_rate_limit_queues_each_write_behind_the_ones_before_it() -> None:
    """At 80 kbit/s a 1000-byte write takes 0.1 s to leave, and the next one waits for it;
    a new shaping (a new qdisc) starts with an empty queue."""
    network = _shaped(Shaping(0.0, rate_bps=80_000))
    assert network.shaping_delay("b1", "c1", 1000) == pytest.approx(0.1)
    assert network.shaping_delay("b1", "c1", 1000) == pytest.approx(0.2)
    assert network.shaping_delay("b2", "c1", 1000) == 0.0  # only b1 is shaped
    network.shape("b1", Shaping(0.0, rate_bps=80_000))
    assert network.shaping_delay("b1", "c1", 500) == pytest.approx(0.05)


def test_a_shaped_link_queues_only_the_writes_to_its_destinations() -> None:
    """`to`: b1's writes to b2 wait in the rate limit's queue; its writes to c1 pass at
    once and take no place in that queue."""
    network = _shaped(Shaping(0.0, rate_bps=80_000, to=("b2",)))
    assert network.shaping_delay("b1", "b2", 1000) == pytest.approx(0.1)
    assert network.shaping_delay("b1", "c1", 1000) == 0.0
    assert network.shaping_delay("b1", "b2", 1000) == pytest.approx(0.2)


@pytest.mark.parametrize(
    ("shaping", "extra_s"),
    [
        (Shaping(0.2, corrupt=1.0), 0.2 + 0.2),  # dropped by TCP's checksum: one RTO more
        (Shaping(0.2, loss=1.0, corrupt=1.0), 0.2 + 0.4),
        (Shaping(0.2, reorder=1.0), 0.0),  # netem sends a reordered packet at once
        (Shaping(0.2, duplicate=1.0), 0.2),  # the receiving TCP discards the copy
    ],
)
def test_packet_corruption_duplication_and_reordering_show_as_tcp_shows_them(
    shaping: Shaping, extra_s: float
) -> None:
    assert _shaped(shaping).shaping_delay("b1", "c1", 100) == pytest.approx(extra_s)


def test_an_unset_shaping_parameter_draws_nothing() -> None:
    """Seeded runs shaped before a parameter existed draw exactly what they drew then: a
    delay with jitter takes one draw from the seeded rng, whatever else Shaping can do."""
    network = _shaped(Shaping(0.05, jitter_s=0.01))
    reference = random.Random(0)
    expected = max(0.0, reference.uniform(-0.01, 0.01) + 0.05)
    assert network.shaping_delay("b1", "c1", 100) == expected
    assert network.rng.random() == reference.random()


def test_every_netem_parameter_shapes_a_simulated_run_that_stays_valid(tmp_path: Path) -> None:
    """What the real `packet` nemesis takes, the simulation's takes too (it used to refuse
    all but delay, jitter and loss, and to drop `rate` without a word)."""
    shaping = {
        "delay_ms": 20,
        "jitter_ms": 5,
        "loss_pct": 2,
        "duplicate_pct": 10,
        "reorder_pct": 25,
        "corrupt_pct": 5,
        "rate": "2mbit",
    }
    schedule = (
        {"at": 0.2, "f": "start-packet", "value": {"nodes": ["b1", "b2"], **shaping}},
        {"at": 1.2, "f": "stop-packet", "value": {"nodes": ["b1", "b2"]}},
    )
    run = run_sim(SimSpec(seed=5, time_limit=1.5, schedule=schedule), tmp_path)
    assert run.results["valid"] is True, run.results["anomaly_types"]
    shaped = _fault_proofs(tmp_path)["start-packet"]["proof"]["shaped"]
    want = json.loads(json.dumps(asdict(Shaping(0.02, 0.005, 0.02, 0.1, 0.25, 0.05, 2e6))))
    assert shaped == {"b1": want, "b2": want}
