"""Hypothesis over the simulation: a fault suite that must stay valid on a clean build,
and `bkchaos search` finding, shrinking and storing a seeded bug."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest
from hypothesis import find, given, settings
from hypothesis import strategies as st

from harness.cli import main
from harness.runtime.sim import SimSpec, run_sim
from harness.sim.search import DRAWN_CHOICES, search, sim_tests
from harness.testspec import WORKLOADS
from nemesis.kinds import SIM_NEMESES

EVERY_SETTING = frozenset(DRAWN_CHOICES)
GUARD_S = 600.0
GUARD = f"{GUARD_S:g}s"
"""Searches here stop after a number of runs (the same on every machine); this real-time
budget only guards against a hang and is never what ends them."""
HYPOTHESIS = ["search", "--strategy", "hypothesis"]
"""The Hypothesis search, which these tests are about (the corpus one is the default)."""


@settings(max_examples=6, deadline=None, database=None, derandomize=True)
@given(spec=sim_tests(SimSpec(), max_time=1.5, max_faults=3, draw=EVERY_SETTING))
def test_clean_build_survives_drawn_fault_schedules(
    spec: SimSpec, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """No anomaly, whatever the faults; the verdict may be unknown, e.g. when a corruption
    hit both replicas of an entry and the final read cannot vouch for the ledger."""
    result = run_sim(spec, tmp_path_factory.mktemp("suite"))
    assert result.results["valid"] is not False, (spec, result.results["anomaly_types"])


@pytest.mark.parametrize(
    ("base", "kinds"),
    [(SimSpec(), SIM_NEMESES), (SimSpec(workload="unbounded"), ("packet",))],
    ids=["ledger-every-fault", "unbounded-slow-links"],
)
def test_search_on_a_clean_build_finds_nothing(base: SimSpec, kinds: tuple[str, ...]) -> None:
    """Drawn faults and drawn workload settings alike: a correct build gives no anomaly
    (the second case draws the slow client links that expose unbounded-no-truncate).
    Bounded by runs, not by time, so every machine checks the same six."""
    outcome = search(
        base, budget_s=GUARD_S, max_examples=6, max_time=1.5, kinds=kinds, draw=EVERY_SETTING
    )
    assert outcome.found is None and outcome.examples == 6


def test_a_simulated_test_runs_the_workload_it_names(tmp_path: Path) -> None:
    """`SimSpec.workload` (and so `bkchaos search --workload`) picks the ops that run."""
    run_sim(SimSpec(workload="unbounded", time_limit=1), tmp_path)
    ops = [json.loads(line) for line in (tmp_path / "history.jsonl").read_text().splitlines()]
    creates = [op for op in ops if op["f"] == "create" and op["type"] == "ok"]
    workload = [op for op in creates if "after_heal" not in op["value"]]  # not the progress check
    assert workload and all(op["value"]["mode"] == "unbounded" for op in workload)


def test_search_finds_shrinks_and_stores_no_journal_fsync(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # --max-time re-picked when kills, pauses and power losses began to draw node sets by
    # size (at 1.5 the walk's first find had three faults the shrinker could not separate)
    args = [*HYPOTHESIS, "--bug", "no-journal-fsync", "--max-examples", "40", "--max-time", "2.5"]
    with pytest.raises(SystemExit) as exited:
        main([*args, "--budget", GUARD, "--store", str(tmp_path), "--json"])
    assert exited.value.code == 1
    summary = json.loads(capsys.readouterr().out)
    # an acknowledged entry lost to power loss: read back short, or its copy audited missing
    assert summary["anomaly"] in ("lost-append", "under-replicated")
    assert summary["replay_valid"] is False
    assert summary["examples"] == 40  # found early, then shrunk until the runs ran out
    minimal = summary["minimal"]
    assert [step["f"] for step in minimal["schedule"]][:1] == ["power-loss"]
    assert len(minimal["schedule"]) < len(summary["first"]["schedule"])
    run_dir = Path(summary["run_dir"])
    assert json.loads((run_dir / "minimal.json").read_text()) == minimal
    assert (run_dir / "history.jsonl").exists() and (tmp_path / "latest").exists()


def test_search_for_scope_id_ignored_runs_128_bit_ledgers_and_records_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--id-bits 128` reaches the workload (its ledgers spread over BP-35 scopes), and the
    minimal test says so, for a replay to use the same ids."""
    args = [*HYPOTHESIS, "--id-bits", "128", "--bug", "scope-id-ignored", "--max-examples", "20"]
    with pytest.raises(SystemExit) as exited:
        main([*args, "--budget", GUARD, "--store", str(tmp_path), "--json"])
    assert exited.value.code == 1
    summary = json.loads(capsys.readouterr().out)
    assert summary["minimal"]["id_bits"] == 128 and summary["minimal"]["bookies"] == 3
    history = (Path(summary["run_dir"]) / "history.jsonl").read_text().splitlines()
    creates = [op for op in map(json.loads, history) if op["f"] == "create" and op["type"] == "ok"]
    workload = [op for op in creates if "after_heal" not in op["value"]]  # not the progress check
    assert workload and all(isinstance(op["value"]["ledger"], str) for op in workload)
    replay = shlex.split(summary["replay"])  # for containers; here run in the simulation
    assert replay[:2] == ["bkchaos", "test"] and "--id-bits" in replay and "--schedule" in replay
    with pytest.raises(SystemExit) as replayed:
        main([*replay[1:], "--runtime", "sim", "--store", str(tmp_path / "replays")])
    assert replayed.value.code == 1  # the bug again


