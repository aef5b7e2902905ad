"""Workload op generation and learning, without a cluster.

Scenario tests drive one workload by hand; the model test runs every workload against an
in-memory, sequential ledger service and checks the history it would record: whatever
the workloads generate must be well-formed and valid on a correct service.
"""

from __future__ import annotations

import random
from dataclasses import replace
from typing import Any

import pytest

import checkers
from core.generator import PENDING, Context
from harness import testspec
from harness.testspec import TestSpec
from workloads import WORKLOADS
from workloads.common import Payloads
from workloads.ledger import LedgerWorkload
from workloads.log import LogWorkload
from workloads.recovery_race import RecoveryRaceWorkload
from workloads.tail import TailWorkload
from workloads.unbounded import CATCH_UP, UnboundedWorkload


def ctx(process: int, seed: int = 0) -> Context:
    return Context(0.0, process, random.Random(seed))


def complete(w: Any, process: int, op: dict, kind: str = "ok", **result: Any) -> None:
    value = {**op["value"], **result} if kind == "ok" else None
    w.observe(process, op, kind, value, None if kind == "ok" else "EFENCED")


def test_registry_and_spec_name_the_same_workloads_with_known_checkers() -> None:
    assert tuple(WORKLOADS) == testspec.WORKLOADS
    for name, make in WORKLOADS.items():
        workload = make(TestSpec(workload=name))
        assert set(workload.checkers) <= set(checkers.CHECKERS)
        assert workload.generator().op(ctx(0))["f"] == "create"


def test_options_reach_the_ops() -> None:
    spec = TestSpec(workload="log", ensemble=4, write_quorum=3, ack_quorum=2, bookies=4,
                    id_bits=128, entry_size=64, digest="crc32")  # fmt: skip
    w = WORKLOADS["log"](spec)
    create = w.next_op(ctx(0))
    stream = create["value"].pop("stream")
    assert stream in ("s0", "s1")
    assert create["value"] == {
        "ensemble": 4,
        "write_quorum": 3,
        "ack_quorum": 2,
        "digest": "crc32",
        "id_bits": 128,
        "seq": 0,
        "scope": 1,
    }  # 128-bit ledgers go round scopes 1..3
    complete(w, 0, create, ledger="00ab", ensemble=4, wq=3, aq=2)
    assert len(w.next_op(ctx(0))["value"]["payload"]) == 64


def test_padded_payloads_stay_unique() -> None:
    payloads = Payloads(size=8)
    made = [payloads.next(p) for p in (1, 11, 1, 11) for _ in range(30)]
    assert len(set(made)) == len(made) and all(len(p) >= 8 for p in made)


@pytest.mark.parametrize(
    "bad",
    [
        {"id_bits": 32},
        {"entry_size": -1},
        {"takeovers": -0.1},
        {"takeovers": 0.9},
        {"writer_crashes": 0.6},
        {"pipeline": 0},
        {"pipeline": 3, "concurrency": 4, "clients": 2},
        {"pipeline": 2, "workload": "tail"},
        {"pipeline": 2, "workload": "recovery-race"},
        {"takeovers": 0.1, "workload": "tail"},
        {"writer_crashes": 0.05, "workload": "unbounded"},
        {"corruption": "tail"},  # no corrupt nemesis to shape
        {"corruption": "shred", "nemesis": ("corrupt",)},
        {"corruption": "truncate", "nemesis": ("corrupt",), "runtime": "sim"},
        {
            "corruption": "tail",
            "schedule": ({"at": 0, "f": "corrupt", "value": {"nodes": ["b1"]}},),
        },
    ],
)
def test_bad_options_are_refused(bad: dict) -> None:
    with pytest.raises(testspec.UserError):
        TestSpec(**bad)


def test_shared_settings_unset_the_shares_of_ops_a_workload_has_none_of() -> None:
    """One set of settings serves every workload: shares it would refuse are unset (and
    `--takeovers 0` / `--writer-crashes 0`, which ask for none, are accepted anywhere)."""
    shared = {"takeovers": 0.02, "writer_crashes": 0.05, "bookies": 3}
    assert testspec.op_shares_for("ledger", shared) == shared
    assert testspec.op_shares_for("unbounded", shared) == {**shared, "writer_crashes": 0.0}
    assert testspec.op_shares_for("tail", shared) == {
        **shared,
        **{"takeovers": None, "writer_crashes": 0.0},
    }
    for workload in testspec.WORKLOADS:
        TestSpec(workload=workload, **testspec.op_shares_for(workload, shared))
        TestSpec(workload=workload, takeovers=0, writer_crashes=0)


