"""`stuck-after-heal` (checkers/liveness.py): the progress check after the final heal."""

from __future__ import annotations

from typing import Any

import pytest

from tests.helpers.histories import H


def _healed(proof: bool = True) -> H:
    h = H()
    h.append(0, 7, "p0", 0)
    h.read(0, 7, [(0, "p0")])
    h.line("invoke", "nemesis", "heal", None)
    h.line("info", "nemesis", "heal", {"proof": []} if proof else None)
    return h


def _attempt(h: H, number: int, idle: bool, failing: str | None, error: str | None,
             kind: str = "fail") -> None:  # fmt: skip
    """One attempt as the controller records it; it stops at the `failing` op (None: the
    whole attempt succeeds)."""
    tag = {"attempt": number, "idle": idle}
    ledger = 100 + number
    steps: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
        ("create", {"mode": "bounded"}, {"ledger": ledger, "ensemble": 3, "wq": 2, "aq": 2}),
        ("append", {"ledger": ledger, "payload": f"a{number}"}, {"entry": 0}),
        ("close", {"ledger": ledger}, {"last_entry": 0}),
        ("read", {"ledger": ledger, "mode": "closed"},
         {"lac": 0, "entries": [[0, f"a{number}"]]}),
    ]  # fmt: skip
    for process, (f, value, result) in enumerate(steps, 1000 * number):
        value = {**value, "after_heal": tag}
        if f == failing:
            h.line("invoke", process, f, value)
            if kind != "never":
                h.ops.append({**h.ops[-1], "index": len(h.ops), "type": kind, "error": error})
            return
        h.call(process, f, value, {**value, **result})


def test_every_attempt_timing_out_in_an_idle_cluster_is_stuck() -> None:
    h = _healed()
    _attempt(h, 1, True, "append", "ETIMEOUT", kind="info")
    _attempt(h, 2, True, "create", "ENOTENOUGHBOOKIES")
    result = h.check()
    assert result["valid"] is False
    (case,) = result["anomalies"]["stuck-after-heal"]
    assert case["attempts"] == 2 and case["idle"] is True
    assert "after the final heal (op 5)" in case["explanation"]
    assert "attempt 1: append (op 8) info ETIMEOUT" in case["explanation"]
    assert "attempt 2: create (op 10) fail ENOTENOUGHBOOKIES" in case["explanation"]
    assert case["ops"] == [4, 5, 8, 9, 10, 11]


def test_an_attempt_never_completed_fails_it_when_idle() -> None:
    h = _healed()
    _attempt(h, 1, True, "read", None, kind="never")
    assert "stuck-after-heal" in h.check()["anomalies"]


@pytest.mark.parametrize(
    ("attempts", "why"),
    [
        ([(True, "append", "ETIMEOUT", "info"), (True, None, None, "fail")], "one passed"),
        ([(False, "append", "ETIMEOUT", "info")], "a timeout on a real runtime: maybe load"),
        ([(False, "create", "ENOTENOUGHBOOKIES", "fail")], "a real disk may be full"),
        ([(False, "close", "EFENCED", "fail"), (False, "read", "ERECOVERY", "fail")],
         "one attempt failed with an error that is not definite"),
    ],
)  # fmt: skip
def test_what_is_not_stuck(attempts, why) -> None:
    h = _healed()
    for number, (idle, failing, error, kind) in enumerate(attempts, 1):
        _attempt(h, number, idle, failing, error, kind)
    result = h.check()
    assert "stuck-after-heal" not in result["anomalies"], why


def test_definite_refusals_on_a_real_runtime_are_stuck() -> None:
    h = _healed()
    _attempt(h, 1, False, "close", "EFENCED")
    _attempt(h, 2, False, "read", "ENOENTRY")
    (case,) = h.check()["anomalies"]["stuck-after-heal"]
    assert case["idle"] is False and "refused with an error" in case["explanation"]


