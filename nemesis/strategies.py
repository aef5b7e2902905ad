"""Hypothesis strategies that draw fault schedules, for `@given(schedule=fault_schedules())`.

A drawn schedule is a tuple of steps `{"at": seconds, "f": op, "value": {"nodes": [...]}}`
in time order: the `TestSpec.schedule` format, so it is saved in `test.json` and replays
with `bkchaos test --schedule RUN_DIR/test.json`. Each fault is a start/stop pair on one
node (kill then restart, pause then resume); faults on different nodes may overlap, up to
`max_overlap` at once, and one node never carries two faults at a time (a paused bookie
cannot also be killed and resumed meaningfully). Times are whole tenths of a second, so
schedules print short and shrink towards fewer, earlier, shorter faults.
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument

from nemesis.kinds import NEMESES, START_STOP
from nemesis.schedule import TICKS_PER_S

__all__ = ["AVAILABLE_KINDS", "fault_schedules"]

AVAILABLE_KINDS: tuple[str, ...] = tuple(k for k in NEMESES if k in START_STOP)
"""Fault kinds that both the test spec accepts and a schedule can start and stop."""


def fault_schedules(
    *,
    kinds: tuple[str, ...] | None = None,
    nodes: tuple[str, ...] = ("b1", "b2", "b3"),
    time_limit: float = 10.0,
    min_faults: int = 1,
    max_faults: int = 4,
    max_overlap: int = 2,
    min_duration: float = 0.5,
    max_duration: float | None = None,
) -> st.SearchStrategy[tuple[dict[str, Any], ...]]:
    """Schedules of faults that all start and stop within `time_limit` seconds.

    `time_limit` is the run's own, so every drawn fault happens. Between `min_faults` and
    `max_faults` faults are drawn; one that finds its node busy to the end, or that would
    make more than `max_overlap` faults at once, is dropped (the first always fits).
    """
    kinds = AVAILABLE_KINDS if kinds is None else tuple(kinds)
    max_duration = time_limit if max_duration is None else max_duration
    _validate(
        kinds, nodes, time_limit, min_faults, max_faults, max_overlap, min_duration, max_duration
    )
    limit = round(time_limit * TICKS_PER_S)
    shortest = max(1, round(min_duration * TICKS_PER_S))
    longest = max(shortest, round(max_duration * TICKS_PER_S))

    @st.composite
    def schedules(draw: st.DrawFn) -> tuple[dict[str, Any], ...]:
        faults: list[tuple[int, int, str, str]] = []  # (start, end, kind, node) in ticks
        free = dict.fromkeys(nodes, 0)  # when each node is next free of faults
        for _ in range(draw(st.integers(min_faults, max_faults))):
            node = draw(st.sampled_from(nodes))
            kind = draw(st.sampled_from(kinds))
            latest_start = limit - shortest
            if free[node] > latest_start:
                continue  # this node is busy until the end: one fault fewer
            start = draw(st.integers(free[node], min(free[node] + limit // 2, latest_start)))
            end = start + draw(st.integers(shortest, min(longest, limit - start)))
            if _overlap(faults, start, end) >= max_overlap:
                continue  # too many faults at once: one fault fewer
            faults.append((start, end, kind, node))
            free[node] = end
        return _steps(faults)

    return schedules()


def _overlap(faults: list[tuple[int, int, str, str]], start: int, end: int) -> int:
    """The most faults already active at any moment of [start, end)."""
    moments = [start, *(s for s, _, _, _ in faults if start <= s < end)]
    return max(sum(s <= t < e for s, e, _, _ in faults) for t in moments)


def _steps(faults: list[tuple[int, int, str, str]]) -> tuple[dict[str, Any], ...]:
    """Start and stop steps in time order; at one moment a stop goes before a start."""
    events = []
    for start, end, kind, node in faults:
        begin, finish = START_STOP[kind]
        events += [(start, 1, begin, node), (end, 0, finish, node)]
    return tuple(
        {"at": tick / TICKS_PER_S, "f": f, "value": {"nodes": [node]}}
        for tick, _, f, node in sorted(events)
    )


def _validate(
    kinds: tuple[str, ...],
    nodes: tuple[str, ...],
    time_limit: float,
    min_faults: int,
    max_faults: int,
    max_overlap: int,
    min_duration: float,
    max_duration: float,
) -> None:
    """Refuse bad arguments up front, naming the parameter and the value."""
    bad = [k for k in kinds if k not in AVAILABLE_KINDS]
    if not kinds or bad:
        raise InvalidArgument(f"kinds={kinds!r}: choose among {AVAILABLE_KINDS}")
    if not nodes:
        raise InvalidArgument("nodes=(): a schedule needs at least one target node")
    if not time_limit > 0:
        raise InvalidArgument(f"time_limit={time_limit!r} must be positive")
    if not 0 <= min_faults <= max_faults:
        raise InvalidArgument(f"need 0 <= min_faults <= max_faults, got {min_faults}, {max_faults}")
    if max_overlap < 1:
        raise InvalidArgument(f"max_overlap={max_overlap!r} must be at least 1")
    if not 1 / TICKS_PER_S <= min_duration <= max_duration <= time_limit:
        raise InvalidArgument(
            f"need 0.1 <= min_duration <= max_duration <= time_limit (tenths of a second), got "
            f"{min_duration}, {max_duration}, {time_limit}"
        )
