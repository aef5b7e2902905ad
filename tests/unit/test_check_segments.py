"""The streaming check (checkers.segments) against the whole-history one: the same
result, case for case and in the same order, on correct soak-shaped histories (cut
between epochs), on the same with each mutation injected (some mutations refer across
epochs, so the check must notice and start again without cuts), and on the real runs."""

from __future__ import annotations

import copy
import json
import random
import tarfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from checkers import CHECKERS, check, compose, history, index_history, synthesize
from checkers.history import Digests, Entangled, ops_from_dicts
from checkers.segments import index_segments
from tests.helpers.corpus import REAL_RUNS, edge_cases
from tests.helpers.histories import MUTATIONS, Ops, synthesized

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])

soaks = synthesized(ops=st.integers(40, 400), epochs=st.integers(2, 5))


def whole(ops: Ops | Path) -> str:
    """Today's checker: every checker over the whole indexed history, as JSON text (so
    that the order of anomalies and cases counts too)."""
    h = index_history(ops_from_dicts(ops)) if isinstance(ops, list) else None
    result = compose(CHECKERS)(h) if h is not None else check(ops, segment_lines=None)
    return json.dumps(result)


def streamed(ops: Ops | Path, segment_lines: int) -> str:
    return json.dumps(check(ops, segment_lines=segment_lines))


def test_a_soak_is_cut_between_its_epochs() -> None:
    ops = list(synthesize(5, ops=2000, epochs=4, ledgers=3, streams=2, read_fraction=0.2))
    h, segments = index_segments(ops_from_dicts(ops), 1)
    assert segments.count == 4
    assert h.appends == {} and h.reads == []  # the last segment's, dropped once folded
    assert json.dumps(check(ops, segment_lines=1)) == whole(ops)


@SETTINGS
@given(soaks, st.integers(1, 300))
def test_correct_soaks_check_the_same_streamed(ops: Ops, segment_lines: int) -> None:
    expected = whole(ops)
    assert json.loads(expected)["valid"] is True
    assert streamed(ops, segment_lines) == expected
    assert streamed(ops, 1) == expected


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(soaks, st.sampled_from(sorted(MUTATIONS)), st.randoms(use_true_random=False))
def test_each_mutation_checks_the_same_streamed(ops: Ops, name: str, rng: random.Random) -> None:
    mutated = MUTATIONS[name](copy.deepcopy(ops), rng)
    if mutated is None:
        mutated = ops
    expected = whole(mutated)
    assert streamed(mutated, 1) == expected
    assert streamed(mutated, rng.randint(1, 500)) == expected


def test_a_reference_across_a_cut_starts_again_without_cuts() -> None:
    """A read in the last epoch of a payload of the first: a garbage read if the first
    epoch had been dropped, a duplicate in truth."""
    ops = list(synthesize(7, ops=300, epochs=3, ledgers=2, read_fraction=0.2))
    first = next(op for op in ops if op["f"] == "append" and op["type"] == "ok")
    last_read = max(
        (i for i, op in enumerate(ops) if op["f"] == "read" and op["type"] == "ok"
         and op["value"]["entries"]),
    )  # fmt: skip
    ops[last_read]["value"]["entries"][0][1] = first["value"]["payload"]
    with pytest.raises(Entangled):
        index_segments(ops_from_dicts(ops), 1)
    result = check(ops, segment_lines=1)
    assert "duplicate" in result["anomaly_types"]
    assert "garbage-read" not in result["anomaly_types"]
    assert json.dumps(result) == whole(ops)


def test_retired_payload_digests_hold_exactly_what_was_added() -> None:
    digests = Digests()
    for start in range(0, 20_000, 2_000):  # ten segments: runs merged several times
        segment = Digests.of(f"p{n}" for n in range(start, start + 2_000, 2))
        assert not digests.holds_any(segment)
        digests.add(segment)
    assert len(digests) == 10_000 and len(digests.runs) < 10
    assert all(digests.holds_any(Digests.of([f"p{n}"])) for n in range(0, 20_000, 2))
    assert not any(digests.holds_any(Digests.of([f"p{n}"])) for n in range(1, 20_000, 2))
    both = Digests.of(["q", "p0", "q"])
    assert len(both) == 2 and digests.holds_any(both)
    digests.add(both)
    assert len(digests) == 10_002
    digests.add(Digests.of([]))
    assert len(digests) == 10_002


def test_a_digest_collision_only_costs_a_check_without_cuts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every payload colliding with a retired one: the check starts again without cuts
    and finds what the whole-history check finds, nothing more."""
    ops = list(synthesize(3, ops=300, epochs=3, ledgers=2, read_fraction=0.2))
    monkeypatch.setattr(history, "_holds", lambda run, digests: True)
    with pytest.raises(Entangled):
        index_segments(ops_from_dicts(ops), 1)
    assert streamed(ops, 1) == whole(ops)


@pytest.mark.parametrize("name", sorted(edge_cases()))
def test_edge_cases_check_the_same_streamed(name: str) -> None:
    ops = edge_cases()[name]
    assert streamed(ops, 1) == whole(ops)


def test_real_runs_check_the_same_streamed(tmp_path: Path) -> None:
    with tarfile.open(REAL_RUNS) as tar:
        tar.extractall(tmp_path, filter="data")
    histories = sorted(tmp_path.glob("*/history.jsonl"))
    assert histories
    for path in histories:
        assert streamed(path, 1) == whole(path), path


def test_big_cases_keep_the_first_max_cases_in_order() -> None:
    """More lost appends than MAX_CASES, spread over segments: the same first cases."""
    ops: list[dict[str, Any]] = list(synthesize(11, ops=3000, epochs=3, ledgers=3))
    for op in ops:  # every closed read returns nothing: every ok append is lost
        if op["f"] == "read" and op["type"] == "ok" and op["value"]["mode"] == "closed":
            op["value"]["entries"], op["value"]["lac"] = [], -1
    result = check(ops, segment_lines=1)
    assert result["checkers"]["ledger"]["anomaly_counts"]["lost-append"] > 1000
    assert json.dumps(result) == whole(ops)
