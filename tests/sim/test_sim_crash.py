"""`crash` (docs/anomalies.md): product code raising what no fault explains, in the
simulation, is recorded by the loop and turned into an anomaly of the run's result."""

from __future__ import annotations

import asyncio

from bookie_image.client.ledger import write_set_bookies
from harness.runtime.sim import with_crashes
from harness.sim.loop import SimLoop, crash_of


async def _product_bug() -> None:
    await asyncio.sleep(1)
    write_set_bookies(None, 0)  # type: ignore[arg-type]  # product code on a None: a bug


async def _dying_on_a_closed_file() -> None:
    await asyncio.sleep(1)
    raise OSError("I/O operation on a closed file")


def _run(*coros) -> SimLoop:
    loop = SimLoop()
    try:
        tasks = [loop.create_task(c) for c in coros]
        loop.run_until_complete(asyncio.wait(tasks))
    finally:
        loop.close()
    return loop


def test_a_task_ending_in_a_product_bug_is_a_crash_when_it_ends() -> None:
    loop = _run(_product_bug(), _dying_on_a_closed_file())
    (crash,) = [e for e in loop.errors if "crash" in e]
    assert crash["crash"].startswith("AttributeError at bookie_image/client/ledger.py:")
    assert crash["time"] == 1.0 and "_product_bug" in crash["message"]  # the OSError: none


def test_a_product_callback_raising_is_a_crash() -> None:
    loop = SimLoop()
    try:
        loop.call_soon(write_set_bookies, None, 0)
        loop.run_until_complete(asyncio.sleep(0.1))
    finally:
        loop.close()
    (error,) = loop.errors
    assert error["crash"].startswith("AttributeError at bookie_image/client/ledger.py:")


def test_what_is_not_a_crash() -> None:
    try:
        raise KeyError("not raised by the product")
    except KeyError as exc:
        assert crash_of(exc) is None
    try:
        write_set_bookies(None, 0)  # type: ignore[arg-type]
    except AttributeError as exc:
        assert crash_of(exc) is not None
        assert crash_of(OSError("closed")) is None


def test_crashes_make_the_result_invalid_once_per_distinct_crash() -> None:
    valid = {"valid": True, "anomaly_types": [], "anomalies": {}, "anomaly_counts": {},
             "checkers": {"ledger": {"valid": True}}}  # fmt: skip
    assert with_crashes(valid, [{"time": 1.0, "message": "x"}]) is valid
    errors = [
        {"time": t, "message": "m", "crash": c} for t, c in ((1.0, "A"), (2.0, "A"), (3.0, "B"))
    ]
    result = with_crashes(valid, errors)
    assert result["valid"] is False and result["anomaly_types"] == ["crash"]
    assert [(c["time_s"], c["times"]) for c in result["anomalies"]["crash"]] == [(1.0, 2), (3.0, 1)]
    assert result["checkers"]["crash"]["valid"] is False
    assert result["checkers"]["ledger"] == {"valid": True}
