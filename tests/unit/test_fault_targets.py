"""What seeded fault schedules aim at: `--targets` (one, a minority, another role) and
`--grudge` (one partition shape instead of drawn ones)."""

from __future__ import annotations

import random
from typing import Any

import pytest

from core.generator import Context, Generator, Pending
from harness.errors import UserError
from harness.testspec import TestSpec, parsed_grudge
from nemesis.combined import CombinedCycle, NestedCycle
from nemesis.net import parsed_packet
from nemesis.schedule import DRAWN_GRUDGES, START_STOP, FaultCycle, Targets, node_set

BOOKIES = ("b1", "b2", "b3", "b4", "b5")
STARTS = {pair[0] for pair in START_STOP.values()}


def _ops(cycle: Generator, seconds: float = 60, seed: int = 1) -> list[dict[str, Any]]:
    rng, ops = random.Random(seed), []
    for tick in range(int(seconds * 10)):
        op = cycle.op(Context(tick / 10, "nemesis", rng, 0))
        if isinstance(op, dict):
            ops.append(op)
    return ops


def test_a_minority_is_hit_together_and_healed_together() -> None:
    targets = Targets(BOOKIES, group=2)
    for cycle in (
        FaultCycle(("kill",), BOOKIES, 2.0, targets),
        CombinedCycle(("kill", "pause"), BOOKIES, 2.0, targets),
    ):
        ops = _ops(cycle)
        starts = [tuple(op["value"]["nodes"]) for op in ops if op["f"] in STARTS]
        stops = [tuple(op["value"]["nodes"]) for op in ops if op["f"] not in STARTS]
        assert starts and all(len(set(nodes)) == 2 for nodes in starts)
        assert set(stops) <= set(starts)  # each stop heals exactly a group it started
        held: set[str] = set()
        for op in ops:  # a node is never in two faults at once
            nodes = set(op["value"]["nodes"])
            if op["f"] in STARTS:
                assert not nodes & held
                held |= nodes
            else:
                held -= nodes


@pytest.mark.parametrize(
    ("size", "bookies", "count"),
    [("one", 5, 1), ("minority", 5, 2), ("majority", 5, 3), ("all", 5, 5), ("minority", 3, 1)],
)
def test_a_node_set_drawn_by_size_has_that_many_of_the_bookies(
    size: str, bookies: int, count: int
) -> None:
    """Jepsen's sizes over the bookies' count; a pause may draw clients too, but "all" is
    every bookie (the cluster that loses power), never a client."""
    names = BOOKIES[:bookies]
    sources = (*names, "c1", "c2")
    drawn = node_set(size, names, sources, random.Random(3).sample)
    assert len(set(drawn)) == len(drawn) == count and set(drawn) <= set(sources)
    if size == "all":
        assert drawn == names


def test_partitions_take_the_given_grudge_or_draw_one() -> None:
    given = Targets(BOOKIES, grudge={"b1": ["b2"]})
    ops = _ops(FaultCycle(("partition",), BOOKIES, 2.0, given))
    assert {str(op["value"]["grudge"]) for op in ops if op["f"] == "start-partition"} == {
        "{'b1': ['b2']}"
    }
    drawn = _ops(FaultCycle(("partition",), BOOKIES, 1.0), seconds=120)
    names = {op["value"]["grudge"] for op in drawn if op["f"] == "start-partition"}
    assert names <= set(DRAWN_GRUDGES) and len(names) > 1


def test_corruptions_take_the_given_mode_or_leave_the_nemesis_default() -> None:
    """`--corruption tail`: every seeded corrupt op says so; without it none names a mode."""
    tail = _ops(
        CombinedCycle(("corrupt", "kill"), BOOKIES, 1.0, Targets(BOOKIES, corruption="tail"))
    )
    assert {op["value"].get("mode") for op in tail if op["f"] == "corrupt"} == {"tail"}
    assert all("mode" not in op["value"] for op in tail if op["f"] != "corrupt")
    default = _ops(FaultCycle(("corrupt",), BOOKIES, 1.0))
    assert default and all("mode" not in op["value"] for op in default)


