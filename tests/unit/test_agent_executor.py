"""The agent's ok / fail / info classification (docs/history.md §1).

The ledger client is replaced by a minimal double here: what is under test is only the
mapping from an operation's outcome to the history's completion type.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from types import SimpleNamespace

import pytest

from bookie_image.agent.executor import Executor
from bookie_image.client.errors import BKTimeoutError, LedgerFencedError


class _Handle:
    def __init__(self, ledger: int, outcome: object) -> None:
        self.id = ledger
        self.outcome = outcome
        self.metadata = SimpleNamespace(ensembles=((0, ("10.0.0.1:3181", "10.0.0.2:3181")),))

    async def append(self, payload: bytes) -> int:
        if isinstance(self.outcome, BaseException):
            raise self.outcome
        if self.outcome == "hang":
            await asyncio.sleep(10)
        return 0


class _Client:
    def __init__(self, outcome: object) -> None:
        self.outcome = outcome

    async def create_ledger(self, **_: object) -> _Handle:
        return _Handle(7, self.outcome)

    async def open_ledger(self, ledger: int, **_: object) -> _Handle:
        raise BKTimeoutError("no answer", may_have_happened=True)


async def _append_with(outcome: object) -> tuple:
    executor = Executor(_Client(outcome))  # type: ignore[arg-type]
    assert (await executor.run("create", {}, timeout=1))[0] == "ok"
    return await executor.run("append", {"ledger": 7, "payload": "p0"}, timeout=0.05)


async def test_create_names_the_ensembles_of_the_new_ledger() -> None:
    kind, created, _ = await Executor(_Client(None)).run("create", {}, timeout=1)  # type: ignore[arg-type]
    assert kind == "ok"
    assert created["ensembles"] == [[0, ["10.0.0.1:3181", "10.0.0.2:3181"]]]


async def test_acknowledged_append_is_ok_with_entry() -> None:
    assert await _append_with(None) == ("ok", {"ledger": 7, "payload": "p0", "entry": 0}, None)


async def test_fenced_append_definitely_did_not_happen() -> None:
    error = LedgerFencedError("fenced", may_have_happened=False)
    assert await _append_with(error) == ("fail", None, "EFENCED")


@pytest.mark.parametrize(
    "outcome",
    ["hang", BKTimeoutError("lost", may_have_happened=True), ConnectionResetError("mid-flight")],
)
async def test_unknown_append_outcome_is_info(outcome: object) -> None:
    kind, value, error = await _append_with(outcome)
    assert (kind, value) == ("info", None)
    assert error


async def test_a_timed_out_call_is_cancelled_unless_it_may_run_on() -> None:
    """Answered ETIMEOUT at its timeout either way; a real agent cancels the call, the
    simulation's (`run_on`) lets it run on and gets its task."""

    class Slow(_Handle):
        appended = 0

        async def append(self, payload: bytes) -> int:
            await asyncio.sleep(0.2)
            Slow.appended += 1
            return 0

    class Client(_Client):
        async def create_ledger(self, **_: object) -> _Handle:
            return Slow(7, None)

    for run_on in (None, []):
        executor = Executor(Client(None))  # type: ignore[arg-type]
        await executor.run("create", {}, timeout=1)
        keep = None if run_on is None else run_on.append
        outcome = await executor.run("append", {"ledger": 7, "payload": "p"}, 0.05, keep)
        assert outcome == ("info", None, "ETIMEOUT")
        await asyncio.sleep(0.3)
        if run_on is None:
            assert Slow.appended == 0  # cancelled: it never got to the end
        else:
            (call,) = run_on
            assert call.result() == {"entry": 0} and Slow.appended == 1  # ran on to the end


async def test_append_to_a_ledger_without_handle_fails_before_sending() -> None:
    executor = Executor(_Client(None))  # type: ignore[arg-type]
    kind, _, error = await executor.run("append", {"ledger": 9, "payload": "p"}, timeout=1)
    assert (kind, error) == ("fail", "ENOHANDLE")


async def test_reads_change_nothing_so_their_timeouts_fail() -> None:
    executor = Executor(_Client(None))  # type: ignore[arg-type]
    kind, _, error = await executor.run("read", {"ledger": 7, "mode": "tail"}, timeout=1)
    assert (kind, error) == ("fail", "ETIMEOUT")


async def test_unknown_op_and_bad_value_fail() -> None:
    executor = Executor(_Client(None))  # type: ignore[arg-type]
    assert (await executor.run("frobnicate", {}, timeout=1))[0] == "fail"
    assert await executor.run("append", {}, timeout=1) == ("fail", None, "EBADVALUE")


async def test_tail_reads_reuse_one_handle_so_the_lac_never_goes_down() -> None:
    class Reader:
        lacs = iter([148, 147])  # a fresh handle could learn 147 after another saw 148

        def __init__(self) -> None:
            self.lac = -1

        async def read_lac(self, wait_ms: int | None = None) -> int:
            self.lac = max(self.lac, next(self.lacs))
            return self.lac

    class Client(_Client):
        opened = 0

        async def open_ledger(self, ledger: int, **_: object) -> Reader:
            Client.opened += 1
            return Reader()

    executor = Executor(Client(None))  # type: ignore[arg-type]
    first = await executor.run("read-lac", {"ledger": 7}, timeout=1)
    second = await executor.run("read-lac", {"ledger": 7}, timeout=1)
    assert [first[1]["lac"], second[1]["lac"]] == [148, 148]
    assert Client.opened == 1


