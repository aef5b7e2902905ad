"""The corpus-steered search: it keeps what reached something new, mutates within the
drawn space, finds and shrinks a seeded bug, and finds nothing on a correct build."""

from __future__ import annotations

import json
import random
from collections import Counter
from pathlib import Path

import pytest

from harness.cli import main
from harness.runtime.sim import SimSpec
from harness.sim.corpus import Candidate, Corpus, Fault, Space, features, steered_search
from harness.sim.search import DRAWN_CHOICES
from harness.testspec import WORKLOADS
from nemesis.kinds import SIM_NEMESES
from nemesis.schedule import NODE_SET_KINDS, SELF_TRIGGER_PROBES, TRIGGER_PROBES

pytestmark = pytest.mark.sim

EVERY_SETTING = frozenset({*DRAWN_CHOICES, "bookies"})
SPACE = Space(SimSpec(), WORKLOADS, SIM_NEMESES, EVERY_SETTING, max_time=1.5)


def test_corpus_keeps_a_test_only_for_something_new() -> None:
    corpus = Corpus()
    test = Candidate(SimSpec(), ())
    assert corpus.offer(test, frozenset({"probe:a", "op:append:ok"})) == {"probe:a", "op:append:ok"}
    assert corpus.offer(test, frozenset({"probe:a"})) is None  # the same probes
    assert corpus.offer(test, frozenset({"probe:b"})) == {"probe:b"}
    assert corpus.offer(test, frozenset({"probe:a", "probe:b"})) == frozenset()  # combined
    assert corpus.offer(test, frozenset({"probe:b", "op:append:ok"})) is None
    assert len(corpus.entries) == 3


def test_features_are_probes_reached_and_op_outcomes() -> None:
    results = {
        "coverage": {"recovery-write-back": 2, "bookie-fenced-add": 0},
        "checkers": {"stats": {"by_f": {"recover": {"ok": 1, "fail": 0, "info": 0}}}},
    }
    assert features(results) == {"probe:recovery-write-back", "op:recover:ok"}


def test_drawn_and_mutated_tests_are_tests_their_workload_accepts() -> None:
    """Every draw and every mutation gives a test `bkchaos test` would accept, with
    faults only on bookies that exist, within the longest run."""
    rng = random.Random(7)
    tests = [SPACE.fresh(rng) for _ in range(40)]
    tests += [SPACE.mutate(rng, rng.choice(tests)) for _ in range(200)]
    for test in tests:
        spec = test.to_spec()
        spec.as_test()
        assert spec.time_limit <= 1.5 and 1 <= len(test.faults) <= 3
        targets = {n for step in spec.schedule for n in step["value"]["nodes"]}
        assert targets <= {
            "b1",
            "b2",
            "b3",
            "c1",
            "c2",
            "@0",
            "@1",
            "@2",
            "@self",
            "@others",
            "@all",
        }
    assert {t.spec.workload for t in tests} == set(WORKLOADS)
    assert {t.spec.bookies for t in tests} == {3, 4, 5}
    assert {t.spec.latency for t in tests} == set(DRAWN_CHOICES["latency"])
    assert {t.spec.checkpoint_interval for t in tests} == set(DRAWN_CHOICES["checkpoint_interval"])
    assert any(t.spec.buggify for t in tests) and not all(t.spec.buggify for t in tests)
    assert any(f.trigger for t in tests for f in t.faults)


def test_the_corpus_draws_power_losses_and_kills_of_a_bookie_an_add_is_sent_to() -> None:
    """The write-path window: a bookie of the add's write set (never `@self`, the client)
    loses power or is killed while the add is on its way, the others storing it; or the
    other clients are paused (`@others`: only a pause can hit a client); or, now and
    then, every bookie of the cluster (`@all`)."""
    rng = random.Random(0)
    on_add = [f for f in (SPACE.fault(rng) for _ in range(2000)) if f.trigger == "client-add-sent"]
    assert {f.kind for f in on_add} >= {"kill", "power-loss"}
    assert {t for f in on_add for t in f.targets} == {"@0", "@1", "@others", "@all"}
    assert {f.kind for f in on_add if "@others" in f.targets} == {"pause"}


