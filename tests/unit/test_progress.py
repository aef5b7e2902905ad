"""Progress as a run reports it: the faults in force, the plain line's throttle, and a
help text that lists every fault kind the code knows."""

from __future__ import annotations

from harness.cli.test import fault_kinds_help
from harness.controller import RunCounters
from harness.progress import ThrottledProgress, progress_line
from nemesis.kinds import RUNTIME_NEMESES


def test_faults_in_force_follow_starts_stops_and_nodes() -> None:
    counters = RunCounters()
    counters.fault_done("kill", {"nodes": ["b1"]})
    counters.fault_done("kill", {"nodes": ["b2"]})
    counters.fault_done("start-partition", {"grudge": "isolate", "nodes": ["b3"]})
    assert counters.in_force == {"kill": {"b1", "b2"}, "partition": {"b3"}}
    counters.fault_done("restart", {"nodes": ["b1"]})
    counters.fault_done("stop-partition", {"proof": {}})  # no nodes: the whole kind stops
    assert counters.in_force == {"kill": {"b2"}}
    counters.ok, counters.info = 7, 2
    assert progress_line(counters, 3.25).split() == [
        *("starting", "3.2s", "ops", "9", "ok", "7", "fail", "0", "info", "2"),
        *("faults", "in", "force:", "kill", "b2"),
    ]


def test_a_plain_line_at_most_every_few_seconds_and_on_each_new_phase() -> None:
    lines: list[str] = []
    progress = ThrottledProgress(lines.append, every_s=3600)
    counters = RunCounters(phase="running")
    for _ in range(100):
        progress(counters, 1.0)
    counters.phase = "healing"
    progress(counters, 2.0)
    assert [line.split()[0] for line in lines] == ["running", "healing"]


def test_the_help_names_every_fault_kind_of_every_runtime() -> None:
    text = fault_kinds_help()
    for kind in {k for kinds in RUNTIME_NEMESES.values() for k in kinds}:
        assert f"{kind}," in text or f"{kind} (" in text, kind
