"""Faults triggered by protocol probes in the simulation: they fire at the probe, on the
bookies it names, replay from the seed, are drawn by the search, and a correct build stays
valid under them."""

from __future__ import annotations

import asyncio
import json
import random
from pathlib import Path
from typing import Any

import pytest
from hypothesis import find, settings

from bookie_image.probes import listening
from core.generator import Context, Pending
from harness.errors import UserError
from harness.runtime.sim import SimSpec, run_sim
from harness.sim.search import sim_tests
from harness.testspec import TestSpec
from nemesis.schedule import check_steps
from nemesis.triggers import TriggeredFaults

pytestmark = pytest.mark.sim


def _step(on: str, f: str, nodes: list[str], **value: Any) -> dict[str, Any]:
    return {"at": 0.2, "on": on, "f": f, "value": {"nodes": nodes, **value}, "hold": 0.5}


def _nemesis_ops(run_dir: Path) -> list[dict[str, Any]]:
    ops = [json.loads(line) for line in (run_dir / "history.jsonl").read_text().splitlines()]
    return [op for op in ops if op["process"] == "nemesis"]


def test_a_triggered_kill_fires_at_its_probe_on_the_bookie_it_names(tmp_path: Path) -> None:
    """Armed 0.2 s into the run, the kill lands in the very instant the next recovery
    starts, on the first bookie of the ensemble being recovered, and is undone 0.5 s on."""
    reaches: list[tuple[float, list[str]]] = []

    def heard(name: str, fields: dict[str, Any]) -> None:
        if name == "recovery-started":
            reaches.append((asyncio.get_running_loop().time(), fields["bookies"]))

    spec = SimSpec(seed=0, time_limit=3.0, bookies=4)
    spec = SimSpec(**{**spec.__dict__, "schedule": (_step("recovery-started", "kill", ["@0"]),)})
    with listening(heard):
        result = run_sim(spec, tmp_path)
    assert result.results["valid"] is True
    kill, killed, restart, restarted = _nemesis_ops(tmp_path)[:4]
    assert (kill["f"], killed["f"], restart["f"]) == ("kill", "kill", "restart")
    assert kill["value"]["on"] == "recovery-started"
    at = kill["time"] / 1e9
    # history time is the loop's virtual time (ns); the first reach after arming fired it
    fired = [(t, bookies) for t, bookies in reaches if abs(t - at) < 1e-9]
    assert fired, (at, reaches)
    assert all(t < at for t, _ in reaches if t < at - 1e-9)
    assert kill["value"]["nodes"] == [fired[0][1][0].split(":")[0]]
    assert killed["value"]["proof"] == {kill["value"]["nodes"][0]: "killed"}
    assert restart["time"] / 1e9 == pytest.approx(at + 0.5, abs=0.01)
    assert restarted["value"]["nodes"] == kill["value"]["nodes"]


def test_a_power_loss_triggered_by_an_add_lands_on_a_bookie_of_its_write_set_first(
    tmp_path: Path,
) -> None:
    """Armed 0.2 s in, the power loss lands in the very instant the next add is sent, on
    the second bookie of its write set, before the add can arrive there (the network has
    no zero latency; instrumented, the first bookie and the replacement stored that entry
    and this one never did). The same seed fires on the same add."""
    sends: list[tuple[float, dict[str, Any]]] = []

    def heard(name: str, fields: dict[str, Any]) -> None:
        if name == "client-add-sent":
            sends.append((asyncio.get_running_loop().time(), fields))

    step = _step("client-add-sent", "power-loss", ["@1"])
    spec = SimSpec(seed=3, time_limit=2.0, bookies=4, takeovers=0.5, schedule=(step,))
    fired_on = []
    for run in ("a", "b"):
        sends.clear()
        with listening(heard):
            result = run_sim(spec, tmp_path / run)
        assert result.results["valid"] is True, result.results["anomaly_types"]
        lost, done, power_on, _ = _nemesis_ops(tmp_path / run)[:4]
        assert (lost["f"], done["f"], power_on["f"]) == ("power-loss", "power-loss", "power-on")
        assert lost["value"]["on"] == "client-add-sent"
        at = lost["time"] / 1e9
        fields = next(f for t, f in sends if abs(t - at) < 1e-9)  # the add that fired it
        (bookie,) = lost["value"]["nodes"]
        assert bookie == fields["bookies"][1].split(":")[0]
        assert set(done["value"]["proof"]) == {bookie}
        fired_on.append((at, fields["ledger"], fields["entry"], bookie))
    assert fired_on[0] == fired_on[1]