def test_the_corpus_kills_pauses_and_powers_off_every_bookie_at_once_now_and_then() -> None:
    """Node sets drawn by size (Jepsen's one, minority, majority, all): a whole-cluster
    outage in about one draw of ten of a kill, pause or power loss on the clock, one node
    still the most common; the other kinds never hit all three bookies."""
    rng = random.Random(4)
    clocked = [f for f in (SPACE.fault(rng) for _ in range(3000)) if not f.trigger]
    sized = Counter(len(f.targets) for f in clocked if f.kind in NODE_SET_KINDS)
    every_bookie = [f for f in clocked if set(f.targets) == {"b1", "b2", "b3"}]
    assert 0.05 < sized[3] / sized.total() < 0.2
    assert sized[1] > sized[2] > sized[3] > 0
    assert {f.kind for f in every_bookie} == set(NODE_SET_KINDS)


def test_the_corpus_aims_self_only_at_probes_a_bookie_reaches() -> None:
    """`@self` is the node that reached the probe: a bookie for fencing, a raised term and
    a write-back's new copy, a client agent for the rest, which no triggered fault can hit
    (it would never fire). A bookie's probe names no ensemble, so it never gets an `@k`
    (`@all`, every bookie of the cluster, names none)."""
    rng = random.Random(1)
    triggered = [f for f in (SPACE.fault(rng) for _ in range(3000)) if f.trigger]
    at_self = {f.trigger for f in triggered if "@self" in f.targets}
    assert at_self == set(SELF_TRIGGER_PROBES)
    assert at_self == {"bookie-fenced", "unbounded-term-raised", "bookie-recovery-add-new-entry"}
    assert {f.trigger for f in triggered} == set(TRIGGER_PROBES)
    relative = {t for f in triggered if f.trigger in at_self for t in f.targets if t[0] == "@"}
    assert relative == {"@self", "@all"}


def test_a_mutation_aims_faults_at_the_windows_its_parent_reached() -> None:
    """A kept test that reached a recovery's start gets faults waiting for that probe far
    more often than one that reached no trigger probe, and only of the kinds a probe can
    trigger; what it reached besides trigger probes is never aimed at."""
    parent = Candidate(SimSpec(), (Fault(2, 5, "kill", ("b2",)),))

    def aimed_at(reached: frozenset[str]) -> list[Fault]:
        rng = random.Random(2)
        children = [SPACE.mutate(rng, parent, reached) for _ in range(600)]
        return [f for c in children for f in c.faults if f.trigger == "recovery-started"]

    aimed = aimed_at(frozenset({"probe:recovery-started", "probe:recovery-closed"}))
    unaimed = aimed_at(frozenset({"probe:recovery-closed", "op:recover:ok"}))
    assert len(aimed) > 5 * max(1, len(unaimed))
    assert {f.kind for f in aimed} == {"kill", "pause", "power-loss", "partition"}


def test_a_fault_renders_as_a_start_and_a_stop_step() -> None:
    fault = Fault(2, 5, "kill", ("b2",))
    spec = Candidate(SimSpec(), (fault,)).to_spec()
    assert spec.schedule == (
        {"at": 0.2, "f": "kill", "value": {"nodes": ["b2"]}},
        {"at": 0.5, "f": "restart", "value": {"nodes": ["b2"]}},
    )


def test_steered_search_on_a_correct_build_finds_nothing() -> None:
    """A bounded number of tests (not a wall-time budget) over every workload and fault
    kind, BUGGIFY included: no anomaly, and the corpus grew."""
    kept: list[int] = []
    outcome = steered_search(
        SPACE,
        budget_s=3600,
        max_examples=12,
        on_example=lambda n, spec, results, new, corpus: kept.append(len(corpus.entries)),
    )
    assert outcome.found is None and outcome.examples == 12
    assert kept[-1] >= 2 and outcome.coverage


def test_no_hint_search_finds_shrinks_and_replays_a_seeded_bug(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--bug` switches the bug on and nothing else: the search is the no-hint one."""
    args = ["search", "--bug", "no-journal-fsync", "--budget", "1h", "--max-examples", "300"]
    with pytest.raises(SystemExit) as exited:
        main([*args, "--max-time", "1.5", "--store", str(tmp_path), "--json"])
    assert exited.value.code == 1
    summary = json.loads(capsys.readouterr().out)
    assert summary["strategy"] == "corpus" and summary["replay_valid"] is False
    minimal = summary["minimal"]
    assert len(minimal["schedule"]) <= len(summary["first"]["schedule"])
    stored = Path(summary["run_dir"]) / "minimal.json"
    with pytest.raises(SystemExit) as replayed:
        main(["search", "--replay", str(stored), "--store", str(tmp_path), "--json"])
    assert replayed.value.code == 1
    assert summary["anomaly"] in json.loads(capsys.readouterr().out)["anomaly_types"]
