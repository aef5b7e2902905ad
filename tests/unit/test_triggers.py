"""The runtime-neutral parts of faults triggered by probes (nemesis/triggers.py) and the
reading of probe lines on real processes (harness/runtime/probe_tail.py, the node
follower bookie_image/image/follow.py)."""

from __future__ import annotations

import json
import os
import random
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bookie_image.image.follow import MAX_LINE, READY, LineSplitter, LogFollower, follow
from core.generator import Context, Pending
from harness.runtime.probe_tail import ProbeLine, parse_probe
from nemesis.triggers import TriggeredFaults, resolve_targets

BOOKIES = {"b1", "b2", "b3"}


def test_a_probe_line_gives_its_name_fields_and_clock() -> None:
    line = json.dumps(
        {"ts": 12.5, "event": "probe", "probe": "recovery-started", "bookies": ["h:1", "h:2"]}
    )
    assert parse_probe(line) == ProbeLine("recovery-started", {"bookies": ["h:1", "h:2"]}, 12.5)
    fenced = parse_probe(b'{"ts": 1, "event": "probe", "bookie": "h:1", "probe": "bookie-fenced"}')
    assert fenced == ProbeLine("bookie-fenced", {"bookie": "h:1"}, 1.0)


def test_other_lines_are_no_probes() -> None:
    for line in (
        '{"ts": 1, "event": "ready", "probe": "recovery-started"}',
        '{"ts": 1, "event": "probe", "probe": "recovery-st',  # cut short
        "Traceback (most recent call last):",
        '{"event": "probe", "probe": "recovery-started"}',  # no clock
        "[1, 2]",
    ):
        assert parse_probe(line) is None, line


def test_targets_are_named_from_the_probe() -> None:
    ensemble = ["b2", "b3", "b1"]
    assert resolve_targets(["@0"], ensemble, "c1", BOOKIES) == ["b2"]
    assert resolve_targets(["@2", "b3"], ensemble, "c1", BOOKIES) == ["b1", "b3"]
    assert resolve_targets(["@self"], [], "b3", BOOKIES) == ["b3"]


def test_every_bookie_is_named_whatever_the_probe_names() -> None:
    assert resolve_targets(["@all"], [], "b2", BOOKIES) == ["b1", "b2", "b3"]
    both = resolve_targets(["@others", "@all"], ["b3"], "c1", BOOKIES, ["c1", "c2"])
    assert both == ["c2", "b1", "b2", "b3"]
    assert resolve_targets(["@all", "@0"], ["b3"], "c1", BOOKIES) is None  # b3 twice
    assert resolve_targets(["b1", "@all"], [], "c1", BOOKIES) is None


def test_every_step_armed_for_a_probe_fires_at_its_next_reach() -> None:
    """A pause of the old writers and an outage of every bookie on one probe are one
    correlated failure: both fire at the reach, in the order armed; the next reach fires
    nothing."""
    steps = (
        {"at": 0.0, "on": "recovery-started", "f": "pause", "value": {"nodes": ["@others"]}},
        {"at": 0.0, "on": "recovery-started", "f": "kill", "value": {"nodes": ["@all"]}},
    )
    faults = TriggeredFaults(_View(), tuple({**step, "hold": 1.0} for step in steps))
    _ask(faults, 0.0)
    faults.on_probe("recovery-started", {"bookies": ["h:1"]}, "c1")
    assert [_ask(faults, 0.1)["value"]["nodes"], _ask(faults, 0.1)["value"]["nodes"]] == [
        ["c2"],
        ["b1", "b2", "b3"],
    ]
    faults.on_probe("recovery-started", {"bookies": ["h:1"]}, "c1")
    assert isinstance(_ask(faults, 0.2), Pending) and len(faults.fired) == 2


def test_targets_that_name_no_bookie_or_one_twice_cannot_be_hit() -> None:
    assert resolve_targets(["@2"], ["b1", "b2"], "c1", BOOKIES) is None  # no such member
    assert resolve_targets(["@self"], [], "c1", BOOKIES) is None  # a client reached it
    assert resolve_targets(["@0", "b1"], ["b1"], "c1", BOOKIES) is None


@dataclass
class _View:
    down: set[str] = field(default_factory=set)

    def bookie_names(self) -> dict[str, str]:
        return {f"h:{name[1]}": name for name in sorted(BOOKIES)}

    def clients(self) -> list[str]:
        return ["c1", "c2"]

    def hittable(self, node: str) -> bool:
        return node not in self.down

    def startable(self, node: str) -> bool:
        return True