def test_a_power_loss_as_a_write_back_brings_a_bookie_a_new_copy_makes_recovery_replace_it(
    tmp_path: Path,
) -> None:
    """The bookie that lacked a recovered entry loses power as the write-back's copy
    reaches it, before that copy is durable: with WQ = AQ the write-back cannot finish
    without a replacement, so the recovery closes the ledger with a fragment its
    write-back added, and that fragment names the replacement, never the failed bookie.
    The correct build stays valid (a recovery that closed with the ensembles it read would
    name the failed bookie, which lacks the entry: `under-replicated`)."""
    new_copies: list[tuple[str, int]] = []
    closed_fragments: list[list[str]] = []

    def heard(name: str, fields: dict[str, Any]) -> None:
        if name == "bookie-recovery-add-new-entry":
            new_copies.append((fields["ledger"], fields["entry"]))
        elif name == "recovery-closed-new-fragment":
            closed_fragments.append(fields["bookies"])

    step = {**_step("bookie-recovery-add-new-entry", "power-loss", ["@self"]), "hold": 1.0}
    spec = SimSpec(
        seed=1,
        workload="ledger",
        time_limit=2.0,
        bookies=4,
        takeovers=0.5,
        pipeline=2,
        concurrency=8,
        schedule=(step,),
    )
    with listening(heard):
        result = run_sim(spec, tmp_path)
    assert result.results["valid"] is True, result.results["anomaly_types"]
    lost, done = _nemesis_ops(tmp_path)[:2]
    assert (lost["f"], lost["value"]["on"]) == ("power-loss", "bookie-recovery-add-new-entry")
    (failed,) = done["value"]["proof"]
    assert new_copies and closed_fragments
    assert all(failed not in (b.split(":")[0] for b in bookies) for bookies in closed_fragments)


def test_a_step_is_armed_by_the_clock_while_the_nemesis_worker_is_busy() -> None:
    """The worker asked at 0 s and is then busy (a restart waiting for its bookie): the
    step armed at 0.2 s still hears a probe reached at 0.3 s and wakes the worker, rather
    than waiting for the worker's next ask to be armed and missing the probe."""
    clock = {"now": 0.0}
    woken: list[bool] = []
    faults = TriggeredFaults(
        view=None,  # type: ignore[arg-type]  # not aimed here: only heard
        steps=(_step("recovery-started", "kill", ["@0"]),),
        wake=lambda: woken.append(True),
        now=lambda: clock["now"],
    )
    assert isinstance(faults.op(Context(0.0, "nemesis", random.Random(0))), Pending)
    clock["now"] = 0.1
    faults.on_probe("recovery-started", {"bookies": ["b1"]}, "c1")
    assert not woken, "not armed before its at"
    clock["now"] = 0.3
    faults.on_probe("recovery-started", {"bookies": ["b1"]}, "c1")
    assert woken == [True] and not faults.armed


def test_a_split_partition_cuts_the_old_writer_and_the_recovering_client_apart(
    tmp_path: Path,
) -> None:
    step = _step("unbounded-takeover-started", "start-partition", ["@0"], grudge="@split")
    spec = SimSpec(seed=0, time_limit=3.0, bookies=4, workload="unbounded", schedule=(step,))
    result = run_sim(spec, tmp_path)
    assert result.results["valid"] is True
    started = next(op for op in _nemesis_ops(tmp_path) if op["type"] == "info")
    assert started["f"] == "start-partition"
    grudge = started["value"]["proof"]["grudge"]
    (kept,) = started["value"]["nodes"]
    recovering = next(node for node, cut in grudge.items() if cut == [kept])
    writers = [node for node in grudge if node != recovering]
    assert writers and all(kept not in grudge[w] and grudge[w] for w in writers)
    assert "zk" not in grudge and all("zk" not in cut for cut in grudge.values())


