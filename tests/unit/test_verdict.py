"""The reasons a run gives for its verdict: one list for `bkchaos test` and the pytest
plugin (core.verdict)."""

from __future__ import annotations

from core.verdict import reasons


def test_every_reason_a_run_can_have_is_given_in_one_line() -> None:
    results = {
        "anomalies": {"lost-append": [{"explanation": "p0 acknowledged at 0, not read"}] * 2},
        "checkers": {
            "nemesis": {"errors": ["wipe: FaultNotProven: b3 neither refused nor registered"]},
            "ledger": {"unchecked_why": [{"ledger": 10, "closed_read_error": "EIO"}]},
        },
        "interrupted": True,
    }
    assert [f"{head}{rest}" for _, head, rest in reasons(results)] == [
        "lost-append ×2: p0 acknowledged at 0, not read",
        "fault not proven: wipe: FaultNotProven: b3 neither refused nor registered",
        "unchecked ledger 10: no closed read succeeded (last error: EIO)",
        "interrupted: the final phase did not complete",
    ]
    assert [colour for colour, _, _ in reasons(results)] == ["red"] + ["yellow"] * 3


def test_a_valid_run_has_no_reasons() -> None:
    assert reasons({"anomalies": {}, "checkers": {"nemesis": {"errors": []}}}) == []


def test_a_checker_that_crashed_is_a_reason() -> None:
    """It makes the run unknown (Jepsen's rule); the reasons say which and why."""
    results = {"anomalies": {}, "checkers": {"graph": {"valid": "unknown", "error": "KeyError: 7"}}}
    assert [f"{head}{rest}" for _, head, rest in reasons(results)] == [
        "checker graph crashed: KeyError: 7"
    ]
