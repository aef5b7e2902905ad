"""Histories for checker tests: a hand builder (`H`), synthetic histories of a correct
log (`histories`, `rich_history`), and `MUTATIONS` that each inject one named anomaly.
Shared by the unit tests of the checkers and the Spark analysis tests."""

from __future__ import annotations

import copy
import random
from collections.abc import Callable
from typing import Any

from hypothesis import strategies as st

from checkers import check, synthesize

APPEND_THEN_CLOSED_READ = [
    {"index": 0, "time": 1, "type": "invoke", "process": 0, "f": "append",
     "value": {"ledger": 7, "payload": "p0"}},
    {"index": 1, "time": 2, "type": "ok", "process": 0, "f": "append",
     "value": {"ledger": 7, "payload": "p0", "entry": 0}},
    {"index": 2, "time": 3, "type": "invoke", "process": 1, "f": "read",
     "value": {"ledger": 7, "mode": "closed"}},
    {"index": 3, "time": 4, "type": "ok", "process": 1, "f": "read",
     "value": {"ledger": 7, "mode": "closed", "lac": 0, "entries": [[0, "p0"]]}},
]  # fmt: skip
"""The smallest valid history: one acknowledged append, read back closed."""


class H:
    """A tiny history builder: each call returns the indices of the lines it wrote."""

    def __init__(self) -> None:
        self.ops: list[dict[str, Any]] = []

    def line(self, kind: str, process: Any, f: str, value: Any) -> int:
        i = len(self.ops)
        op = {"index": i, "time": 1000 * (i + 1), "type": kind, "process": process, "f": f}
        self.ops.append({**op, "value": value})
        return i

    def call(self, process: Any, f: str, value: Any, done: Any, kind: str = "ok") -> list[int]:
        return [self.line("invoke", process, f, value), self.line(kind, process, f, done)]

    def append(self, process: int, ledger: Any, payload: str, entry: int | None = None,
               kind: str = "ok", **stream: Any) -> list[int]:  # fmt: skip
        value = {"ledger": ledger, "payload": payload} if not stream else {
            "stream": stream["stream"], "payload": payload}  # fmt: skip
        done = {**value, "ledger": ledger, "entry": entry, **stream} if kind == "ok" else value
        return self.call(process, "append", value, done, kind)

    def read(self, process: int, ledger: Any, entries: list[tuple[int, str]],
             lac: int | None = None, mode: str = "closed", **extra: Any) -> list[int]:  # fmt: skip
        """A read call; `extra` adds `from` to the invoke (and the completion), `end` to
        the completion."""
        value = {
            "ledger": ledger,
            "mode": mode,
            **({"from": extra["from"]} if "from" in extra else {}),
        }
        lac = max((e for e, _ in entries), default=-1) if lac is None else lac
        done = {**value, **extra, "lac": lac, "entries": [list(x) for x in entries]}
        return self.call(process, "read", value, done)

    def read_lac(self, process: int, ledger: Any, lac: int) -> list[int]:
        return self.call(process, "read-lac", {"ledger": ledger}, {"ledger": ledger, "lac": lac})

    def check(self) -> dict[str, Any]:
        return check(self.ops)


Ops = list[dict[str, Any]]

SHAPE = {
    "ops": st.integers(60, 1500),
    "ledgers": st.integers(1, 4),
    "streams": st.integers(0, 3),
    "processes": st.integers(1, 6),
    "read_fraction": st.floats(0.0, 0.5),
    "rollover": st.floats(0.0, 0.05),
    "abandon": st.floats(0.0, 0.6),
    "nemesis": st.booleans(),
}
"""`synthesize`'s settings as strategies: the shape of a random history."""


def synthesized(**shape: st.SearchStrategy[Any]) -> st.SearchStrategy[Ops]:
    """Histories from `synthesize`, with SHAPE's settings overridden by `shape`."""
    return st.builds(
        lambda seed, kw: list(synthesize(seed, **kw)),
        st.integers(0, 2**32),
        st.fixed_dictionaries({**SHAPE, **shape}),
    )


histories = synthesized()


# -- mutations: each takes a valid history and injects one anomaly, or returns None


def renumber(ops: Ops) -> Ops:
    return [{**op, "index": i} for i, op in enumerate(ops)]


