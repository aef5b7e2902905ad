"""One SparkSession for the whole test session (start-up costs tens of seconds), and one
store holding the checker's test corpus, analysed once and shared by the tests."""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

import pytest

from tests.helpers.corpus import edge_cases, hypothesis_corpus, unpack_real_runs, write_run
from tests.helpers.histories import MUTATIONS, rich_history, soak_history

pyspark = pytest.importorskip("pyspark")


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


@pytest.fixture(scope="session")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A store of the corpus (every mutation applied to the property tests' rich sample,
    then Hypothesis draws), edge cases, real runs and one malformed run."""
    store = tmp_path_factory.mktemp("store")
    mutated: dict[str, str] = {}
    rich = [(name, mutate(rich_history(), random.Random(0))) for name, mutate in MUTATIONS.items()]
    for i, (name, ops) in enumerate(rich + hypothesis_corpus(24)):
        run = f"corpus/20261101T{i:06d}"
        write_run(store, run, ops, {"workload": "ledger", "bugs": [name] if name else []})
        if name is not None:
            mutated[run] = name
    for name, ops in edge_cases().items():
        write_run(store, f"edge-{name}/20261102T000000", ops)
    real = unpack_real_runs(store)
    soak = "soak/20261104T000000"  # checked streaming, in segments of 500 lines
    write_run(store, soak, soak_history(), {"workload": "log"}, segment_lines=500)
    broken = write_run(store, "broken/20261103T000000", edge_cases()["info-fail-pending"])
    with open(broken / "history.jsonl", "ab") as fh:
        fh.write(b"this line is not JSON\n")
    return {
        "store": store,
        "mutated": mutated,
        "real": real,
        "soak": soak,
        "broken": "broken/20261103T000000",
    }


@pytest.fixture(scope="session")
def analysed(spark: Any, corpus: dict[str, Any]) -> dict[str, Any]:
    """The report of one analysis of the corpus store (shared: Spark jobs are slow)."""
    from checkers.spark import analyze

    return analyze(spark, corpus["store"])