def test_triggered_faults_replay_exactly_from_the_seed(tmp_path: Path) -> None:
    steps = (
        _step("recovery-writeback", "pause", ["@1"]),
        {**_step("bookie-fenced", "power-loss", ["@self"]), "at": 1.0},
    )
    histories = []
    for name in ("a", "b"):
        run_sim(SimSpec(seed=0, time_limit=2.5, bookies=4, schedule=steps), tmp_path / name)
        histories.append((tmp_path / name / "history.jsonl").read_bytes())
    assert histories[0] == histories[1]
    assert b'"on":"recovery-writeback"' in histories[0]


@pytest.mark.parametrize(
    ("workload", "step"),
    [
        ("ledger", _step("recovery-writeback", "pause", ["@1"])),
        ("ledger", _step("bookie-fenced", "power-loss", ["@self"])),
        ("unbounded", _step("unbounded-term-raised", "kill", ["@self"])),
        ("ledger", _step("client-add-sent", "kill", ["@0"])),
        (
            "unbounded",
            _step("unbounded-takeover-started", "start-partition", ["@0"], grudge="@split"),
        ),
    ],
    ids=["pause-writeback", "power-loss-fencing", "kill-term", "add-kill", "split-takeover"],
)
def test_a_correct_build_stays_valid_under_triggered_faults(
    workload: str, step: dict[str, Any], tmp_path: Path
) -> None:
    for seed in range(3):
        spec = SimSpec(seed=seed, time_limit=3.0, bookies=4, workload=workload, schedule=(step,))
        result = run_sim(spec, tmp_path / str(seed))
        assert result.results["valid"] is True, (seed, result.results["anomaly_types"])
        assert any(
            op["value"] and op["value"].get("on") for op in _nemesis_ops(tmp_path / str(seed))
        )


def test_triggered_steps_replay_on_every_runtime_and_bad_ones_are_refused() -> None:
    step = _step("recovery-started", "kill", ["@0"])
    check_steps([step], ["b1", "b2", "b3"])
    for runtime in ("sim", "local", "docker"):
        assert TestSpec(runtime=runtime, schedule=(step,)).nemesis == ("kill",)
    with pytest.raises(UserError, match="'on' must be one of"):
        TestSpec(runtime="docker", schedule=({**step, "on": "no-such-probe"},))
    on_fencing = _step("bookie-fenced", "kill", ["@self"])  # a bookie reaches it: @self is one
    check_steps([on_fencing], ["b1", "b2", "b3"])
    with pytest.raises(UserError, match="no triggered fault can hit it"):
        TestSpec(runtime="sim", schedule=(_step("client-add-sent", "kill", ["@self"]),))
    for bad, says in [
        ({**step, "on": "no-such-probe"}, "'on' must be one of"),
        ({**step, "f": "wipe"}, "'f' must be one of"),
        ({**step, "hold": 0}, "'hold'"),
        ({**step, "value": {"nodes": ["@9"]}}, "value.nodes"),
        ({**step, "value": {"nodes": ["@self"]}}, "a client agent reaches 'recovery-started'"),
    ]:
        with pytest.raises(ValueError, match=says):
            check_steps([bad], ["b1", "b2", "b3"])


def test_the_search_draws_triggered_faults() -> None:
    spec = find(
        sim_tests(SimSpec(bookies=4), max_triggered=1),
        lambda s: any(step.get("on") == "recovery-writeback" for step in s.schedule),
        settings=settings(database=None, derandomize=True, max_examples=2000),
    )
    TestSpec(runtime="sim", bookies=4, schedule=spec.schedule)  # a schedule the CLI accepts


def test_a_test_with_triggered_faults_replays_where_its_faults_can_be_injected() -> None:
    spec = SimSpec(schedule=(_step("recovery-started", "kill", ["@0"]),))
    assert spec.as_replay("docker").runtime == "docker"
    split = _step("unbounded-takeover-started", "start-partition", ["@0"], grudge="@split")
    assert SimSpec(schedule=(split,)).as_replay("docker").runtime == "docker"
    assert SimSpec(schedule=(split,)).as_replay("local").runtime == "sim"