def _oks(ops: Ops, f: str, pred: Callable[[dict], bool] = lambda v: True) -> list[dict]:
    return [op for op in ops if op["type"] == "ok" and op["f"] == f and pred(op["value"])]


def _closed(ops: Ops, ledger: Any = None) -> list[dict]:
    return _oks(ops, "read", lambda v: v["mode"] == "closed" and ledger in (None, v["ledger"]))


def _tail_call(ops: Ops, process: int, f: str, value: dict, done: dict) -> Ops:
    """Append one call at the end of the history."""
    t = ops[-1]["time"]
    call = {"process": process, "f": f}
    invoke = {"index": 0, "time": t + 1, "type": "invoke", **call, "value": value}
    return renumber(
        [*ops, invoke, {"index": 0, "time": t + 2, "type": "ok", **call, "value": done}]
    )


def _fresh(ops: Ops) -> int:
    return 1 + max(op["process"] for op in ops if isinstance(op["process"], int))


def lost_append(ops: Ops, rng: random.Random) -> Ops | None:
    """Drop an acknowledged entry from every closed read of its ledger: one still there
    (applied twice, the mutation must not pick an entry it dropped already)."""
    acked = [
        v
        for v in (op["value"] for op in _oks(ops, "append"))
        if (reads := _closed(ops, v["ledger"]))
        and all([v["entry"], v["payload"]] in r["value"]["entries"] for r in reads)
    ]
    if not acked:
        return None
    v = rng.choice(acked)
    for read in _closed(ops, v["ledger"]):
        read["value"]["entries"].remove([v["entry"], v["payload"]])
    return ops


def truncated_ledger(ops: Ops, rng: random.Random) -> Ops | None:
    acked = [op["value"] for op in _oks(ops, "append") if _closed(ops, op["value"]["ledger"])]
    if not acked:
        return None
    ledger = rng.choice(acked)["ledger"]
    top = max(v["entry"] for v in acked if v["ledger"] == ledger)
    for read in _closed(ops, ledger):
        read["value"]["lac"] = top - 1
        del read["value"]["entries"][top:]
    return ops


def divergence(ops: Ops, rng: random.Random) -> Ops | None:
    reads = [op for op in _closed(ops) if op["value"]["lac"] >= 0]
    if not reads:
        return None
    v = copy.deepcopy(rng.choice(reads)["value"])
    v["lac"] -= 1
    v["entries"].pop()
    return _tail_call(ops, _fresh(ops), "read", {"ledger": v["ledger"], "mode": "closed"}, v)


def _absent_payload(ops: Ops) -> str:
    """A payload some append carried that no read returned (else: garbage)."""
    seen = {p for op in _oks(ops, "read") for _, p in op["value"]["entries"]}
    carried = [op["value"]["payload"] for op in ops if op["f"] == "append"]
    return next((p for p in carried if p not in seen), "never-appended")


def dirty_read(ops: Ops, rng: random.Random) -> Ops | None:
    reads = _closed(ops)
    if not reads:
        return None
    v = copy.deepcopy(rng.choice(reads)["value"])
    v["entries"].append([v["lac"] + 1, _absent_payload(ops)])
    return _tail_call(ops, _fresh(ops), "read", {"ledger": v["ledger"], "mode": "closed"}, v)


def garbage_read(ops: Ops, rng: random.Random) -> Ops | None:
    reads = [op for op in _oks(ops, "read") if op["value"]["entries"]]
    if not reads:
        return None
    rng.choice(rng.choice(reads)["value"]["entries"])[1] = "garbage!"
    return ops


def duplicate(ops: Ops, rng: random.Random) -> Ops | None:
    reads = [op for op in _closed(ops) if len(op["value"]["entries"]) >= 2]
    if not reads:
        return None
    entries = rng.choice(reads)["value"]["entries"]
    entries[-1][1] = entries[0][1]
    return ops


def failed_append_visible(ops: Ops, rng: random.Random) -> Ops | None:
    failed = [op["value"]["payload"] for op in ops if op["f"] == "append" and op["type"] == "fail"]
    reads = [op for op in _oks(ops, "read") if op["value"]["entries"]]
    if not failed or not reads:
        return None
    rng.choice(rng.choice(reads)["value"]["entries"])[1] = rng.choice(failed)
    return ops