def test_ledger_takeovers_follow_the_spec_share() -> None:
    """`--takeovers`: the share of a writer's ops that recover another process's ledger."""

    def recover_share(takeovers: float) -> float:
        w = WORKLOADS["ledger"](TestSpec(takeovers=takeovers))
        for process, ledger in ((0, 10), (1, 11)):
            complete(w, process, w.next_op(ctx(process)), ledger=ledger)
        rng = Context(0.0, 0, random.Random(1))
        ops = [w.next_op(rng)["f"] for _ in range(4000)]
        return ops.count("recover") / len(ops)

    assert recover_share(0.0) == 0
    assert 0.005 < recover_share(0.01) < 0.015
    assert 0.25 < recover_share(0.3) < 0.35


@pytest.mark.parametrize("name", ["log", "unbounded"])
def test_stream_takeovers_follow_the_spec_share(name: str) -> None:
    """`--takeovers` for the stream workloads: the share of a stream-less process's ops that
    take a stream over (it was once ignored there); without it, their own 2%."""

    spec = TestSpec(workload=name, concurrency=2)

    def takeover_share(takeovers: float | None) -> float:
        rng, taken = random.Random(1), 0
        for _ in range(4000):  # process 1's first op after process 0 began writing s0
            w = WORKLOADS[name](replace(spec, takeovers=takeovers))
            complete(w, 0, w.next_op(ctx(0)), ledger=10, term=1)
            taken += w.next_op(Context(0.0, 1, rng))["f"] != "read"
        return taken / 4000

    assert takeover_share(0.0) == 0
    assert 0.015 < takeover_share(None) < 0.025
    assert 0.25 < takeover_share(0.3) < 0.35


def test_a_crashed_writer_leaves_its_ledger_open_for_the_next_takeover() -> None:
    """`--writer-crashes`: the writer walks away between two appends, without closing, and
    starts a new ledger; the next takeover recovers the crashed ledger before any live one."""
    w = LedgerWorkload(concurrency=2, read_fraction=0.0, recover_fraction=0.0, crash_fraction=1)
    for process, ledger in ((0, 10), (1, 11)):
        complete(w, process, w.next_op(ctx(process)), ledger=ledger)
    assert w.next_op(ctx(0))["f"] == "create"  # process 0 crashed off ledger 10
    assert w.crashed == [10] and 0 not in w.writing
    w.crash_fraction, w.recover_fraction = 0.0, 1.0
    assert w.next_op(ctx(1)) == {"f": "recover", "value": {"ledger": 10}}
    assert w.crashed == []


def test_pipelined_workers_of_one_agent_append_to_their_leaders_ledger() -> None:
    """`--pipeline 2` with 8 workers on 2 agents: workers 0 and 1 lead (agent 0 runs 0, 2,
    4, 6; agent 1 runs 1, 3, 5, 7), 2 and 3 append to their ledgers, 4 and 5 lead again.
    A co-writer waits while its leader has no ledger and follows it to the next one."""
    w = WORKLOADS["ledger"](TestSpec(concurrency=8, clients=2, pipeline=2, takeovers=0))
    assert [w.leader(p) for p in range(8)] == [None, None, 0, 1, None, None, 4, 5]
    assert w.leader(8 + 2) == 0  # a retired process id keeps its worker's place
    assert w.next_op(ctx(2)) is PENDING
    complete(w, 0, w.next_op(ctx(0)), ledger=10)
    appends = [w.next_op(ctx(p, seed)) for p, seed in ((2, 0), (10, 1), (2, 2))]
    assert {op["f"] for op in appends} == {"append"}
    assert {op["value"]["ledger"] for op in appends} == {10}
    complete(w, 0, w.append(ctx(0), 10), kind="fail")  # fenced: the leader moves on
    assert w.next_op(ctx(2)) is PENDING
    complete(w, 4, w.next_op(ctx(4)), ledger=12)
    assert w.next_op(ctx(6))["value"]["ledger"] == 12


