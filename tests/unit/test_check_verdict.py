"""One verdict from every entry point (docs/history.md §7): the nemesis verdict comes
from the history, a history with nothing recognised is unknown, and `bkchaos check
RUN_DIR` writes nothing unless asked (`--write` keeps what it cannot recompute)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from checkers import check
from harness.cli import main

APPEND_AND_READ = [
    {"index": 0, "time": 1, "type": "invoke", "process": 0, "f": "append",
     "value": {"ledger": 7, "payload": "p0"}},
    {"index": 1, "time": 2, "type": "ok", "process": 0, "f": "append",
     "value": {"ledger": 7, "payload": "p0", "entry": 0}},
    {"index": 4, "time": 9, "type": "invoke", "process": 1, "f": "read",
     "value": {"ledger": 7, "mode": "closed"}},
    {"index": 5, "time": 10, "type": "ok", "process": 1, "f": "read",
     "value": {"ledger": 7, "mode": "closed", "lac": 0, "entries": [[0, "p0"]]}},
]  # fmt: skip


def with_fault(completion: dict[str, Any] | None, f: str = "kill") -> list[dict[str, Any]]:
    """The valid history above with one nemesis op (index 2, completed at 3 if given)."""
    ops = [{"index": 2, "time": 3, "type": "invoke", "process": "nemesis", "f": f,
            "value": {"nodes": ["b1"]}}]  # fmt: skip
    if completion is not None:
        ops.append({"index": 3, "time": 4, "type": "info", "process": "nemesis", "f": f,
                    **completion})  # fmt: skip
    return sorted(copy.deepcopy(APPEND_AND_READ) + ops, key=lambda op: op["index"])


def write(path: Path, ops: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(op) + "\n" for op in ops))
    return path


def exit_code(argv: list[str]) -> int:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    return exc.value.code


def test_a_proven_fault_leaves_the_verdict_valid() -> None:
    result = check(with_fault({"value": {"nodes": ["b1"], "proof": {"b1": "killed"}}}))
    assert result["valid"] is True
    assert result["checkers"]["nemesis"] == {"valid": True, "faults": 1, "errors": []}
    assert result["format"] == 1


@pytest.mark.parametrize(
    ("completion", "why"),
    [
        ({"value": {"nodes": ["b1"]}, "error": "FaultNotProven: b1 still up"},
         "kill: FaultNotProven: b1 still up"),
        ({"value": {"nodes": ["b1"]}}, "kill: op 3 completed without a proof"),
        ({"value": None}, "kill: op 3 completed without a proof"),
        (None, "kill: never completed (op 2), so never proven"),
    ],
)  # fmt: skip
def test_an_unproven_fault_makes_the_run_unknown_naming_it(completion, why) -> None:
    result = check(with_fault(completion))
    assert result["valid"] == "unknown"
    assert result["checkers"]["nemesis"]["errors"] == [why]


def test_a_heal_needs_no_proof_but_must_not_fail() -> None:
    assert check(with_fault({"value": None}, f="heal"))["valid"] is True
    failed = check(with_fault({"value": None, "error": "FaultNotProven: b2 down"}, f="heal"))
    assert failed["valid"] == "unknown"
    assert failed["checkers"]["nemesis"]["errors"] == ["heal: FaultNotProven: b2 down"]


def test_an_anomaly_still_makes_an_unproven_run_invalid() -> None:
    ops = with_fault({"value": {"nodes": ["b1"]}, "error": "EIO"})
    ops[-1]["value"]["entries"] = []
    assert check(ops)["valid"] is False


@pytest.mark.parametrize(
    ("ops", "message"),
    [
        ([], "the history has no ops; expected client ops with f in: append, audit"),
        ([{"index": 0, "time": 1, "type": "invoke", "process": 0, "f": "send", "value": None},
          {"index": 1, "time": 2, "type": "ok", "process": 0, "f": "send", "value": None}],
         "no client op has a known f (expected one of: append, audit, close, create, read, "
         "read-lac, recover; found: send)"),
        (with_fault({"value": {"proof": {}}})[2:4],
         "found: none (nemesis ops only)"),
    ],
)  # fmt: skip
def test_nothing_recognised_is_unknown_saying_what_was_expected(
    tmp_path, capsys, ops, message
) -> None:
    assert message in check(ops)["checkers"]["stats"]["unknown_why"]
    assert exit_code(["check", str(write(tmp_path / "h.jsonl", ops))]) == 2
    assert message in capsys.readouterr().out


def test_check_of_a_run_dir_writes_nothing_and_says_when_its_results_differ(
    tmp_path, capsys
) -> None:
    write(tmp_path / "history.jsonl", with_fault({"value": {"nodes": ["b1"]}, "error": "E"}))
    stored = {"valid": True, "anomaly_types": [], "anomalies": {}, "stats": {},
              "checkers": {"nemesis": {"valid": True}}, "sim": {"simulated_s": 3.0}}  # fmt: skip
    (tmp_path / "results.json").write_text(json.dumps(stored))
    assert exit_code(["check", str(tmp_path)]) == 2
    assert json.loads((tmp_path / "results.json").read_text()) == stored
    captured = capsys.readouterr()
    assert "fault not proven: kill: E" in captured.out
    assert "says valid; this check says unknown (--write updates it)" in captured.err


def test_write_keeps_what_the_history_cannot_recompute(tmp_path) -> None:
    write(tmp_path / "history.jsonl", APPEND_AND_READ)
    stored = {"valid": True, "anomaly_types": [], "anomalies": {}, "stats": {},
              "checkers": {"nemesis": {"valid": True}, "probe": {"valid": "unknown"}},
              "sim": {"simulated_s": 3.0}, "interrupted": True}  # fmt: skip
    (tmp_path / "results.json").write_text(json.dumps(stored))
    assert exit_code(["check", str(tmp_path), "--write"]) == 2
    written = json.loads((tmp_path / "results.json").read_text())
    assert written["sim"] == {"simulated_s": 3.0} and written["interrupted"] is True
    assert written["checkers"]["probe"] == {"valid": "unknown"}
    assert written["checkers"]["nemesis"] == {"valid": True, "faults": 0, "errors": []}
    assert written["valid"] == "unknown"  # the kept sub-result's verdict counts
    assert written["stats"]["ops"] == 4


def test_write_needs_a_run_dir(tmp_path, capsys) -> None:
    assert exit_code(["check", str(write(tmp_path / "h.jsonl", APPEND_AND_READ)), "--write"]) == 254
    assert "--write needs a run directory" in capsys.readouterr().err