class _TailReader:
    """A read handle that behaves like the client's: each read_lac starts from the handle's
    LAC, learns `lacs` in turn (after `delays`), and sets the handle's LAC to what it
    learned — so overlapping calls could leave the lower value behind."""

    def __init__(self, lacs: list[int], delays: list[float]) -> None:
        self.lacs, self.delays = iter(lacs), iter(delays)
        self.last_add_confirmed = -1
        self.waits: list[int | None] = []

    async def read_lac(self, wait_ms: int | None = None) -> int:
        self.waits.append(wait_ms)
        lac = max(self.last_add_confirmed, next(self.lacs))
        await asyncio.sleep(next(self.delays))
        self.last_add_confirmed = lac
        return lac

    async def read(self, first: int, last: int) -> AsyncIterator[tuple[int, bytes]]:
        for e in range(first, last + 1):
            yield e, f"p{e}".encode()


def _tailing(reader: _TailReader) -> Executor:
    class Client(_Client):
        async def open_ledger(self, ledger: int, **_: object) -> _TailReader:
            return reader

    return Executor(Client(None))  # type: ignore[arg-type]


async def test_overlapping_read_lacs_on_the_kept_handle_never_lower_it() -> None:
    reader = _TailReader(lacs=[5, 9, 0], delays=[0.05, 0.0, 0.0])
    executor = _tailing(reader)
    slow, fast = await asyncio.gather(
        executor.run("read-lac", {"ledger": 7}, timeout=1),
        executor.run("read-lac", {"ledger": 7}, timeout=1),
    )
    later = await executor.run("read-lac", {"ledger": 7}, timeout=1)
    assert later[1]["lac"] >= max(slow[1]["lac"], fast[1]["lac"]) == 9


async def test_tail_read_from_a_position_long_polls_and_returns_only_new_entries() -> None:
    reader = _TailReader(lacs=[4], delays=[0.0])
    executor = _tailing(reader)
    value = {"ledger": 7, "mode": "tail", "from": 3, "wait_ms": 200}
    kind, result, _ = await executor.run("read", value, timeout=1)
    assert (kind, result["lac"], result["entries"]) == ("ok", 4, [[3, "p3"], [4, "p4"]])
    assert reader.waits == [200]


class _Follower(_TailReader):
    """A read handle whose `follow` yields `entries` one by one, then (`closes`) ends as
    the client's does once the ledger is closed and read to its end, or waits."""

    def __init__(self, entries: list[int], closes: bool) -> None:
        super().__init__([], [])
        self.entries, self.closes = entries, closes
        self.asked: list[tuple[int, int]] = []

    async def follow(self, first: int = 0, wait_ms: int = 1000) -> AsyncIterator[tuple[int, bytes]]:
        self.asked.append((first, wait_ms))
        for e in self.entries:
            await asyncio.sleep(0.01)
            self.last_add_confirmed = max(self.last_add_confirmed, e)
            yield e, f"p{e}".encode()
        if not self.closes:
            await asyncio.sleep(3600)


@pytest.mark.parametrize("closes", [True, False])
async def test_a_follow_read_returns_what_the_follower_yields_and_whether_it_ended(
    closes: bool,
) -> None:
    reader = _Follower([3, 4, 5], closes)
    value = {"ledger": 7, "mode": "follow", "from": 3, "wait_ms": 200, "window_ms": 100}
    kind, result, _ = await _tailing(reader).run("read", value, timeout=1)
    assert kind == "ok" and reader.asked == [(3, 200)]
    assert result["entries"] == [[3, "p3"], [4, "p4"], [5, "p5"]]
    assert (result["lac"], result["end"]) == (5, closes)


@pytest.mark.parametrize("bad", [{"from": -1}, {"from": "3"}, {"wait_ms": 1.5}])
async def test_bad_read_position_or_wait_fails_before_sending(bad: dict) -> None:
    executor = _tailing(_TailReader([], []))
    value = {"ledger": 7, "mode": "tail", **bad}
    assert await executor.run("read", value, timeout=1) == ("fail", None, "EBADVALUE")


class _TermHandle(_Handle):
    """An unbounded ledger's write handle in one term; fenced once a later term starts."""

    def __init__(self, term: int, terms: list[int]) -> None:
        super().__init__(7, None)
        self.term, self.terms = term, terms
        self.metadata = SimpleNamespace(term=term, ensembles=self.metadata.ensembles)
        self.last_add_confirmed = 3

    async def append(self, payload: bytes) -> int:
        if self.terms[-1] != self.term:
            raise LedgerFencedError("newer term", may_have_happened=True, code="EINVALIDTERM")
        return 4


async def test_a_takeover_on_the_same_agent_does_not_hand_its_handle_to_the_old_writer() -> None:
    terms = [1]

    class Client(_Client):
        async def create_ledger(self, **options: object) -> _TermHandle:
            assert options["mode"] == "unbounded" and options["id_bits"] == 128
            return _TermHandle(1, terms)

        async def take_over_ledger(self, ledger: int, **_: object) -> _TermHandle:
            terms.append(terms[-1] + 1)
            return _TermHandle(terms[-1], terms)

    executor = Executor(Client(None))  # type: ignore[arg-type]
    kind, created, _ = await executor.run(
        "create", {"mode": "unbounded", "id_bits": 128}, timeout=1
    )
    assert (kind, created["term"]) == ("ok", 1)
    kind, taken, _ = await executor.run("take-over", {"ledger": 7}, timeout=1)
    assert (kind, taken) == ("ok", {"ledger": 7, "last_entry": 3, "term": 2})
    old = await executor.run("append", {"ledger": 7, "term": 1, "payload": "a"}, timeout=1)
    new = await executor.run("append", {"ledger": 7, "term": 2, "payload": "b"}, timeout=1)
    assert old == ("info", None, "EINVALIDTERM")
    assert new[0] == "ok"
