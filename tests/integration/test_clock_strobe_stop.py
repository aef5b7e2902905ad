"""Stopping a clock strobe while it is rewriting a node's offset file.

The strobe's write runs in a thread that cancelling the strobe does not stop; a reset
written beside it shared its temporary file (`mv: cannot stat ….tmp`, seen in CI) or could
be undone by it. The offset file here is a real file and the probe a real libfaketime
`date`; only the node's shell is slowed, so the strobe is caught mid-write every time.
"""

from __future__ import annotations

import asyncio
import subprocess
import threading
import time
from pathlib import Path

import pytest

from bookie_image.image.faketime import LIBFAKETIME
from nemesis.clock import ClockNemesis

pytestmark = pytest.mark.skipif(
    not Path(LIBFAKETIME).exists(), reason="libfaketime is installed by make setup"
)

WRITE_DELAY_S = 0.2


class SlowShellHost:
    """One node (`b1`) on this host whose offset-file writes take WRITE_DELAY_S, each
    recorded as a (start, end) interval."""

    def __init__(self, root: Path) -> None:
        self.offset_file = root / "faketime"
        self.writes: list[tuple[float, float]] = []
        self.writing = threading.Event()

    def clock_file(self, name: str) -> str:
        return str(self.offset_file)

    def process_state(self, name: str) -> tuple[int | None, str | None]:
        return None, None

    def exec(self, name: str, argv: list[str], timeout: float = 60.0) -> tuple[int, str]:
        is_write = "mv" in argv[-1]
        start = time.monotonic()
        if is_write:
            self.writing.set()
            time.sleep(WRITE_DELAY_S)
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
        if is_write:
            self.writes.append((start, time.monotonic()))
        return done.returncode, done.stdout + done.stderr


async def test_stopping_a_strobe_lets_its_write_land_before_the_reset(tmp_path: Path) -> None:
    host = SlowShellHost(tmp_path)
    nemesis = ClockNemesis(host, seed=1)
    strobe = {"f": "clock-strobe", "value": {"nodes": ["b1"], "delta_s": 20, "period_s": 0.01}}
    await nemesis.invoke(strobe)
    host.writing.clear()
    assert await asyncio.to_thread(host.writing.wait, 5), "the strobe never wrote again"

    done = await nemesis.invoke({"f": "clock-strobe-stop"})

    assert abs(done["proof"]["b1"]["observed_offset_s"]) < 1.0
    assert host.offset_file.read_text() == "+0.000\n"
    overlapping = [
        (earlier, later)
        for earlier, later in zip(sorted(host.writes), sorted(host.writes)[1:], strict=False)
        if later[0] < earlier[1]
    ]
    assert not overlapping, f"offset writes ran side by side: {overlapping}"
    assert not nemesis.strobes and not nemesis.skewed
