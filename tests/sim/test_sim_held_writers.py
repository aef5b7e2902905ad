"""The held writers' closes (docs/history.md §2): after the heal, in the simulation, every
write handle the run left open is closed by the agent holding it, and each close answers."""

from __future__ import annotations

import json
from pathlib import Path

from harness.runtime.sim import SimSpec, run_sim


def test_every_handle_left_open_is_closed_after_the_heal_and_answers(tmp_path: Path) -> None:
    run = run_sim(SimSpec(seed=1, time_limit=4.0), tmp_path)
    ops = [json.loads(line) for line in (tmp_path / "history.jsonl").read_text().splitlines()]
    held = [o for o in ops if (o.get("value") or {}).get("after_heal", {}).get("held")]
    invoked = [o for o in held if o["type"] == "invoke"]
    done = [o for o in held if o["type"] != "invoke"]
    assert invoked and all(o["f"] == "close" for o in invoked)
    assert len(done) == len(invoked) and all(o.get("error") != "ETIMEOUT" for o in done)
    heal = max(o["index"] for o in ops if o["f"] == "heal")
    assert min(o["index"] for o in invoked) > heal
    created = {
        (o["node"], o["value"]["ledger"]) for o in ops if o["f"] == "create" and o["type"] == "ok"
    }
    assert {(o["node"], o["value"]["ledger"]) for o in invoked} <= created
    assert run.results["valid"] is True, run.results["anomaly_types"]