def test_a_co_writers_failed_add_ends_the_ledger_for_its_whole_group() -> None:
    """A broker moves a topic on at its first failed add: a co-writer's timeout orphans the
    group's ledger (recovered next), and its leader starts a new one."""
    w = WORKLOADS["ledger"](TestSpec(concurrency=8, clients=2, pipeline=2, takeovers=0))
    complete(w, 0, w.next_op(ctx(0)), ledger=10)
    w.observe(2, w.next_op(ctx(2)), "info", None, "ETIMEOUT")  # co-writer 2, on ledger 10
    assert w.orphans == [10] and 0 not in w.writing
    assert w.next_op(ctx(2)) is PENDING
    assert w.next_op(ctx(0)) == {"f": "recover", "value": {"ledger": 10}}


def test_pipelined_co_writers_append_to_their_leaders_stream_in_its_term() -> None:
    """`unbounded --pipeline 2`, 8 workers on 2 agents: four leaders, so two streams; a
    co-writer appends through its leader's handle (same ledger, stream and term), waits
    while the leader acquires, and stops when the leader is fenced."""
    w = WORKLOADS["unbounded"](TestSpec(workload="unbounded", concurrency=8, clients=2, pipeline=2))
    assert [s.name for s in w.streams] == ["s0", "s1"]
    assert w.next_op(ctx(2)) is PENDING  # its leader, worker 0, has no stream yet
    create = w.next_op(ctx(0))
    assert create["f"] == "create"
    assert w.next_op(ctx(2)) is PENDING  # still acquiring
    complete(w, 0, create, ledger=10, term=1)
    append = w.next_op(ctx(2))
    assert append["f"] == "append"
    assert {k: v for k, v in append["value"].items() if k != "payload"} == {
        "ledger": 10, "stream": create["value"]["stream"], "seq": 0, "term": 1,
    }  # fmt: skip
    complete(w, 0, w.next_op(ctx(0)), kind="fail")  # the leader is fenced
    assert w.next_op(ctx(2)) is PENDING


def test_log_takeover_fences_then_starts_the_next_ledger_and_the_old_writer_drops_out() -> None:
    w = LogWorkload(concurrency=2, takeover_fraction=1.0, rollover_fraction=0.0)
    assert [s.name for s in w.streams] == ["s0"]
    create = w.next_op(ctx(0))
    complete(w, 0, create, ledger=10)
    append = w.next_op(ctx(0))
    assert append["value"] == {"ledger": 10, "stream": "s0", "seq": 0, "payload": "0-0"}
    recover = w.next_op(ctx(1))  # process 1 takes the stream over: fence ledger 10 first
    assert recover == {"f": "recover", "value": {"ledger": 10, "stream": "s0"}}
    assert w.next_op(ctx(0))["f"] == "append"  # the deposed writer does not know yet
    complete(w, 1, recover, last_entry=0)
    create = w.next_op(ctx(1))
    assert create["value"]["seq"] == 1
    complete(w, 1, create, ledger=11)
    complete(w, 0, w.next_op(ctx(0)), kind="info")  # fenced
    assert 0 not in w.writing and w.streams[0].owner == 1
    assert w.next_op(ctx(1))["value"]["ledger"] == 11
    assert w.sealed == [10]


def test_log_rollover_closes_its_own_ledger_and_a_failed_seal_frees_the_stream() -> None:
    w = LogWorkload(concurrency=2, takeover_fraction=0.0, rollover_fraction=1.0)
    complete(w, 0, w.next_op(ctx(0)), ledger=10)
    close = w.next_op(ctx(0))
    assert close == {"f": "close", "value": {"ledger": 10, "stream": "s0"}}
    complete(w, 0, close, kind="info")
    assert w.streams[0].owner is None and not w.streams[0].sealed and 0 not in w.writing
    assert w.next_op(ctx(2))["f"] == "recover"  # the next taker must fence it