def _faults(view: _View, clock: dict[str, float], late_s: float | None) -> TriggeredFaults:
    step = {"at": 0.0, "on": "recovery-started", "f": "kill", "value": {"nodes": ["@1"]}}
    return TriggeredFaults(view, ({**step, "hold": 0.5},), now=lambda: clock["now"], late_s=late_s)


def _ask(faults: TriggeredFaults, at: float) -> Any:
    return faults.op(Context(at, "nemesis", random.Random(0)))


def test_a_reach_fires_on_the_bookie_it_names_with_its_timing() -> None:
    clock = {"now": 1.0}
    faults = _faults(_View(), clock, late_s=0.2)
    assert isinstance(_ask(faults, 0.0), Pending)
    timing = {"node": "c2", "written_s": 0.99, "read_s": 1.0}
    faults.on_probe("recovery-started", {"bookies": ["h:3", "h:1"]}, "c2", timing)
    op = _ask(faults, 1.05)
    assert op == {
        "f": "kill",
        "value": {"nodes": ["b1"], "on": "recovery-started", "probe_timing": timing},
    }
    assert isinstance(_ask(faults, 1.5), Pending)  # held 0.5 s from when it fired
    assert _ask(faults, 1.55) == {"f": "restart", "value": {"nodes": ["b1"]}}


def test_a_reach_picked_up_late_or_aimed_at_a_down_bookie_waits_for_the_next() -> None:
    clock = {"now": 1.0}
    view = _View(down={"b1"})
    faults = _faults(view, clock, late_s=0.2)
    _ask(faults, 0.0)
    faults.on_probe("recovery-started", {"bookies": ["h:3", "h:1"]}, "c2")
    assert isinstance(_ask(faults, 1.1), Pending) and faults.armed  # b1 is down
    faults.on_probe("recovery-started", {"bookies": ["h:3", "h:2"]}, "c2")
    assert isinstance(_ask(faults, 1.5), Pending)  # the worker came 0.5 s after the reach
    assert faults.missed == 1 and faults.armed and not faults.fired


def test_a_reach_whose_targets_take_too_long_to_read_waits_for_the_next() -> None:
    """Reading whether the target can be hit (an exec on a loaded docker node) can take
    longer than the window: the fault would start late, so the step re-arms."""
    clock = {"now": 1.0}

    @dataclass
    class _SlowView(_View):
        def hittable(self, node: str) -> bool:
            clock["now"] += 0.3
            return True

    faults = _faults(_SlowView(), clock, late_s=0.2)
    _ask(faults, 0.0)
    faults.on_probe("recovery-started", {"bookies": ["h:3", "h:1"]}, "c2")
    assert isinstance(_ask(faults, 1.05), Pending)
    assert faults.missed == 1 and faults.armed and not faults.fired


def test_a_line_longer_than_the_bound_is_dropped_whole() -> None:
    splitter = LineSplitter()
    assert splitter.feed(b"a\n" + b"x" * (MAX_LINE + 1)) == [b"a"]
    assert splitter.feed(b"x" * 10 + b"\nb\nc") == [b"b"]  # the long line's rest goes too
    assert splitter.feed(b"\n") == [b"c"]


def test_a_log_is_followed_from_its_end_by_whole_lines(tmp_path: Path) -> None:
    log = tmp_path / "agent.log"
    log.write_bytes(b"written before the run\n")
    follower = LogFollower(log)
    try:
        assert list(follower.lines()) == []
        with log.open("ab") as out:
            out.write(b"one\ntw")
            out.flush()
            assert list(follower.lines()) == [b"one"]
            out.write(b"o\n")
        assert list(follower.lines()) == [b"two"]
    finally:
        follower.close()


def test_the_node_follower_prints_wanted_lines_until_its_input_ends(tmp_path: Path) -> None:
    """bookie_image/image/follow.py as the controller runs it on a node: READY, then the
    new lines holding a needle; it returns when its standard input ends."""
    log = tmp_path / "agent.log"
    log.write_bytes(b'{"probe": "wanted"} written before\n')
    stdin_r, stdin_w = os.pipe()
    stdout_r, stdout_w = os.pipe()
    needles = [b'"probe": "wanted"']
    thread = threading.Thread(target=follow, args=(str(log), needles, stdin_r, stdout_w))
    thread.start()
    try:
        out = os.fdopen(stdout_r, "rb", buffering=0)
        assert out.readline() == READY
        with log.open("ab") as writer:
            writer.write(b'{"probe": "other"}\n{"probe": "wanted"} new\n')
        assert out.readline() == b'{"probe": "wanted"} new\n'
    finally:
        os.close(stdin_w)
        thread.join(timeout=10)
    assert not thread.is_alive()
    for fd in (stdin_r, stdout_w):
        os.close(fd)
    out.close()