def read_beyond_lac(ops: Ops, rng: random.Random) -> Ops | None:
    reads = _oks(ops, "read", lambda v: v["mode"] == "tail" and v["entries"])
    if not reads:
        return None
    v = rng.choice(reads)["value"]
    v["lac"] = max(e for e, _ in v["entries"]) - 1
    return ops


def incomplete_read(ops: Ops, rng: random.Random) -> Ops | None:
    """A later closed read of a ledger that skips one of its entries (keeping its lac)."""
    reads = [op for op in _closed(ops) if op["value"]["entries"]]
    if not reads:
        return None
    v = copy.deepcopy(rng.choice(reads)["value"])
    del v["entries"][rng.randrange(len(v["entries"]))]
    return _tail_call(ops, _fresh(ops), "read", {"ledger": v["ledger"], "mode": "closed"}, v)


def nonmonotonic_lac(ops: Ops, rng: random.Random) -> Ops | None:
    seen = [op for op in _oks(ops, "read") + _oks(ops, "read-lac") if op["value"]["lac"] >= 0]
    if not seen:
        return None
    op = rng.choice(seen)
    v = {"ledger": op["value"]["ledger"]}
    lower = {**v, "lac": op["value"]["lac"] - 1}
    pending = sum(1 if o["type"] == "invoke" else -1 for o in ops if o["process"] == op["process"])
    return None if pending else _tail_call(ops, op["process"], "read-lac", v, lower)


def lac_beyond_end(ops: Ops, rng: random.Random) -> Ops | None:
    reads = _closed(ops)
    if not reads:
        return None
    v = rng.choice(reads)["value"]
    done = {"ledger": v["ledger"], "lac": v["lac"] + 1}
    return _tail_call(ops, _fresh(ops), "read-lac", {"ledger": v["ledger"]}, done)


def realtime_order(ops: Ops, rng: random.Random) -> Ops | None:
    """Swap where two ok stream appends landed, the first acked before the second began."""
    invoked = {}
    acked = []
    for op in ops:
        if op["f"] == "append" and op["type"] == "invoke":
            invoked[op["process"]] = op["index"]
        elif op["f"] == "append" and op["type"] == "ok" and "seq" in op["value"]:
            acked.append((invoked[op["process"]], op["index"], op["value"]))
    checked = {op["value"]["ledger"] for op in _closed(ops)}
    acked = [x for x in acked if x[2]["ledger"] in checked]
    if not acked:
        return None
    first = rng.choice(acked)
    later = [x for x in acked if x[2]["stream"] == first[2]["stream"] and first[1] < x[0]]
    if not later:
        return None
    a, b = first[2], rng.choice(later)[2]
    swap = {a["payload"]: b["payload"], b["payload"]: a["payload"]}
    for read in _oks(ops, "read"):
        read["value"]["entries"] = [[e, swap.get(p, p)] for e, p in read["value"]["entries"]]
    for key in ("ledger", "entry", "seq"):
        a[key], b[key] = b[key], a[key]
    return ops


MUTATIONS = {
    "lost-append": lost_append,
    "truncated-ledger": truncated_ledger,
    "divergence": divergence,
    "dirty-read": dirty_read,
    "garbage-read": garbage_read,
    "duplicate": duplicate,
    "failed-append-visible": failed_append_visible,
    "read-beyond-lac": read_beyond_lac,
    "incomplete-read": incomplete_read,
    "nonmonotonic-lac": nonmonotonic_lac,
    "lac-beyond-end": lac_beyond_end,
    "realtime-order": realtime_order,
}


def rich_history(seed: int = 3) -> Ops:
    """A long synthetic history with every ambiguity the checkers must tolerate."""
    return list(synthesize(seed, ops=3000, ledgers=4, streams=2, read_fraction=0.3,
                           rollover=0.01, abandon=0.5))  # fmt: skip


def soak_history(seed: int = 4) -> Ops:
    """A soak-shaped history (8 epochs of fresh ledgers and streams) with one anomaly of
    each kind below injected in turn, each within one ledger, so that the streaming
    checker still cuts it between epochs."""
    ops = list(synthesize(seed, ops=1500, epochs=8, ledgers=3, streams=1, read_fraction=0.2,
                          rollover=0.01, abandon=0.3))  # fmt: skip
    rng = random.Random(seed)
    for name in ("lost-append", "truncated-ledger", "garbage-read", "read-beyond-lac"):
        ops = MUTATIONS[name](ops, rng) or ops
    return ops