def test_workload_settings_given_to_the_search_are_kept_not_drawn(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fixed = ["--concurrency", "8", "--pipeline", "2", "--wq", "3", "--aq", "3"]
    shares = ["--takeovers", "0", "--writer-crashes", "0"]
    args = [*HYPOTHESIS, "--id-bits", "128", "--bug", "scope-id-ignored", *fixed, *shares]
    with pytest.raises(SystemExit) as exited:
        main([*args, "--max-examples", "20", "--budget", GUARD, "--store", str(tmp_path), "--json"])
    assert exited.value.code == 1
    minimal = json.loads(capsys.readouterr().out)["minimal"]
    kept = ("concurrency", "pipeline", "write_quorum", "ack_quorum", "takeovers", "writer_crashes")
    assert [minimal[k] for k in kept] == [8, 2, 3, 3, 0, 0]


@settings(max_examples=200, deadline=None, database=None, derandomize=True)
@given(data=st.data(), workload=st.sampled_from(WORKLOADS))
def test_drawn_workload_settings_always_make_a_test_bkchaos_test_accepts(
    data: st.DataObject, workload: str
) -> None:
    """Whatever the search draws, `TestSpec`'s own checks pass (pipeline within the workers
    of an agent, quorums within the ensemble, shares within bounds)."""
    spec = data.draw(sim_tests(SimSpec(workload=workload), draw=EVERY_SETTING))
    spec.as_test()


def test_a_search_draws_the_workload_settings_it_is_not_given() -> None:
    """Settings named in `draw` vary (here to the shape that exposed unbounded-no-truncate);
    the others stay the base's."""
    base = SimSpec(workload="unbounded")
    spec = find(
        sim_tests(base, draw=EVERY_SETTING),
        lambda s: (s.concurrency, s.pipeline, s.write_quorum, s.takeovers) == (16, 4, 3, 0.5),
        settings=settings(database=None, derandomize=True, max_examples=2000),
    )
    assert (spec.ack_quorum, spec.writer_crashes) == (2, 0.0)  # shrunk back to the base's
    fixed = find(
        sim_tests(base, draw=frozenset({"takeovers"})),
        lambda s: s.takeovers == 0.5,
        settings=settings(database=None, derandomize=True),
    )
    assert (fixed.concurrency, fixed.pipeline, fixed.write_quorum) == (4, 1, 2)


def test_a_search_may_slow_one_client_link_to_some_bookies() -> None:
    """Packet faults also shape a client's egress, to chosen bookies, for longer than the
    default delay: the shape of link that leaves a replica behind the others."""
    spec = find(
        sim_tests(SimSpec(), kinds=("packet",)),
        lambda s: any(
            step["value"]["nodes"] == ["c2"]
            and step["value"].get("to") == ["b1"]
            and step["value"].get("delay_ms") == 200
            for step in s.schedule
        ),
        settings=settings(database=None, derandomize=True, max_examples=2000),
    )
    assert {step["f"] for step in spec.schedule} == {"start-packet", "stop-packet"}


def test_a_search_may_kill_every_bookie_at_once() -> None:
    """A kill, pause or power loss may hit every bookie together (a rack losing power):
    the whole-cluster outage one or two nodes per fault never arrange."""
    spec = find(
        sim_tests(SimSpec(), kinds=("kill",)),
        lambda s: any(step["value"]["nodes"] == ["b1", "b2", "b3"] for step in s.schedule),
        settings=settings(database=None, derandomize=True, max_examples=2000),
    )
    assert {step["f"] for step in spec.schedule} == {"kill", "restart"}


def test_a_search_with_a_spare_bookie_draws_faults_on_it() -> None:
    """`--bookies 4`: the fourth bookie (the spare an ensemble change needs) is a target."""
    spec = find(
        sim_tests(SimSpec(bookies=4)),
        lambda s: any("b4" in step["value"]["nodes"] for step in s.schedule),
        settings=settings(database=None, derandomize=True),
    )
    assert spec.bookies == 4


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--pipeline", "3", "--concurrency", "4"], "--pipeline 3"),
        (["--wq", "4"], "WQ=4"),
        (["--bookies", "2"], "--bookies"),
        (["--budget", "0"], "--budget"),
        (["--max-examples", "0"], "--max-examples"),
        (["--bug", "no-such-bug"], "no-such-bug"),
        (["--nemesis", "power-loss,flood"], "unknown: flood"),
        (["--max-triggered", "1"], "--max-triggered is for --strategy hypothesis"),
        (["--jobs", "0"], "--jobs"),
        (["--jobs", "-2"], "--jobs"),
        (["--jobs", "two"], "--jobs"),
        (["--jobs", "2", "--strategy", "hypothesis"], "--jobs is for --strategy corpus"),
    ],
)
def test_bad_search_arguments_exit_254_and_say_what_to_change(
    args: list[str], says: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["search", *args, "--store", str(tmp_path)])
    assert exited.value.code == 254
    err = capsys.readouterr().err
    assert says in err and "Traceback" not in err
    assert not list(tmp_path.iterdir())  # nothing ran, nothing stored
