"""The anomalies of docs/history.md §7: `bad-ensemble` from the ensembles create, close
and recover report, and `unreadable-after-heal` from the final phase, with the
exclusions that keep them from reporting what is not there."""

from __future__ import annotations

from typing import Any

import pytest

from checkers import check


class History:
    """Ops with increasing indices, each call an invoke and its completion."""

    def __init__(self) -> None:
        self.ops: list[dict[str, Any]] = []

    def call(self, process: Any, f: str, value: Any, kind: str = "ok", done: Any = None,
             error: str | None = None) -> History:  # fmt: skip
        n = len(self.ops)
        self.ops.append({"index": n, "time": n, "type": "invoke", "process": process, "f": f,
                         "value": value})  # fmt: skip
        completion = {"index": n + 1, "time": n + 1, "type": kind, "process": process, "f": f,
                      "value": value if done is None else {**(value or {}), **done}}  # fmt: skip
        if error is not None:
            completion["error"] = error
        self.ops.append(completion)
        return self

    def created(self, fragments: list[list[Any]], size: int = 3) -> History:
        return self.call(0, "create", {}, done={"ledger": 7, "ensemble": size, "wq": 2,
                                                "aq": 2, "ensembles": fragments})  # fmt: skip

    def appended(self) -> History:
        return self.call(0, "append", {"ledger": 7, "payload": "p0"}, done={"entry": 0})

    def fault(self, f: str, error: str | None = None) -> History:
        proof = None if error else {"b1": "done"}
        return self.call("nemesis", f, {"nodes": ["b1"]}, "info", {"proof": proof}, error)

    def read(self, kind: str = "ok", error: str | None = None) -> History:
        done = {"lac": 0, "entries": [[0, "p0"]]} if kind == "ok" else None
        return self.call(1, "read", {"ledger": 7, "mode": "closed"}, kind, done, error)


GOOD = [[0, ["b1", "b2", "b3"]], [5, ["b1", "b4", "b3"]]]


def test_distinct_bookies_as_many_as_the_ensemble_are_fine() -> None:
    result = check(History().created(GOOD).appended().read().ops)
    assert result["valid"] is True
    assert result["checkers"]["ensemble"]["ledgers_with_ensembles"] == 1


@pytest.mark.parametrize(
    ("fragments", "why"),
    [
        ([[0, ["b1", "b2", "b1"]]], "names b1 twice"),
        ([[0, ["b1", "b2", "b3"]], [4, ["b2", "b3"]]],
         "has 2 distinct bookies for an ensemble of 3"),
    ],
)  # fmt: skip
def test_a_fragment_naming_a_bookie_twice_or_too_few_is_bad_ensemble(fragments, why) -> None:
    h = History().created(fragments).appended()
    h.call(0, "close", {"ledger": 7}, done={"last_entry": 0, "ensembles": fragments})
    result = check(h.read().ops)
    assert result["valid"] is False
    (bad,) = result["anomalies"]["bad-ensemble"]  # reported once, not at create and close
    assert why in bad["explanation"] and bad["ledger"] == 7 and bad["ops"] == [0, 1]


def test_histories_without_ensembles_have_nothing_to_judge() -> None:
    h = History().call(0, "create", {}, done={"ledger": 7, "ensemble": 3, "wq": 2, "aq": 2})
    assert check(h.appended().read().ops)["checkers"]["ensemble"]["valid"] is True


def test_a_ledger_unreadable_after_the_heal_is_an_anomaly() -> None:
    h = History().created(GOOD).appended().fault("kill").fault("heal")
    result = check(h.read("fail", "EIO").read("fail", "ENOLEDGER").ops)
    assert result["valid"] is False
    (case,) = result["anomalies"]["unreadable-after-heal"]
    assert case["ledger"] == 7 and case["error"] == "ENOLEDGER"
    assert "after the final heal (op 7)" in case["explanation"]


@pytest.mark.parametrize(
    ("history", "why"),
    [
        (History().created(GOOD).appended().fault("heal").read("fail", "ERECOVERY"), None),
        (History().created(GOOD).appended().fault("heal").read("fail", "EMETADATA"), None),
        (History().created(GOOD).appended().fault("heal").read("fail", "KeyError"), None),
        (History().created(GOOD).appended().fault("heal").read("fail", "ETIMEOUT"), None),
        (History().created(GOOD).appended().fault("heal").read("info"), None),
        (History().created(GOOD).appended().fault("heal").read("fail", "EIO").read(), None),
        (History().created(GOOD).appended().read("fail", "EIO").fault("heal"), None),
        (History().created(GOOD).appended().fault("heal", "FaultNotProven: b2 down")
         .read("fail", "EIO"), "no final heal completed with its proof"),
        (History().created(GOOD).appended().fault("corrupt").fault("heal").read("fail", "EIO"),
         "the run destroyed bookie data on purpose (corrupt)"),
        (History().created(GOOD).appended().fault("wipe-reset").fault("heal")
         .read("fail", "EIO"), "the run destroyed bookie data on purpose (wipe-reset)"),
    ],
)  # fmt: skip
def test_what_is_not_unreadable_after_heal(history, why) -> None:
    result = check(history.ops)
    assert "unreadable-after-heal" not in result["anomalies"]
    assert result["checkers"]["availability"].get("not_judged") == why
