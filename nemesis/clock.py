"""Clock faults through libfaketime: bump (± seconds), strobe (flip between offsets), reset.

The runtime starts each process with Debian's libfaketime preloaded and its own offset
file (`clock_file(node)`; see bookie_image.image.faketime), re-read on every clock
call, so rewriting the file moves a running process's wall clock at once — no restart.
The monotonic clock is not faked (real skew never moves it).

Proof, and what it shows: a probe (`date`) run on the node under the same preload and the
same offset file reads the clock every preloaded process there now reads, compared with
the real clock around the probe (`observed_offset_s`); and the target process is shown to
have libfaketime mapped and that file in its environment. Together they show the
process's wall clock is off by that much; reading the process's own clock needs its
cooperation (its log timestamps do show it; the integration test checks those).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import shlex
import time
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from bookie_image.image.faketime import faketime_env
from nemesis.base import FaultNotProven, stream
from nemesis.process import ProcessRuntime

MAX_SKEW_S = 60.0
STROBE_PERIOD_S = 0.5
PROBE_SLACK_S = 0.5


async def strobe(
    set_offset: Callable[[float], Awaitable[None]], delta: float, period: float
) -> None:
    """Flip a clock that is `delta` off now between no offset and `delta` every `period`,
    until cancelled (the real nemesis and the simulation's alike)."""
    skewed = True
    while True:
        await asyncio.sleep(period)
        skewed = not skewed
        await set_offset(delta if skewed else 0.0)


class ClockRuntime(ProcessRuntime, Protocol):
    def clock_file(self, name: str) -> str | None: ...
    def exec(self, name: str, argv: list[str], timeout: float = 60.0) -> tuple[int, str]: ...


class ClockNemesis:
    """`clock-bump` / `clock-reset`, `clock-strobe` / `clock-strobe-stop` on any node whose
    runtime gives it an offset file (`clock_file`).

    Op value parameters (optional): `delta_s` (default: drawn from the seeded rng within
    ±MAX_SKEW_S), `period_s` for a strobe (how long each offset holds).
    """

    fs = frozenset({"clock-bump", "clock-reset", "clock-strobe", "clock-strobe-stop"})

    def __init__(self, runtime: ClockRuntime, seed: int = 0) -> None:
        self.runtime = runtime
        self.rng = stream(seed, "clock")
        self.skewed: set[str] = set()
        self.strobes: dict[str, asyncio.Task[None]] = {}
        self.writes: dict[str, asyncio.Future[None]] = {}

    async def invoke(self, op: dict[str, Any]) -> dict[str, Any]:
        f, value = op["f"], dict(op.get("value") or {})
        if f in ("clock-reset", "clock-strobe-stop"):
            nodes = value.get("nodes") or sorted(self.skewed)
            return {"nodes": nodes, "proof": await self._reset(nodes)}
        nodes = value.get("nodes")
        if not nodes:
            raise ValueError(f"{f} needs value.nodes (a list of node names)")
        value.setdefault("delta_s", round(self.rng.uniform(-MAX_SKEW_S, MAX_SKEW_S), 3))
        delta = float(value["delta_s"])
        proof = {}
        for node in nodes:
            await self._stop_strobe(node)
            self.skewed.add(node)
            await self._set(node, delta)
            proof[node] = await self._prove(node, delta)
            if f == "clock-strobe":
                period = float(value.setdefault("period_s", STROBE_PERIOD_S))
                set_offset = functools.partial(self._set, node)
                self.strobes[node] = asyncio.create_task(strobe(set_offset, delta, period))
        return {**value, "proof": proof}

    def _file(self, node: str) -> str:
        path = self.runtime.clock_file(node)
        if path is None:
            raise FaultNotProven(
                f"{node}'s processes were not started with libfaketime: the runtime must be "
                "created with clock faults enabled"
            )
        return path

    async def _set(self, node: str, delta: float) -> None:
        """Replace the offset file atomically: a reader never sees it half written.

        The write runs in a thread, which cancelling its awaiter does not stop; it is
        kept (`writes`) so a stopped strobe's last write can be waited for."""
        write = asyncio.ensure_future(asyncio.to_thread(self._write, node, delta))
        self.writes[node] = write
        await asyncio.shield(write)

    def _write(self, node: str, delta: float) -> None:
        path = shlex.quote(self._file(node))
        script = f"printf '%+.3f\\n' {delta} > {path}.tmp && mv {path}.tmp {path}"
        code, out = self.runtime.exec(node, ["sh", "-c", script])
        if code != 0:
            raise FaultNotProven(f"cannot write {path} on {node}: {out.strip()}")

    async def _stop_strobe(self, node: str) -> None:
        """Stop a node's strobe and let the write it has in flight land first: a late
        strobe write racing ours would share the temporary file or undo our offset."""
        task = self.strobes.pop(node, None)
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, FaultNotProven):
                await task
        in_flight = self.writes.pop(node, None)
        if in_flight is not None:
            with contextlib.suppress(FaultNotProven):
                await in_flight

    async def _prove(self, node: str, want: float) -> dict[str, Any]:
        path = self._file(node)
        env = [f"{k}={v}" for k, v in faketime_env(path).items()]
        before = time.time()
        code, out = await asyncio.to_thread(
            self.runtime.exec, node, ["env", *env, "date", "+%s.%N"]
        )
        after = time.time()
        try:
            observed = float(out.split()[-1]) - (before + after) / 2
        except (ValueError, IndexError):
            raise FaultNotProven(f"clock probe on {node} answered {out!r} (exit {code})") from None
        if abs(observed - want) > (after - before) / 2 + PROBE_SLACK_S:
            raise FaultNotProven(
                f"{node}'s faked clock is off by {observed:+.3f}s, not {want:+.3f}s"
            )
        return {
            "offset_s": want,
            "observed_offset_s": round(observed, 3),
            **await self._process(node, path),
        }

    async def _process(self, node: str, path: str) -> dict[str, Any]:
        """Whether the node's process has libfaketime mapped and reads `path`."""
        pid, _ = await asyncio.to_thread(self.runtime.process_state, node)
        if pid is None:
            return {"pid": None, "note": "not running: the offset applies when it starts"}
        script = (
            f"grep -c libfaketime /proc/{pid}/maps; "
            f"tr '\\0' '\\n' < /proc/{pid}/environ | grep -c '^FAKETIME_TIMESTAMP_FILE={path}$'"
        )
        _, out = await asyncio.to_thread(self.runtime.exec, node, ["sh", "-c", script])
        counts = [int(x) for x in out.split() if x.isdigit()]
        preloaded = len(counts) == 2 and counts[0] > 0 and counts[1] > 0
        if not preloaded:
            raise FaultNotProven(f"{node}'s process {pid} does not read its clock from {path}")
        return {"pid": pid, "libfaketime_mapped": True, "offset_file": path}

    async def _reset(self, nodes: list[str]) -> dict[str, Any]:
        proof = {}
        for node in nodes:
            await self._stop_strobe(node)
            await self._set(node, 0.0)
            self.skewed.discard(node)
            proof[node] = await self._prove(node, 0.0)
        return proof

    async def heal(self) -> list[dict[str, Any]]:
        if not self.skewed:
            return []
        return [{"f": "clock-reset", "proof": await self._reset(sorted(self.skewed))}]