def test_packet_faults_take_the_given_shaping_or_leave_the_nemesis_default() -> None:
    """`--packet rate=200kbit`: every seeded start-packet carries it, and nothing else does."""
    shaped = Targets(BOOKIES, packet=parsed_packet("rate=200kbit"))
    ops = _ops(CombinedCycle(("packet", "pause"), BOOKIES, 1.0, shaped))
    starts = [op["value"] for op in ops if op["f"] == "start-packet"]
    assert starts and all(value["rate"] == "200kbit" for value in starts)
    assert all("rate" not in op["value"] for op in ops if op["f"] != "start-packet")
    default = _ops(FaultCycle(("packet",), BOOKIES, 1.0))
    assert default and all(set(op["value"]) == {"nodes"} for op in default)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"nemesis": ("kill",), "packet": "rate=1mbit"}, "add packet to --nemesis"),
        ({"nemesis": ("packet",), "packet": "speed=1"}, "keys among"),
        ({"nemesis": ("packet",), "packet": "loss_pct=150"}, "from 0 to 100"),
        ({"nemesis": ("packet",), "packet": "reorder_pct=5"}, "give delay_ms too"),
        ({"nemesis": ("packet",), "packet": "rate=1mbit,to=b7"}, r"names \['b7'\]"),
        (
            {
                "nemesis": ("packet",),
                "packet": "rate=1mbit",
                "schedule": ({"at": 0, "f": "start-packet", "value": {"nodes": ["b1"]}},),
            },
            "drop one of the two",
        ),
    ],
)
def test_a_packet_shaping_that_cannot_apply_is_refused_saying_why(
    spec: dict[str, Any], message: str
) -> None:
    with pytest.raises(UserError, match=message):
        TestSpec(runtime="docker", **spec)


def test_role_targets_and_grudges_are_checked_before_anything_starts() -> None:
    assert TestSpec(runtime="docker", targets="zk", nemesis=("kill",)).targets == "zk"
    with pytest.raises(UserError, match="docker or ssh"):
        TestSpec(targets="client", nemesis=("kill",))  # local
    with pytest.raises(UserError, match="in the sim"):
        TestSpec(runtime="sim", targets="client", nemesis=("packet", "kill"))
    shaped = TestSpec(runtime="sim", targets="client", nemesis=("packet",), packet="to=b1")
    assert shaped.targets == "client"  # a client's link to a bookie, in the simulation
    with pytest.raises(UserError, match="takes only"):
        TestSpec(runtime="docker", targets="zk", nemesis=("wipe",))
    with pytest.raises(UserError, match="add partition"):
        TestSpec(runtime="docker", nemesis=("kill",), grudge="halves")
    assert parsed_grudge('{"b1": ["b2", "zk1"]}') == {"b1": ["b2", "zk1"]}
    for bad in ("thirds", "{nope", '["b1"]'):
        with pytest.raises(ValueError):
            parsed_grudge(bad)


def test_writer_targets_hit_every_bookie_the_live_callable_names() -> None:
    ensembles = iter([("b1", "b2", "b3"), (), ("b2", "b4", "b5")])
    targets = Targets(BOOKIES, live=lambda: next(ensembles, ()))
    ops = _ops(FaultCycle(("kill",), BOOKIES, 2.0, targets), seconds=14)
    kills = [op["value"]["nodes"] for op in ops if op["f"] == "kill"]
    assert kills == [["b1", "b2", "b3"], ["b2", "b4", "b5"]]  # none while no ledger is open
    restarts = [op["value"]["nodes"] for op in ops if op["f"] == "restart"]
    assert restarts == kills[: len(restarts)]


