"""Run directories as `bkchaos test` leaves them, built from synthetic histories: for
the report tests without a browser (tests/unit) and with one (tests/browser)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import checkers
from harness.testspec import TestSpec

SEED = 3


def drop_acked_entry(history: list[dict[str, Any]]) -> None:
    """Remove the last entry of the last closed read that returned an acked append."""
    acked = {op["value"]["payload"] for op in history if op["type"] == "ok" and op["f"] == "append"}
    for op in reversed(history):
        v = op["value"] or {}
        closed = op["type"] == "ok" and v.get("mode") == "closed" and v["entries"]
        if closed and v["entries"][-1][1] in acked:
            v["entries"].pop()
            return
    raise AssertionError("no closed read of an acked entry to mutate")


def make_run(run_dir: Path, *, invalid: bool, ops: int = 600) -> Path:
    """A run directory as `bkchaos test` leaves it (history, test, results, logs)."""
    history = list(checkers.synthesize(SEED, ops=ops, ledgers=3, streams=1, processes=4))
    if invalid:
        drop_acked_entry(history)
    run_dir.mkdir(parents=True)
    with (run_dir / "history.jsonl").open("w") as fh:
        fh.writelines(json.dumps(op) + "\n" for op in history)
    argv = ("test", "--nemesis", "kill,pause", "--time-limit", "20")
    bugs = ("lac-before-ack-quorum",) if invalid else ()
    spec = TestSpec(
        name=run_dir.parent.name, nemesis=("kill", "pause"), seed=SEED, argv=argv, bugs=bugs
    )
    (run_dir / "test.json").write_text(spec.to_json())
    (run_dir / "results.json").write_text(json.dumps(checkers.check(run_dir / "history.jsonl")))
    (run_dir / "logs" / "b1").mkdir(parents=True)
    (run_dir / "logs" / "b1" / "bookie.log").write_text("bookie b1 started\n")
    return run_dir