def test_unbounded_takeover_uses_terms() -> None:
    w = UnboundedWorkload(concurrency=2, takeover_fraction=1.0)
    create = w.next_op(ctx(0))
    assert create["value"]["mode"] == "unbounded"
    complete(w, 0, create, ledger=5, term=1)
    assert w.next_op(ctx(0))["value"]["term"] == 1
    take = w.next_op(ctx(1))
    assert take == {"f": "take-over", "value": {"ledger": 5, "stream": "s0"}}
    complete(w, 1, take, last_entry=3, term=2)
    assert w.next_op(ctx(1))["value"]["term"] == 2
    assert w.next_op(ctx(0))["value"]["term"] == 1  # still tries through its own handle


def test_unbounded_readers_read_on_from_where_they_stopped_unless_far_behind() -> None:
    """Every entry is read soon after it is acknowledged, a new term's first ones too; a
    reader more than CATCH_UP entries behind skips ahead."""
    w = UnboundedWorkload(concurrency=2, takeover_fraction=0.0)
    complete(w, 0, w.next_op(ctx(0)), ledger=5, term=1)
    complete(w, 0, w.next_op(ctx(0)), entry=40)
    read = w.next_op(ctx(1))
    assert read["value"] == {"ledger": 5, "mode": "tail", "from": 8}  # the usual tail
    complete(w, 1, read, lac=40, entries=[])
    complete(w, 0, w.next_op(ctx(0)), entry=90)
    assert w.next_op(ctx(1))["value"]["from"] == 41  # on from its last read
    assert w.next_op(ctx(3))["value"]["from"] == 58  # another reader: the tail
    complete(w, 0, w.next_op(ctx(0)), entry=41 + CATCH_UP + 10)
    assert w.next_op(ctx(1))["value"]["from"] == 51  # too far behind: skips ahead


def test_tail_readers_follow_from_their_position_and_move_on_at_the_end() -> None:
    w = TailWorkload(concurrency=2, rollover_fraction=0.0)
    assert w.next_op(ctx(1)) is PENDING  # nothing to follow yet
    complete(w, 0, w.next_op(ctx(0)), ledger=3)
    reads = [w.next_op(ctx(1, seed)) for seed in range(12)]
    assert {r["value"].get("mode", r["f"]) for r in reads} == {"read-lac", "tail", "follow"}
    read = next(r for r in reads if r["value"].get("mode") == "tail")
    assert read["value"] == {"ledger": 3, "wait_ms": 500, "mode": "tail", "from": 0}
    complete(w, 1, read, lac=4, entries=[])
    assert w.following[1].next == 5
    follow = next(r for r in reads if r["value"].get("mode") == "follow")
    complete(w, 1, follow, lac=9, entries=[[5, "p5"], [6, "p6"]], end=False)
    assert w.following[1].next == 7  # on from the last entry it got, not its handle's LAC
    complete(w, 0, {"f": "close", "value": {"ledger": 3}}, last_entry=6)
    complete(w, 1, read, lac=6, entries=[])
    assert 1 not in w.following


def test_a_follower_that_followed_its_ledger_to_the_end_moves_on() -> None:
    w = TailWorkload(concurrency=2, rollover_fraction=0.0)
    complete(w, 0, w.next_op(ctx(0)), ledger=3)
    follow = next(
        op for seed in range(12) if (op := w.next_op(ctx(1, seed)))["value"].get("mode") == "follow"
    )
    complete(w, 1, follow, lac=2, entries=[[0, "p0"], [1, "p1"], [2, "p2"]], end=True)
    assert 1 not in w.following  # the writer's close not seen yet: the read said it


def test_recovery_race_sends_every_other_worker_to_recover_the_same_ledger() -> None:
    w = RecoveryRaceWorkload(concurrency=4, race_fraction=1.0)
    complete(w, 0, w.next_op(ctx(0)), ledger=8)
    racing = [w.next_op(ctx(p)) for p in (1, 2, 3)]
    assert {op["value"]["ledger"] for op in racing} == {8}
    assert all(op["f"] == "recover" or op["value"]["mode"] == "closed" for op in racing)
    assert w.race is None and w.next_op(ctx(1))["value"]["mode"] == "tail"  # raced once


