"""BUGGIFY in the simulation: it perturbs, it replays from the seed, and a correct build
stays valid under it."""

from __future__ import annotations

from pathlib import Path

import pytest

from bookie_image import buggify
from harness.runtime.sim import SimSpec, run_sim
from harness.sim.buggify import FIRE_CHANCE, Perturbation
from harness.testspec import WORKLOADS

pytestmark = pytest.mark.sim

KILL_AND_RESTART = (
    {"at": 0.3, "f": "kill", "value": {"nodes": ["b1"]}},
    {"at": 0.9, "f": "restart", "value": {"nodes": ["b1"]}},
)


def _history(run_dir: Path) -> str:
    return (run_dir / "history.jsonl").read_text()


def test_every_point_has_a_fire_chance() -> None:
    assert set(FIRE_CHANCE) == set(buggify.POINTS)


def test_outside_a_simulation_nothing_fires() -> None:
    assert buggify.fires("client-drop-connection") is False
    assert buggify.delay("bookie-reply-delay") == 0.0


def test_a_misspelt_point_is_an_error() -> None:
    perturbation = Perturbation.for_seed(0)
    with buggify.installed(perturbation), pytest.raises(buggify.UnknownPointError):
        buggify.fires("client-drop-conection")


def test_buggify_perturbs_the_run_and_replays_from_its_seed(tmp_path: Path) -> None:
    """Same seed, same faults: with BUGGIFY the history differs from the unperturbed one,
    points fired, and a second perturbed run is byte-identical to the first."""
    spec = SimSpec(seed=3, time_limit=2.0, schedule=KILL_AND_RESTART)
    plain = run_sim(spec, tmp_path / "plain").results
    perturbed = run_sim(SimSpec(**{**spec.__dict__, "buggify": True}), tmp_path / "on").results
    again = run_sim(SimSpec(**{**spec.__dict__, "buggify": True}), tmp_path / "again").results
    assert "buggify" not in plain
    assert sum(perturbed["buggify"]["fired"].values()) > 0
    assert _history(tmp_path / "plain") != _history(tmp_path / "on")
    assert _history(tmp_path / "on") == _history(tmp_path / "again")
    assert perturbed["buggify"] == again["buggify"]


@pytest.mark.parametrize("workload", WORKLOADS)
def test_a_correct_build_stays_valid_under_buggify(workload: str, tmp_path: Path) -> None:
    """Several seeds per workload, with a bookie killed and restarted mid-run: perturbed
    timing, dropped connections, lost ZooKeeper replies and spurious timeouts give unknown
    outcomes at worst, never an anomaly."""
    fired = 0
    for seed in range(3):
        spec = SimSpec(
            seed=seed,
            time_limit=2.0,
            workload=workload,
            bookies=4,
            buggify=True,
            schedule=KILL_AND_RESTART,
        )
        results = run_sim(spec, tmp_path / str(seed)).results
        assert results["valid"] is not False, (seed, results["anomaly_types"])
        fired += sum(results["buggify"]["fired"].values())
    assert fired > 0