@pytest.mark.parametrize(
    ("proof", "why"),
    [(False, "no final heal completed with its proof"),
     (True, "no progress check after the final heal")],
)  # fmt: skip
def test_not_judged_says_why(proof, why) -> None:
    h = _healed(proof)
    if not proof:
        _attempt(h, 1, True, "create", "ETIMEOUT", kind="info")
    liveness = h.check()["checkers"]["liveness"]
    assert liveness["valid"] is True and liveness["not_judged"] == why


def test_progress_ops_before_the_heal_are_not_the_check() -> None:
    h = H()
    _attempt(h, 1, True, "create", "ETIMEOUT", kind="info")
    h.line("invoke", "nemesis", "heal", None)
    h.line("info", "nemesis", "heal", {"proof": []})
    assert h.check()["checkers"]["liveness"]["not_judged"] == (
        "no progress check after the final heal"
    )


def test_a_run_that_destroyed_data_is_not_judged() -> None:
    """A damaged disk may keep its bookie read-only, correctly: no cluster to judge."""
    h = H()
    h.line("invoke", "nemesis", "corrupt", {"nodes": ["b1"]})
    h.line("info", "nemesis", "corrupt", {"nodes": ["b1"], "proof": {}})
    h.line("invoke", "nemesis", "heal", None)
    h.line("info", "nemesis", "heal", {"proof": []})
    _attempt(h, 1, True, "create", "ENOTENOUGHBOOKIES")
    liveness = h.check()["checkers"]["liveness"]
    assert liveness == {
        "valid": True,
        "not_judged": "the run destroyed bookie data on purpose (corrupt)",
    }


def _held_close(h: H, ledger: int, idle: bool, kind: str, error: str | None = None) -> None:
    """The close of a write handle the run left open, as the controller records it after
    the heal (`after_heal.held`); `kind` "never": it never completed."""
    value = {"ledger": ledger, "after_heal": {"held": True, "idle": idle}}
    h.line("invoke", 3_000_000 + ledger, "close", value)
    if kind != "never":
        done = {**value, "last_entry": 0} if kind == "ok" else value
        h.ops.append({**h.ops[-1], "index": len(h.ops), "type": kind, "value": done,
                      "error": error})  # fmt: skip


@pytest.mark.parametrize(("kind", "error"), [("info", "ETIMEOUT"), ("never", None)])
def test_a_held_writer_that_cannot_close_when_idle_is_stuck(kind, error) -> None:
    h = _healed()
    _held_close(h, 7, True, kind, error)
    _attempt(h, 1, True, None, None)
    result = h.check()
    (case,) = result["anomalies"]["writer-stuck-after-heal"]
    assert case["ledger"] == 7 and case["ops"] == [4, 5, 6, *([7] if kind != "never" else [])]
    assert "the close of ledger 7" in case["explanation"]
    assert "stuck-after-heal" not in result["anomalies"]  # the attempt passed


@pytest.mark.parametrize(
    ("idle", "kind", "error", "why"),
    [
        (True, "ok", None, "closed"),
        (True, "fail", "EFENCED", "fenced by the final reads' recovery: an answer"),
        (True, "fail", "ENOHANDLE", "the agent restarted and holds nothing"),
        (False, "info", "ETIMEOUT", "a timeout on a real runtime may be load"),
    ],
)
def test_what_a_held_writers_close_may_do(idle, kind, error, why) -> None:
    h = _healed()
    _held_close(h, 7, idle, kind, error)
    _attempt(h, 1, True, None, None)
    result = h.check()
    assert result["valid"] is True, why
    assert result["checkers"]["liveness"]["attempts"] == 1  # not taken for an attempt


def test_a_held_writers_close_is_judged_without_attempts() -> None:
    h = _healed()
    _held_close(h, 7, True, "info", "ETIMEOUT")
    liveness = h.check()["checkers"]["liveness"]
    assert liveness["valid"] is False and "writer-stuck-after-heal" in liveness["anomalies"]
