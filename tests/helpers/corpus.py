"""The checker's test corpus as run directories: hand-built edge cases, Hypothesis-drawn
histories with one mutation each, and three real runs (tests/spark/data), each with the
Python checker's result beside it, for the Spark analysis to agree with."""

from __future__ import annotations

import copy
import json
import random
import tarfile
from pathlib import Path
from typing import Any

import msgspec
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from checkers import check
from checkers.segments import SEGMENT_LINES
from tests.helpers.histories import MUTATIONS, H, Ops, histories

REAL_RUNS = Path(__file__).parents[1] / "spark" / "data" / "real-runs.tar.gz"


def write_run(
    store: Path,
    run: str,
    ops: Ops,
    spec: dict[str, Any] | None = None,
    segment_lines: int | None = SEGMENT_LINES,
) -> Path:
    """A run directory with the history and its reference result (checkers.check, in
    segments of `segment_lines`)."""
    run_dir = store / run
    run_dir.mkdir(parents=True)
    encode = msgspec.json.Encoder().encode
    (run_dir / "history.jsonl").write_bytes(b"".join(encode(op) + b"\n" for op in ops))
    (run_dir / "results.json").write_text(json.dumps(check(ops, segment_lines)))
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
    with tarfile.open(REAL_RUNS) as tar:
        tar.extractall(store / "real", filter="data")
    runs = sorted(p.name for p in (store / "real").iterdir())
    for name in runs:
        run_dir = store / "real" / name
        (run_dir / "results.json").write_text(json.dumps(check(run_dir / "history.jsonl")))
    return [f"real/{name}" for name in runs]
