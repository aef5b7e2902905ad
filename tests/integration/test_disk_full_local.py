"""The `disk-full` fault on real processes: each local bookie gets a tmpfs of its own as its
ledger disk, `fill-disk` fills it past the read-only threshold and the bookie must log that
it turned read-only (and refuse adds), `free-disk` empties it and the bookie must turn
writable again. A clean build stays valid, and the progress check after the heal passes."""

from __future__ import annotations

import json

from harness.pytest_plugin import Chaos


def test_a_filled_disk_turns_a_real_bookie_read_only_and_a_freed_one_writable(
    chaos: Chaos,
) -> None:
    run = chaos(runtime="local", nemesis=["disk-full"], bookies=4, nemesis_interval=2,
                time_limit=8)  # fmt: skip
    assert run.results["valid"] is True, run.summary()
    lines = (run.run_dir / "history.jsonl").read_text().splitlines()
    proofs = [
        (op["f"], proof)
        for op in map(json.loads, lines)
        if op["f"] in ("fill-disk", "free-disk") and op["type"] == "info"
        for proof in ((op.get("value") or {}).get("proof") or {}).values()
    ]
    fills = [p for f, p in proofs if f == "fill-disk"]
    frees = [p for f, p in proofs if f == "free-disk"]
    assert fills and all(p["event"]["event"] == "readonly" for p in fills if "event" in p)
    assert any(p.get("event", {}).get("reason") == "disk-usage" for p in fills)
    assert all(p["usage"] >= 0.95 for p in fills)
    assert frees and all(p["event"]["event"] == "writable" for p in frees if "event" in p)
    assert run.results["coverage"]["bookie-readonly"] >= 1
    assert run.results["checkers"]["liveness"]["passed_at"] is not None