def test_recovery_race_races_the_ledger_a_writer_abandoned_on_its_own_error() -> None:
    w = RecoveryRaceWorkload(concurrency=4, race_fraction=0.0)  # no race drawn by chance
    complete(w, 0, w.next_op(ctx(0)), ledger=8)
    append = w.next_op(ctx(0))
    w.observe(0, append, "info", None, "ENOTENOUGHBOOKIES")
    assert [w.next_op(ctx(p))["value"]["ledger"] for p in (1, 2, 3)] == [8, 8, 8]
    complete(w, 0, w.next_op(ctx(0)), ledger=9)
    complete(w, 0, w.next_op(ctx(0)), "fail")  # fenced: someone took it over, no race
    assert w.abandoned is None and w.next_op(ctx(1)) is PENDING  # no race, nothing live


class Model:
    """A correct, sequential ledger service: every op takes effect at once."""

    def __init__(self) -> None:
        self.ledgers: dict[Any, dict[str, Any]] = {}

    def run(self, f: str, v: dict[str, Any]) -> tuple[str, dict[str, Any] | None]:
        led = self.ledgers.get(v.get("ledger"))
        if f == "create":
            lid = len(self.ledgers) if v.get("id_bits", 64) == 64 else f"{len(self.ledgers):032x}"
            self.ledgers[lid] = {"entries": [], "closed": False, "term": 1}
            unbounded = v.get("mode") == "unbounded"
            return "ok", {"ledger": lid, "ensemble": 3, "wq": 2, "aq": 2} | (
                {"term": 1} if unbounded else {}
            )
        if f == "append":
            if led["closed"] or v.get("term", led["term"]) != led["term"]:
                return "fail", None
            led["entries"].append(v["payload"])
            return "ok", {"entry": len(led["entries"]) - 1}
        last = len(led["entries"]) - 1
        if f in ("close", "recover") or v.get("mode") == "closed":
            led["closed"] = True
        if f == "audit":  # a correct service keeps every entry on all WQ copies
            return "ok", {"last_entry": last, "wq": 2, "aq": 2, "lacking": []}
        if f == "take-over":
            led["term"] += 1
            return "ok", {"last_entry": last, "term": led["term"]}
        if f == "read":
            first = v.get("from", 0)
            read = {"lac": last, "entries": [[e, led["entries"][e]] for e in
                                             range(first, last + 1)]}  # fmt: skip
            return "ok", read | ({"end": led["closed"]} if v["mode"] == "follow" else {})
        return "ok", {"lac": last} if f == "read-lac" else {"last_entry": last}


@pytest.mark.parametrize(
    ("name", "options"),
    [
        *((name, {}) for name in testspec.WORKLOADS),
        *((name, {"clients": 2, "pipeline": 2}) for name in testspec.PIPELINED_WORKLOADS),
    ],
)
def test_every_workload_on_a_correct_service_gives_a_valid_history(
    name: str, options: dict[str, int]
) -> None:
    shares = testspec.op_shares_for(name, {"takeovers": 0.05, "writer_crashes": 0.02})
    spec = TestSpec(workload=name, concurrency=4, **shares, **options)
    workload = WORKLOADS[name](spec)
    model, history, rng = Model(), [], random.Random(7)
    gen = workload.generator()

    def record(kind: str, process: int, f: str, value: Any) -> None:
        history.append({"index": len(history), "time": len(history), "type": kind,
                        "process": process, "f": f, "value": value})  # fmt: skip

    for step in range(3000):
        process = step % 4
        op = gen.op(Context(step / 100, process, rng))
        if op is PENDING:
            continue
        record("invoke", process, op["f"], op["value"])
        kind, result = model.run(op["f"], op["value"])
        value = {**op["value"], **result} if kind == "ok" else op["value"]
        record(kind, process, op["f"], value)
        workload.observe(process, op, kind, value if kind == "ok" else None, "EFENCED")
    for op in workload.final_ops():
        record("invoke", 99, op["f"], op["value"])
        record("ok", 99, op["f"], {**op["value"], **model.run(op["f"], op["value"])[1]})
    results = checkers.check(history)
    assert results["valid"] is True, results["anomalies"]
    assert results["stats"]["appends_ok"] > 500
    assert {op["f"] for op in history} >= {"create", "append", "read"}
