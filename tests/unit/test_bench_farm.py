"""`bkchaos bench farm`'s measures that need no Spark: the draw every master runs, and the
CPU of the process tree (the JVMs and Python workers Spark starts are descendants)."""

from __future__ import annotations

import subprocess
import sys

from harness.bench.farm import draw, tree_cpu_s
from harness.cli.search import no_hint_space
from harness.farm import spec_from_json
from nemesis.kinds import SIM_NEMESES


def test_every_master_gets_the_same_draw_of_the_farm_s_space() -> None:
    space = no_hint_space(None, ",".join(SIM_NEMESES), ())
    tests = draw(space, 8, seed=4)
    assert tests == draw(space, 8, seed=4)
    assert [t["test"] for t in tests] == list(range(8))
    specs = [spec_from_json(t["spec"]) for t in tests]
    assert len({s.workload for s in specs}) > 1  # the no-hint space: every workload
    assert all(s.schedule for s in specs)


def test_the_process_tree_s_cpu_counts_a_child_s() -> None:
    before = tree_cpu_s()
    subprocess.run(
        [
            sys.executable,
            "-c",
            "import time\nt=time.process_time()\nwhile time.process_time()-t<0.5: pass",
        ],
        check=True,
    )
    assert tree_cpu_s() - before >= 0.45
