"""Pure quorum logic: striping, LAC over a contiguous AQ prefix, fencing coverage, and the
recovery-read thresholds of the reference material (003, 004)."""

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bookie_image import bugs
from bookie_image.client.quorum import (
    AckTracker,
    QuorumConfig,
    ReadOutcome,
    RecoveryDecision,
    RecoveryReadTally,
    ack_quorum_survives,
    negative_threshold,
    quorum_covered,
    write_set,
)

P, N, U = ReadOutcome.POSITIVE, ReadOutcome.NEGATIVE, ReadOutcome.UNKNOWN


def test_config_validates() -> None:
    with pytest.raises(ValueError, match="write_quorum=4"):
        QuorumConfig(3, 4, 2)
    with pytest.raises(ValueError):
        QuorumConfig(3, 2, 0)


def test_write_set_stripes_round_robin() -> None:
    # 004: E=3, WQ=2 -> entry 0 on 0,1; entry 1 on 1,2; entry 2 on 2,0
    c = QuorumConfig(3, 2, 2)
    assert [write_set(e, c) for e in range(4)] == [[0, 1], [1, 2], [2, 0], [0, 1]]


def test_lac_moves_only_over_contiguous_ack_quorum_prefix() -> None:
    t = AckTracker(QuorumConfig(3, 3, 2))
    for e in range(3):
        t.expect(e)
    assert t.ack(1, 0) == [] and t.ack(1, 1) == []  # entry 1 committed, entry 0 not
    assert t.last_add_confirmed == -1
    assert t.ack(0, 2) == []  # one ack is not AQ
    assert t.ack(0, 0) == [0, 1]
    assert t.ack(0, 0) == []  # duplicate acks are idempotent
    t.ack(2, 1)
    t.forget_bookie(1)  # replaced bookie: its ack no longer counts
    assert t.ack(2, 2) == [] and t.ack(2, 0) == [2]


def test_lac_before_ack_quorum_bug() -> None:
    t = AckTracker(QuorumConfig(3, 3, 2), bugs=bugs.Bugs({"lac-before-ack-quorum"}))
    t.expect(0)
    assert t.ack(0, 0) == [0]


# (WQ, AQ) -> negatives required, the table of reference 003.
TABLE = {(2, 1): 2, (2, 2): 1, (3, 1): 3, (3, 2): 2, (3, 3): 1, (4, 2): 3, (4, 3): 2, (4, 4): 1}


@pytest.mark.parametrize(("wq", "aq"), sorted(TABLE))
def test_negative_threshold_table(wq: int, aq: int) -> None:
    config = QuorumConfig(wq + 1, wq, aq)
    assert negative_threshold(config) == TABLE[wq, aq]
    tally = RecoveryReadTally(config)
    decisions = [tally.record(N) for _ in range(TABLE[wq, aq])]
    assert decisions[-1] is RecoveryDecision.UNRECOVERABLE
    assert all(d is not RecoveryDecision.UNRECOVERABLE for d in decisions[:-1])


@pytest.mark.parametrize(("wq", "aq"), sorted(TABLE))
def test_unknown_is_never_negative(wq: int, aq: int) -> None:
    # One negative short of the threshold, every other answer unknown: recovery must abort.
    tally = RecoveryReadTally(QuorumConfig(wq, wq, aq))
    answers = [N] * (TABLE[wq, aq] - 1) + [U] * (wq - TABLE[wq, aq] + 1)
    decisions = [tally.record(a) for a in answers]
    assert decisions[-1] is RecoveryDecision.UNKNOWN
    assert RecoveryDecision.UNRECOVERABLE not in decisions


def test_reference_examples_wq3_aq2() -> None:
    # 004: Qw=3, Qa=2: any positive -> recoverable; N,N,U -> unrecoverable; N,U,U -> retry.
    c = QuorumConfig(3, 3, 2)
    t = RecoveryReadTally(c)
    assert t.record(U) is RecoveryDecision.UNDECIDED
    assert t.record(P) is RecoveryDecision.RECOVERABLE
    t = RecoveryReadTally(c)
    assert [t.record(x) for x in (N, N)][-1] is RecoveryDecision.UNRECOVERABLE
    t = RecoveryReadTally(c)
    assert [t.record(x) for x in (N, U, U)][-1] is RecoveryDecision.UNKNOWN


def test_unknown_as_negative_bug() -> None:
    t = RecoveryReadTally(QuorumConfig(3, 3, 2), bugs=bugs.Bugs({"recovery-unknown-as-negative"}))
    assert [t.record(x) for x in (N, U)][-1] is RecoveryDecision.UNRECOVERABLE


def _brute_force_covered(c: QuorumConfig, fenced: set[int]) -> bool:
    """No AQ-subset of any write set is entirely unfenced (003's definition)."""
    return not any(
        not set(quorum) & fenced
        for start in range(c.ensemble_size)
        for quorum in itertools.combinations(write_set(start, c), c.ack_quorum)
    )


@st.composite
def configs_and_fenced(draw: st.DrawFn) -> tuple[QuorumConfig, set[int]]:
    e = draw(st.integers(1, 7))
    wq = draw(st.integers(1, e))
    aq = draw(st.integers(1, wq))
    return QuorumConfig(e, wq, aq), draw(st.sets(st.integers(0, e - 1)))


@given(configs_and_fenced())
def test_fencing_coverage_matches_definition(case: tuple[QuorumConfig, set[int]]) -> None:
    config, fenced = case
    assert quorum_covered(config, fenced) == _brute_force_covered(config, fenced)


@pytest.mark.parametrize(("e", "aq"), [(3, 1), (3, 2), (3, 3), (5, 3), (4, 2)])
def test_fencing_needs_e_minus_aq_plus_one_when_e_equals_wq(e: int, aq: int) -> None:
    config = QuorumConfig(e, e, aq)
    need = e - aq + 1
    for fenced in itertools.combinations(range(e), need):
        assert quorum_covered(config, fenced)
    for fenced in itertools.combinations(range(e), need - 1):
        assert not quorum_covered(config, fenced)


def test_fencing_example_from_004() -> None:
    # E=3, WQ=AQ=2: write sets {0,1},{1,2},{2,0}: two fenced bookies are needed.
    c = QuorumConfig(3, 2, 2)
    assert not quorum_covered(c, {0})
    assert quorum_covered(c, {0, 2})


def test_ack_quorum_survives_failures_up_to_wq_minus_aq_per_write_set() -> None:
    assert ack_quorum_survives(QuorumConfig(3, 3, 2), {0})
    assert not ack_quorum_survives(QuorumConfig(3, 3, 2), {0, 1})
    assert not ack_quorum_survives(QuorumConfig(3, 2, 2), {0})
    # E=4, WQ=3, AQ=2: the write set {2, 3, 0} keeps only slot 3.
    assert not ack_quorum_survives(QuorumConfig(4, 3, 2), {0, 2})
    assert ack_quorum_survives(QuorumConfig(5, 3, 2), {0})
