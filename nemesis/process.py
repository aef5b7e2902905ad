"""Process faults: kill (SIGKILL) and restart, pause (SIGSTOP) and resume (SIGCONT).

They act through the runtime's node lifecycle (`kill`, `start`, `pause`, `resume`,
`process_state`), so they work on every runtime that implements it. Proofs: a kill
records the pid and that it is gone, a restart the new pid once the bookie is registered
again, a pause that the kernel reports the process stopped ("T"), a resume that it no
longer does.
"""

from __future__ import annotations

import asyncio
from typing import Any, Protocol

from nemesis.base import FaultNotProven

SETTLE_POLLS = 100
SETTLE_INTERVAL_S = 0.02


class ProcessRuntime(Protocol):
    def kill(self, name: str) -> int: ...
    def start(self, name: str, wait: bool = True) -> Any: ...
    def pause(self, name: str) -> None: ...
    def resume(self, name: str) -> None: ...
    def process_state(self, name: str) -> tuple[int | None, str | None]: ...


def _targets(op: dict[str, Any]) -> list[str]:
    nodes = (op.get("value") or {}).get("nodes")
    if not nodes:
        raise ValueError(f"{op['f']} needs value.nodes (a list of node names)")
    return list(nodes)


class KillNemesis:
    """SIGKILL nodes; `restart` brings them back (all killed ones if no nodes are named)."""

    fs = frozenset({"kill", "restart"})

    def __init__(self, runtime: ProcessRuntime) -> None:
        self.runtime = runtime
        self.down: set[str] = set()

    async def invoke(self, op: dict[str, Any]) -> dict[str, Any]:
        if op["f"] == "kill":
            proof = {}
            for node in _targets(op):
                pid = await asyncio.to_thread(self.runtime.kill, node)
                self.down.add(node)
                proof[node] = {"killed_pid": pid, "gone": True}
            return {**op.get("value", {}), "proof": proof}
        nodes = (op.get("value") or {}).get("nodes") or sorted(self.down)
        return {"nodes": nodes, "proof": await self._restart(nodes)}

    async def _restart(self, nodes: list[str]) -> dict[str, Any]:
        proof = {}
        for node in nodes:
            await asyncio.to_thread(self.runtime.start, node)
            pid, state = await asyncio.to_thread(self.runtime.process_state, node)
            if pid is None or state in (None, "Z"):
                raise FaultNotProven(f"{node} did not come back after restart")
            self.down.discard(node)
            proof[node] = {"new_pid": pid, "registered": True}
        return proof

    async def heal(self) -> list[dict[str, Any]]:
        if not self.down:
            return []
        return [{"f": "restart", "proof": await self._restart(sorted(self.down))}]


class PauseNemesis:
    """SIGSTOP nodes; `resume` continues them (all paused ones if no nodes are named)."""

    fs = frozenset({"pause", "resume"})

    def __init__(self, runtime: ProcessRuntime) -> None:
        self.runtime = runtime
        self.paused: set[str] = set()

    async def _signal(self, nodes: list[str], pausing: bool) -> dict[str, Any]:
        proof = {}
        for node in nodes:
            pid, state = await asyncio.to_thread(self.runtime.process_state, node)
            if pid is None and not pausing:  # killed meanwhile: nothing left to resume
                self.paused.discard(node)
                proof[node] = {"pid": None, "state": "not running"}
                continue
            action = self.runtime.pause if pausing else self.runtime.resume
            await asyncio.to_thread(action, node)
            pid, state = await self._settle(node, pausing)
            if (state == "T") != pausing:
                verb = "pause" if pausing else "resume"
                raise FaultNotProven(f"{node} (pid {pid}) is in state {state!r} after {verb}")
            (self.paused.add if pausing else self.paused.discard)(node)
            proof[node] = {"pid": pid, "state": state}
        return proof

    async def _settle(self, node: str, pausing: bool) -> tuple[int | None, str | None]:
        """Signals are delivered asynchronously: poll the state until it shows (bounded)."""
        for _ in range(SETTLE_POLLS):
            pid, state = await asyncio.to_thread(self.runtime.process_state, node)
            if (state == "T") == pausing:
                break
            await asyncio.sleep(SETTLE_INTERVAL_S)
        return pid, state

    async def invoke(self, op: dict[str, Any]) -> dict[str, Any]:
        if op["f"] == "pause":
            return {**op.get("value", {}), "proof": await self._signal(_targets(op), True)}
        nodes = (op.get("value") or {}).get("nodes") or sorted(self.paused)
        return {"nodes": nodes, "proof": await self._signal(nodes, False)}

    async def heal(self) -> list[dict[str, Any]]:
        if not self.paused:
            return []
        return [{"f": "resume", "proof": await self._signal(sorted(self.paused), False)}]
