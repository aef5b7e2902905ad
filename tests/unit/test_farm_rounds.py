"""The farm's driver loop (harness/farm.py) as pure logic: rounds drawn from the search's
space and steered by the rows that come back, whatever runs the tests. The rows here are
made up from each test's settings (a stand-in for the simulation, which tests/spark and
tests/sim run for real)."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from harness.farm import FarmOutcome, run_farm, spec_from_json, spec_json
from harness.runtime.sim import SimSpec
from harness.sim.corpus import Space, steered_search
from harness.sim.search import DRAWN_CHOICES
from harness.testspec import WORKLOADS
from nemesis.kinds import SIM_NEMESES

SPACE = Space(
    SimSpec(name="farm-clean"), WORKLOADS, SIM_NEMESES, frozenset({*DRAWN_CHOICES, "bookies"})
)


def made_up_row(test: dict[str, Any]) -> dict[str, Any]:
    """A row whose features and verdict follow from the test's settings alone."""
    spec = spec_from_json(test["spec"])
    digest = hashlib.sha256(test["spec"].encode()).digest()
    reached = {f"probe:p{b % 40}" for b in digest[:3]}
    invalid = spec.buggify and len(spec.schedule) >= 4
    return {
        **test,
        "features": sorted(reached),
        "verdict": "invalid" if invalid else "valid",
        "anomaly_types": ["lost-append"] if invalid else [],
        "cpu_s": 0.25,
    }


def shuffled_runner(calls: list[int]) -> Any:
    """Runs a round and returns its rows out of order, as Spark's tasks may finish."""

    def run(tests: list[dict[str, Any]]) -> list[dict[str, Any]]:
        calls.append(len(tests))
        return [made_up_row(t) for t in reversed(tests)]

    return run


@dataclass
class Farm:
    outcome: FarmOutcome
    rows: list[dict[str, Any]]


def farm(seed: int, calls: list[int] | None = None, **kwargs: Any) -> Farm:
    settings = {"round_size": 6, "budget_s": 600.0, "max_tests": 20, **kwargs}
    rows: list[dict[str, Any]] = []
    outcome = run_farm(
        SPACE,
        shuffled_runner([] if calls is None else calls),
        seed=seed,
        farm="20261127T000000",
        night="2026-11-27",
        on_round=lambda _number, got, _outcome: rows.extend(got),
        **settings,
    )
    return Farm(outcome, rows)


def test_a_spec_travels_as_json_and_comes_back_equal() -> None:
    spec = SimSpec(
        seed=7,
        bugs=("read-beyond-lac",),
        schedule=({"at": 0.1, "f": "kill", "value": {"nodes": ["b1"]}},),
        buggify=True,
        takeovers=0.5,
        name="farm-read-beyond-lac",
    )
    text = spec_json(spec)
    assert json.loads(text)["bugs"] == ["read-beyond-lac"]
    assert spec_from_json(text) == spec


def test_rounds_stop_at_the_test_bound_and_number_every_test() -> None:
    calls: list[int] = []
    done = farm(0, calls)
    assert calls == [6, 6, 6, 2]
    assert (done.outcome.rounds, done.outcome.tests) == (4, 20)
    assert done.outcome.cpu_s == 20 * 0.25
    assert [r["test"] for r in done.rows] == list(range(20))
    assert [r["round"] for r in done.rows] == [0] * 6 + [1] * 6 + [2] * 6 + [3] * 2


def test_the_same_seed_walks_the_same_tests_and_another_seed_others() -> None:
    specs = [r["spec"] for r in farm(3).rows]
    assert [r["spec"] for r in farm(3).rows] == specs
    assert [r["spec"] for r in farm(4).rows] != specs


def test_later_rounds_are_steered_by_what_earlier_rounds_reached() -> None:
    """Round 1 draws afresh (the corpus is empty); later rounds mostly mutate kept tests,
    so most of their tests share a fault step with a test kept before."""
    done = farm(1, max_tests=60, round_size=12)

    def steps(spec_text: str) -> set[str]:
        return {json.dumps(s, sort_keys=True) for s in spec_from_json(spec_text).schedule}

    kept = set().union(*(steps(spec_json(c.to_spec())) for c, _ in done.outcome.corpus.entries))
    later = [steps(r["spec"]) for r in done.rows[12:]]
    assert sum(bool(s & kept) for s in later) > len(later) / 2


def test_the_first_test_is_the_no_hint_search_s_first_test() -> None:
    """The farm and `bkchaos search` draw from one space by one function."""
    seen: list[SimSpec] = []
    steered_search(
        SPACE,
        600.0,
        search_seed=5,
        max_examples=1,
        on_example=lambda _n, spec, *_: seen.append(spec),
        run=lambda spec: {"valid": True, "anomaly_types": []},
    )
    assert spec_from_json(farm(5, max_tests=1).rows[0]["spec"]) == seen[0]


def test_an_interrupt_ends_the_farm_after_the_rounds_done() -> None:
    calls: list[int] = []
    runner = shuffled_runner(calls)

    def interrupted_in_round_3(tests: list[dict[str, Any]]) -> list[dict[str, Any]]:
        if len(calls) == 2:
            raise KeyboardInterrupt
        return runner(tests)

    outcome = run_farm(
        SPACE,
        interrupted_in_round_3,
        round_size=6,
        budget_s=600.0,
        max_tests=60,
        seed=0,
        farm="20261127T000000",
        night="2026-11-27",
        on_round=lambda *_: None,
    )
    assert (outcome.interrupted, outcome.rounds, outcome.tests) == (True, 2, 12)


def test_the_first_failure_of_each_anomaly_is_kept_for_shrinking() -> None:
    done = farm(2, max_tests=200, round_size=50)
    invalid = [r for r in done.rows if r["verdict"] == "invalid"]
    assert invalid, "the made-up rows fail for BUGGIFY with four or more steps"
    assert done.outcome.verdicts["invalid"] == len(invalid)
    assert list(done.outcome.failures) == ["lost-append"]
    failure = done.outcome.failures["lost-append"]
    assert failure.row == invalid[0]
    assert spec_json(failure.candidate.to_spec()) == invalid[0]["spec"]
