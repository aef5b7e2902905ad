"""The fault-kind registry and the nemeses that implement it agree."""

from __future__ import annotations

import pytest

from harness import runner, testspec
from harness.errors import UserError
from harness.sim.nemesis import SimNemesis
from nemesis.kinds import KINDS, RUNTIME_NEMESES, SIM_NEMESES, START_STOP


def test_every_kind_has_its_own_start_and_stop_ops() -> None:
    ops = [op for pair in START_STOP.values() for op in pair]
    assert len(ops) == len(set(ops)) == 2 * len(KINDS)


def test_the_real_runtimes_nemeses_handle_every_op_of_every_kind_they_accept() -> None:
    handled = runner._nemesis(cluster=None, seed=0).fs
    for runtime in ("local", "docker", "ssh"):
        for kind in RUNTIME_NEMESES[runtime]:
            assert set(START_STOP[kind]) <= handled, (runtime, kind)


def test_the_simulation_handles_every_op_of_every_kind_it_declares() -> None:
    for kind in SIM_NEMESES:
        assert set(START_STOP[kind]) <= SimNemesis.fs, kind
    ranks = [KINDS[k].search_rank for k in SIM_NEMESES]
    assert ranks == sorted(ranks) and SIM_NEMESES[0] == "power-loss"  # rank 0 comes first


def test_the_spec_accepts_exactly_the_declared_kinds() -> None:
    for kind in KINDS:
        runtime = next(r for r, kinds in RUNTIME_NEMESES.items() if kind in kinds)
        testspec.TestSpec(runtime=runtime, nemesis=(kind,), inventory="h.toml" * (runtime == "ssh"))
    with pytest.raises(UserError, match="unknown nemesis"):
        testspec.TestSpec(nemesis=("meteor",))