@pytest.mark.parametrize(
    "cycle",
    [
        FaultCycle(("kill",), BOOKIES, 2.0),
        CombinedCycle(("kill", "pause"), BOOKIES, 2.0),
        NestedCycle(("packet", "kill"), BOOKIES, 2.0),
    ],
    ids=["one kind", "combined", "nested"],
)
def test_asked_only_when_they_say_a_fault_is_due_schedules_keep_cycling(cycle) -> None:
    """The nemesis worker sleeps until the time a schedule answers; every answer is in the
    future, and asking only then still starts and stops faults all run long."""
    rng, t, ops = random.Random(1), 0.0, []
    while t < 60:
        answer = cycle.op(Context(t, "nemesis", rng, 0))
        if isinstance(answer, Pending):
            assert answer.until is not None and answer.until > t
            t = answer.until
        else:
            ops.append(answer)
    assert len([op for op in ops if op["f"] in STARTS]) >= 10
    assert len([op for op in ops if op["f"] not in STARTS]) >= 10


def test_nested_faults_start_in_the_given_order_on_other_nodes_and_stop_innermost_first() -> None:
    """`--nemesis-order nested`: every round slows a bookie, then kills another while the
    slowdown holds, then restarts it before lifting the slowdown — and a seed replays it."""
    shaped = Targets(BOOKIES, packet=parsed_packet("rate=64kbit"))
    ops = _ops(NestedCycle(("packet", "kill"), BOOKIES, 1.0, shaped), seconds=30)
    rounds = [ops[i : i + 4] for i in range(0, len(ops) - 3, 4)]
    assert len(rounds) >= 10
    for start_packet, kill, restart, stop_packet in rounds:
        assert [start_packet["f"], kill["f"], restart["f"], stop_packet["f"]] == [
            "start-packet",
            "kill",
            "restart",
            "stop-packet",
        ]
        assert start_packet["value"]["rate"] == "64kbit"
        assert kill["value"]["nodes"] == restart["value"]["nodes"]
        assert start_packet["value"]["nodes"] == stop_packet["value"]["nodes"]
        assert not set(kill["value"]["nodes"]) & set(start_packet["value"]["nodes"])
    assert len({op["value"]["nodes"][0] for op in ops if op["f"] == "kill"}) > 1
    again = _ops(NestedCycle(("packet", "kill"), BOOKIES, 1.0, shaped), seconds=30)
    assert again == ops


def test_nesting_is_refused_without_two_seeded_fault_kinds() -> None:
    with pytest.raises(UserError, match="at least two kinds"):
        TestSpec(nemesis=("kill",), nemesis_order="nested")
    with pytest.raises(UserError, match="choose one of"):
        TestSpec(nemesis=("kill", "pause"), nemesis_order="inside-out")
    assert TestSpec(nemesis=("pause", "kill"), nemesis_order="nested").nemesis == ("pause", "kill")
    with pytest.raises(ValueError, match="two fault kinds"):
        NestedCycle(("kill",), BOOKIES, 1.0)


@pytest.mark.parametrize("seed", range(20))
def test_no_drawn_schedule_restarts_a_node_while_a_partition_holds(seed: int) -> None:
    """A bookie started again while a partition cuts it off from ZooKeeper cannot serve
    (it gives up after 30 s), so its restart would be unproven: the partition stops first."""
    restarts = {START_STOP[k][1] for k in ("kill", "power-loss", "corrupt", "wipe")}
    for cycle in (
        CombinedCycle(("partition", "kill", "power-loss"), BOOKIES, 1.0),
        NestedCycle(("partition", "power-loss"), BOOKIES, 1.0),
        NestedCycle(("kill", "partition", "wipe"), BOOKIES, 1.0),
    ):
        partitioned, seen = False, set()
        for op in _ops(cycle, seconds=40, seed=seed):
            seen.add(op["f"])
            if op["f"] in ("start-partition", "stop-partition"):
                partitioned = op["f"] == "start-partition"
            assert not (partitioned and op["f"] in restarts), op
        assert {"start-partition", "stop-partition"} <= seen and seen & restarts
