"""Correlated failures at a protocol moment: triggered steps aimed at every bookie
(`@all`) or a node set of the probe's ensemble, fired together with a pause of the other
clients on the same probe, validated, performed in the simulation, drawn by the corpus,
and a correct build stays valid under them."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest

from harness.errors import UserError
from harness.runtime.sim import SimSpec, run_sim
from harness.sim.corpus import CORRELATED_SHARE, Candidate, Fault, Space
from harness.sim.search import DRAWN_CHOICES
from harness.testspec import WORKLOADS, TestSpec
from nemesis.kinds import SIM_NEMESES, START_STOP
from nemesis.schedule import (
    NODE_SET_DRAWS,
    NODE_SET_KINDS,
    SELF_TRIGGER_PROBES,
    check_steps,
    drawn_node_set,
)

pytestmark = pytest.mark.sim

BOOKIES = ["b1", "b2", "b3"]


def _step(on: str, f: str, nodes: list[str], at: float = 0.2, hold: float = 0.5) -> dict[str, Any]:
    return {"at": at, "on": on, "f": f, "value": {"nodes": nodes}, "hold": hold}


def _nemesis_ops(run_dir: Path) -> list[dict[str, Any]]:
    ops = [json.loads(line) for line in (run_dir / "history.jsonl").read_text().splitlines()]
    return [op for op in ops if op["process"] == "nemesis"]


def _on(op: dict[str, Any]) -> str:
    """The probe a nemesis op was fired on ("" for a clock-timed one, or a heal)."""
    return (op["value"] or {}).get("on", "")


def test_every_bookie_is_a_target_of_the_node_set_kinds_only_and_names_no_other_bookie() -> None:
    for kind in NODE_SET_KINDS:
        check_steps([_step("recovery-started", START_STOP[kind][0], ["@all"])], BOOKIES)
        check_steps([_step("bookie-fenced", START_STOP[kind][0], ["@all"])], BOOKIES)
    check_steps([_step("recovery-started", "pause", ["@all", "@others"])], BOOKIES, ["c1", "c2"])
    for bad, says in [
        (_step("recovery-started", "start-partition", ["@all"]), "value.nodes must be"),
        (_step("recovery-started", "kill", ["@all", "b1"]), "name no other bookie beside it"),
        (_step("recovery-started", "power-loss", ["@0", "@all"]), "name no other bookie"),
        (_step("recovery-started", "kill", ["@all", "@others"]), "value.nodes must be"),
    ]:
        with pytest.raises(ValueError, match=says):
            check_steps([bad], BOOKIES, ["c1", "c2"])
    with pytest.raises(UserError, match="name no other bookie beside it"):
        TestSpec(runtime="local", schedule=(_step("recovery-started", "kill", ["@all", "b2"]),))
    assert TestSpec(runtime="local", schedule=(_step("bookie-fenced", "kill", ["@all"]),)).nemesis


@pytest.mark.parametrize("kind", NODE_SET_KINDS)
def test_a_step_on_every_bookie_hits_each_of_them_spares_too_and_undoes_it(
    kind: str, tmp_path: Path
) -> None:
    begin, end = START_STOP[kind]
    spec = SimSpec(
        seed=0, time_limit=3.0, bookies=4, schedule=(_step("recovery-started", begin, ["@all"]),)
    )
    result = run_sim(spec, tmp_path)
    assert result.results["valid"] is True, result.results["anomaly_types"]
    ops = _nemesis_ops(tmp_path)
    started = next(op for op in ops if op["f"] == begin and op["type"] == "info")
    assert started["value"]["on"] == "recovery-started"
    assert started["value"]["nodes"] == ["b1", "b2", "b3", "b4"]
    assert set(started["value"]["proof"]) == {"b1", "b2", "b3", "b4"}
    stopped = next(op for op in ops if op["f"] == end and op["type"] == "info")
    assert stopped["value"]["nodes"] == ["b1", "b2", "b3", "b4"]
    assert stopped["time"] - started["time"] >= 0.5e9


def test_a_pause_of_the_old_writers_and_an_outage_on_one_probe_fire_at_the_same_reach(
    tmp_path: Path,
) -> None:
    """Both armed for the same probe: the next reach fires both, in the same instant —
    a writer frozen as the whole cluster loses power, not one at one takeover and the
    other at the next."""
    steps = (
        _step("recovery-started", "pause", ["@others"], hold=1.5),
        _step("recovery-started", "power-loss", ["@all"], hold=0.4),
    )
    spec = SimSpec(seed=1, time_limit=3.0, takeovers=0.5, schedule=steps)
    result = run_sim(spec, tmp_path)
    assert result.results["valid"] is True, result.results["anomaly_types"]
    fired = [op for op in _nemesis_ops(tmp_path) if op["type"] == "invoke" and _on(op)]
    assert [op["f"] for op in fired] == ["pause", "power-loss"]
    assert fired[0]["time"] == fired[1]["time"]
    assert fired[1]["value"]["nodes"] == BOOKIES
    assert fired[0]["value"]["nodes"] in (["c1"], ["c2"])


@pytest.mark.parametrize("workload", WORKLOADS)
def test_a_correct_build_stays_valid_when_every_bookie_fails_while_the_old_writers_freeze(
    workload: str, tmp_path: Path
) -> None:
    """A correlated outage of the whole cluster at an add (every workload adds), once at
    the moment the writers freeze and once later while they stay frozen, across seeds."""
    for seed, (outage, at) in enumerate([("kill", 0.2), ("power-loss", 0.6), ("kill", 0.9)]):
        steps = (
            _step("client-add-sent", "pause", ["@others"], hold=1.5),
            _step("client-add-sent", outage, ["@all"], at=at, hold=0.3),
        )
        spec = SimSpec(
            seed=seed,
            time_limit=3.0,
            workload=workload,
            write_quorum=3,
            ack_quorum=2,
            checkpoint_interval=0.1,
            schedule=steps,
        )
        result = run_sim(spec, tmp_path / str(seed))
        assert result.results["valid"] is True, (seed, result.results["anomaly_types"])
        ops = _nemesis_ops(tmp_path / str(seed))
        hit = [op for op in ops if op["f"] == outage and op["type"] == "info"]
        assert hit and hit[0]["value"]["nodes"] == BOOKIES, (seed, ops)


def test_triggered_node_sets_are_drawn_by_the_clock_timed_sizes() -> None:
    rng = random.Random(0)
    for probe in ("recovery-started", "client-add-sent", "bookie-fenced"):
        for size in ("one", "minority", "majority", "all"):
            for kind in NODE_SET_KINDS:
                targets = drawn_node_set(size, probe, BOOKIES, kind, rng.choice, rng.sample)
                expected = {"one": 1, "minority": 1, "majority": 2, "all": 1}[size]
                assert len(targets) == expected, (probe, size, kind, targets)
                assert (targets == ("@all",)) == (size == "all")
                if probe in SELF_TRIGGER_PROBES and size in ("minority", "majority"):
                    assert set(targets) <= set(BOOKIES)  # it names no ensemble
                if "@others" in targets:
                    assert kind == "pause" and probe not in SELF_TRIGGER_PROBES


SPACE = Space(SimSpec(), WORKLOADS, SIM_NEMESES, frozenset({*DRAWN_CHOICES, "bookies"}))


def test_the_corpus_draws_every_bookie_among_a_triggered_faults_targets() -> None:
    rng = random.Random(2)
    triggered = [f for f in (SPACE.fault(rng) for _ in range(3000)) if f.trigger]
    sized = [f for f in triggered if f.kind in NODE_SET_KINDS]
    every = [f for f in sized if f.targets == ("@all",)]
    share = NODE_SET_DRAWS.count("all") / len(NODE_SET_DRAWS)
    assert 0.5 * share < len(every) / len(sized) < 1.5 * share
    assert {f.kind for f in every} == set(NODE_SET_KINDS)
    assert all(f.kind in NODE_SET_KINDS for f in triggered if "@all" in f.targets)


def _pairs(child: Candidate) -> list[tuple[Fault, Fault]]:
    pauses = [f for f in child.faults if f.kind == "pause" and f.targets == ("@others",)]
    outages = [f for f in child.faults if f.kind in ("kill", "power-loss") and f.trigger]
    return [
        (p, o)
        for p in pauses
        for o in outages
        if p.trigger == o.trigger and p.start <= o.start and p.end > o.end
    ]


def test_a_mutation_aims_a_correlated_pair_at_a_window_a_client_reaches() -> None:
    """The other clients paused and a majority of the bookies (or every one) taken down on the
    same probe, the outage armed with or after the pause and over before it; only on a
    probe a client reaches (`@others` needs one), and within the faults a test may hold."""
    parent = Candidate(SimSpec(), (Fault(2, 5, "kill", ("b2",)), Fault(1, 3, "pause", ("b1",))))
    rng = random.Random(3)
    reached = frozenset({"probe:recovery-started", "probe:bookie-fenced"})
    children = [SPACE.mutate(rng, parent, reached) for _ in range(2000)]
    paired = [c for c in children if _pairs(c)]
    # aimed half the time, a quarter of those at a client's window (one of the two)
    assert 0.5 * CORRELATED_SHARE / 4 < len(paired) / len(children) < 2 * CORRELATED_SHARE / 4
    for child in paired:
        assert len(child.faults) <= SPACE.max_faults
        child.to_spec().as_test()  # a schedule the CLI accepts
        for pause, outage in _pairs(child):
            assert pause.trigger == "recovery-started"
            assert outage.targets == ("@all",) or len(outage.targets) >= 2
    assert any(o.start > p.start for c in paired for p, o in _pairs(c))
    assert any(o.targets == ("@all",) for c in paired for _, o in _pairs(c))
