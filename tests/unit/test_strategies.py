"""Fault schedules: what `fault_schedules` draws, how `ScheduleReplay` plays it back, and
how `bkchaos test --schedule` refuses a bad file."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument

from core.generator import NOT_FOR_THIS_ASKER, Context, Pending
from harness.cli import main
from harness.testspec import TestSpec
from nemesis.schedule import START_STOP, STEP_KIND, ScheduleReplay
from nemesis.strategies import AVAILABLE_KINDS, fault_schedules

NODES = ("b1", "b2", "b3")


def _faults(steps: tuple[dict, ...]) -> list[tuple[float, float, str, str]]:
    """(start, stop, kind, node) of each fault, checking that starts and stops pair up."""
    open_: dict[str, tuple[float, str]] = {}
    faults = []
    for step in steps:
        (node,) = step["value"]["nodes"]
        kind = STEP_KIND[step["f"]]
        if step["f"] == START_STOP[kind][0]:
            assert node not in open_, f"{node} got a second fault while one is active"
            open_[node] = (step["at"], kind)
        else:
            start, started_kind = open_.pop(node)
            assert started_kind == kind
            faults.append((start, step["at"], kind, node))
    assert not open_, "every fault stops within the schedule"
    return faults


@settings(max_examples=200)
@given(
    data=st.data(),
    time_limit=st.sampled_from([2.0, 5.0, 10.0, 30.0]),
    max_overlap=st.integers(1, 3),
    kinds=st.sampled_from([("kill",), ("pause",), AVAILABLE_KINDS]),
)
def test_drawn_schedules_are_replayable_and_respect_their_bounds(
    data: st.DataObject, time_limit: float, max_overlap: int, kinds: tuple[str, ...]
) -> None:
    steps = data.draw(
        fault_schedules(kinds=kinds, time_limit=time_limit, max_overlap=max_overlap, max_faults=6)
    )
    times = [s["at"] for s in steps]
    assert times == sorted(times) and times[0] >= 0 and times[-1] <= time_limit
    faults = _faults(steps)
    assert 1 <= len(faults) <= 6
    assert {kind for _, _, kind, _ in faults} <= set(kinds)
    for start, stop, _, _ in faults:
        assert round(stop - start, 1) >= 0.5  # min_duration
        active = sum(s <= start < e for s, e, _, _ in faults)
        assert active <= max_overlap
    spec = TestSpec(schedule=steps, time_limit=time_limit)  # serialises into test.json
    assert set(spec.nemesis) == {kind for _, _, kind, _ in faults}
    assert TestSpec.from_dict(json.loads(spec.to_json())) == spec


@pytest.mark.parametrize(
    ("kwargs", "names"),
    [
        ({"kinds": ("meteor",)}, "kinds"),
        ({"nodes": ()}, "nodes"),
        ({"time_limit": 0}, "time_limit"),
        ({"min_faults": 3, "max_faults": 2}, "min_faults"),
        ({"max_overlap": 0}, "max_overlap"),
        ({"min_duration": 5, "max_duration": 1}, "min_duration"),
        ({"min_duration": 0.01}, "min_duration"),
    ],
)
def test_bad_arguments_name_the_parameter(kwargs: dict, names: str) -> None:
    with pytest.raises(InvalidArgument, match=names):
        fault_schedules(**kwargs)


def test_replay_plays_each_step_at_its_time_after_the_first_ask() -> None:
    steps = (
        {"at": 1.0, "f": "kill", "value": {"nodes": ["b1"]}},
        {"at": 1.0, "f": "pause", "value": {"nodes": ["b2"]}},
        {"at": 2.5, "f": "restart", "value": {"nodes": ["b1"]}},
    )
    replay = ScheduleReplay(steps)
    rng = random.Random(0)

    def ask(t: float, process: int | str = "nemesis") -> object:
        return replay.op(Context(t, process, rng))

    assert ask(100.0) == Pending(101.0)  # the first ask starts the schedule's clock
    assert ask(100.9) == Pending(101.0)
    assert ask(101.0, process=0) is NOT_FOR_THIS_ASKER  # clients never get faults
    assert ask(101.0) == {"f": "kill", "value": {"nodes": ["b1"]}}
    assert ask(101.0) == {"f": "pause", "value": {"nodes": ["b2"]}}
    assert ask(102.0) == Pending(102.5)
    assert ask(103.0) == {"f": "restart", "value": {"nodes": ["b1"]}}
    assert ask(104.0) is None


def _bkchaos(*args: str) -> int:
    with pytest.raises(SystemExit) as exit_:
        main(list(args))
    return int(exit_.value.code)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "No such file"),
        ("{not json", "Expecting property name"),
        ('{"seed": 3}', "no schedule steps"),
        ('[{"at": 1, "f": "kill", "value": {"nodes": ["b9"]}}]', "value.nodes"),
        ('[{"at": 2, "f": "kill", "value": {"nodes": ["b1"]}}, {"at": 1}]', "step 1"),
        ('[{"at": 0, "f": "start-packet", "value": {"nodes": ["b1"], "rate": "fast"}}]', "mbit"),
        ('[{"at": 0, "f": "start-packet", "value": {"nodes": ["b1"], "reorder_pct": 5}}]', "delay"),
        ('[{"at": 0, "f": "start-packet", "value": {"nodes": ["b1"], "delay_ms": "9"}}]', "number"),
        ('[{"at": 1, "f": "kill", "value": {"nodes": ["c1"]}}]', "value.nodes"),
        ('[{"at": 0, "f": "start-packet", "value": {"nodes": ["c1"], "to": ["b7"]}}]', "['b7']"),
    ],
)
def test_bad_schedule_files_exit_254_saying_what_to_do(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str | None, message: str
) -> None:
    path = tmp_path / "schedule.json"
    if content is not None:
        path.write_text(content)
    code = _bkchaos("test", "--store", str(tmp_path / "store"), "--schedule", str(path))
    err = capsys.readouterr().err
    assert code == 254, err
    assert message in err and "schedule" in err and "Traceback" not in err
    assert not (tmp_path / "store").exists()
