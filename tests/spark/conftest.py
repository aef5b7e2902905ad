"""One SparkSession for the whole test session (start-up costs tens of seconds), and one
store holding the checker's test corpus, analysed once and shared by the tests."""

from __future__ import annotations

import copy
import json
import random
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from checkers import check
from tests.unit.test_check_anomalies import H
from tests.unit.test_check_properties import MUTATIONS, _sample, histories

pyspark = pytest.importorskip("pyspark")

DATA = Path(__file__).parent / "data"
Ops = list[dict[str, Any]]


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """local[2] with few shuffle partitions, no UI and a small driver: a shared machine."""
    from checkers.spark import session

    s = session(
        "local[2]",
        {
            "spark.sql.shuffle.partitions": "4",
            "spark.ui.enabled": "false",
            "spark.driver.memory": "768m",
        },
    )
    yield s
    s.stop()


def write_run(store: Path, run: str, ops: Ops, spec: dict[str, Any] | None = None) -> Path:
    """A run directory with the history and its reference result (checkers.check)."""
    run_dir = store / run
    run_dir.mkdir(parents=True)
    encode = msgspec.json.Encoder().encode
    (run_dir / "history.jsonl").write_bytes(b"".join(encode(op) + b"\n" for op in ops))
    (run_dir / "results.json").write_text(json.dumps(check(ops)))
    (run_dir / "test.json").write_text(json.dumps(spec or {"workload": "ledger"}))
    return run_dir


def hypothesis_corpus(n: int) -> list[tuple[str | None, Ops]]:
    """Histories drawn by the property tests' strategy, each valid or with one of their
    mutations applied: the same corpus the Python checker is tested on."""
    drawn: list[tuple[str | None, Ops]] = []

    @settings(
        max_examples=n,
        database=None,
        derandomize=True,
        deadline=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(histories, st.sampled_from([None, *sorted(MUTATIONS)]), st.randoms())
    def draw(ops: Ops, name: str | None, rng: random.Random) -> None:
        if name is not None:
            ops = MUTATIONS[name](copy.deepcopy(ops), rng)
        if ops is not None:
            drawn.append((name, ops))

    draw()
    return drawn


def edge_cases() -> dict[str, Ops]:
    """Hand-built histories for what must not be reported: ledger 7 vs "7", info and
    fail appends, unchecked ledgers, invokes never completed."""
    same_text = H()  # p0 at entry 0 of ledger 7 and of ledger "7": a duplicate
    same_text.append(0, 7, "p0", 0)
    same_text.read(1, 7, [(0, "p0")])
    same_text.read(1, "7", [(0, "p0")])
    apart = H()  # the int and the string ledger each hold their own entry 0: valid
    apart.append(0, 7, "a", 0)
    apart.append(0, "7", "b", 0)
    apart.read(1, 7, [(0, "a")])
    apart.read(1, "7", [(0, "b")])
    ambiguous = H()  # an info append that landed, a failed one that did not, one pending
    ambiguous.append(0, 7, "p0", 0)
    ambiguous.append(1, 7, "p1", kind="info")
    ambiguous.append(2, 7, "p2", kind="fail")
    ambiguous.line("invoke", 3, "append", {"ledger": 7, "payload": "p3"})
    ambiguous.read(4, 7, [(0, "p0"), (1, "p1"), (2, "p3")])
    unchecked = H()  # acked appends, no closed read: unknown, not lost
    unchecked.append(0, 9, "p0", 0)
    unchecked.read(1, 9, [(0, "p0")], mode="tail")
    return {
        "same-text-ledgers": same_text.ops,
        "int-and-string-ledgers": apart.ops,
        "info-fail-pending": ambiguous.ops,
        "unchecked-ledger": unchecked.ops,
    }


def unpack_real_runs(store: Path) -> list[str]:
    """Three `bkchaos test` runs (local runtime, kill+pause, 20 s; one with the seeded
    bug lac-before-ack-quorum), their results recomputed by today's checker."""
    with tarfile.open(DATA / "real-runs.tar.gz") as tar:
        tar.extractall(store / "real", filter="data")
    runs = sorted(p.name for p in (store / "real").iterdir())
    for name in runs:
        run_dir = store / "real" / name
        (run_dir / "results.json").write_text(json.dumps(check(run_dir / "history.jsonl")))
    return [f"real/{name}" for name in runs]


@pytest.fixture(scope="session")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A store of the corpus (every mutation applied to the property tests' rich sample,
    then Hypothesis draws), edge cases, real runs and one malformed run."""
    store = tmp_path_factory.mktemp("store")
    mutated: dict[str, str] = {}
    rich = [(name, mutate(_sample(), random.Random(0))) for name, mutate in MUTATIONS.items()]
    for i, (name, ops) in enumerate(rich + hypothesis_corpus(24)):
        run = f"corpus/20261101T{i:06d}"
        write_run(store, run, ops, {"workload": "ledger", "bugs": [name] if name else []})
        if name is not None:
            mutated[run] = name
    for name, ops in edge_cases().items():
        write_run(store, f"edge-{name}/20261102T000000", ops)
    real = unpack_real_runs(store)
    broken = write_run(store, "broken/20261103T000000", edge_cases()["info-fail-pending"])
    with open(broken / "history.jsonl", "ab") as fh:
        fh.write(b"this line is not JSON\n")
    return {"store": store, "mutated": mutated, "real": real, "broken": "broken/20261103T000000"}


@pytest.fixture(scope="session")
def analysed(spark: Any, corpus: dict[str, Any]) -> dict[str, Any]:
    """The report of one analysis of the corpus store (shared: Spark jobs are slow)."""
    from checkers.spark import analyze

    return analyze(spark, corpus["store"])
