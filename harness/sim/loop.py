"""A deterministic asyncio event loop on virtual time.

Why a loop of our own: the bookie and the client take every timeout, sleep and batching
delay through the running loop, so a loop whose `time()` is a simulated clock runs them
unchanged. When nothing is ready the loop does not wait: it jumps to the next timer. It
owns no file descriptors and starts no threads (`run_in_executor` refuses), so the order
of callbacks is a function of the code and the seed alone.

Every piece of work belongs to a simulated node, carried in the context variable
`CURRENT_NODE`: tasks inherit it, so the loop can list (and a kill can cancel) every task
of one node, and the simulated network knows who is connecting to whom.
"""

from __future__ import annotations

import asyncio
import collections
import contextvars
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

PROGRAMMING_ERRORS = (
    TypeError,
    AttributeError,
    NameError,
    IndexError,
    KeyError,
    AssertionError,
    ZeroDivisionError,
    RecursionError,
)
"""Exceptions no fault explains: a killed node's dying code fails on its closed files and
sockets (OSError, ValueError) or is cancelled, never with one of these."""
PRODUCT = "bookie_image"
"""The package of the product under test (bookie, client, agent)."""

CURRENT_NODE: contextvars.ContextVar[str] = contextvars.ContextVar(
    "bkchaos_sim_node", default="controller"
)


class SimulationError(RuntimeError):
    """The simulation cannot go on (a deadlock, or product code asking for a thread)."""


class _VirtualSelector:
    """Stands where the loop polls for I/O: instead of blocking, time moves forward."""

    def __init__(self, loop: SimLoop) -> None:
        self._loop = loop

    def select(self, timeout: float | None) -> list[Any]:
        if timeout is None:
            raise SimulationError(
                "deadlock: no callback is ready and no timer is scheduled, yet the "
                "simulation has not finished"
            )
        self._loop.advance(timeout)
        return []

    def close(self) -> None:
        pass


class _ReadyQueue(collections.deque):  # type: ignore[type-arg]
    """The loop's queue of callbacks ready to run, which holds back a paused node's: they
    wait, in order, until the node resumes (its timers that fall due meanwhile too)."""

    def __init__(self, loop: SimLoop) -> None:
        super().__init__()
        self._loop = loop

    def append(self, handle: asyncio.Handle) -> None:
        paused = self._loop.paused
        node = handle._context.get(CURRENT_NODE) if paused else None  # type: ignore[attr-defined]
        if node in paused:
            paused[node].append(handle)
        else:
            super().append(handle)


class SimLoop(asyncio.BaseEventLoop):
    """Virtual time; tasks tracked per node; sockets supplied by `network` (see net.py)."""

    def __init__(self, network: Any = None) -> None:
        super().__init__()
        self._selector = _VirtualSelector(self)
        self._clock_resolution = 1e-9
        self._now = 0.0
        self.network = network
        self.node_tasks: dict[str, dict[asyncio.Task[Any], None]] = {}
        self.dead: set[str] = set()  # nodes whose process is down: new tasks die at once
        self.paused: dict[str, list[asyncio.Handle]] = {}
        """SIGSTOPped nodes -> their callbacks held back until SIGCONT, in order."""
        self._ready: collections.deque[asyncio.Handle] = _ReadyQueue(self)
        self._held_placeholder = asyncio.Handle(lambda: None, (), self)
        self._held_placeholder.cancel()  # the loop skips it
        self.errors: list[dict[str, Any]] = []
        self.set_task_factory(self._make_task)
        self.set_exception_handler(self._record_error)

    def time(self) -> float:
        return self._now

    def advance(self, seconds: float) -> None:
        self._now += seconds

    def _process_events(self, event_list: list[Any]) -> None:
        pass

    def _write_to_self(self) -> None:
        pass

    def run_in_executor(self, executor: Any, func: Any, *args: Any) -> Any:
        raise SimulationError(
            f"{getattr(func, '__qualname__', func)} asked for a thread; inside the simulation "
            "blocking work must go through an inline offload"
        )

    def _make_task(
        self, loop: asyncio.AbstractEventLoop, coro: Any, context: contextvars.Context | None = None
    ) -> asyncio.Task[Any]:
        task: asyncio.Task[Any] = asyncio.Task(coro, loop=loop, context=context)
        node = CURRENT_NODE.get() if context is None else context.get(CURRENT_NODE, "controller")
        tasks = self.node_tasks.setdefault(node, {})
        tasks[task] = None
        task.add_done_callback(lambda t: tasks.pop(t, None))
        task.add_done_callback(self._task_done)
        if node in self.dead:
            task.cancel()
        return task

    def spawn(self, node: str, coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        """Run `coro` as a task of `node` (and so are the tasks it starts)."""
        context = contextvars.Context()
        context.run(CURRENT_NODE.set, node)
        return self.create_task(coro, context=context)

    def pause_node(self, node: str) -> None:
        """SIGSTOP: none of `node`'s callbacks run — no task steps, no timers, nothing it
        receives is read — until `resume_node`. Its connections stay open and bytes sent
        to it wait, as they would in the kernel's buffers."""
        held = self.paused.setdefault(node, [])
        for i, handle in enumerate(self._ready):
            if handle._context.get(CURRENT_NODE) == node:  # type: ignore[attr-defined]
                held.append(handle)
                # The queue may be mid-run (a nemesis op is a callback too): keep its length.
                self._ready[i] = self._held_placeholder

    def resume_node(self, node: str) -> None:
        """SIGCONT: what `node` was held back from runs now, in order (overdue timers too)."""
        for handle in self.paused.pop(node, []):
            self._ready.append(handle)

    def kill_node(self, node: str) -> None:
        """`node`'s process dies (a paused one too): its connections reset and its tasks
        are cancelled (in creation order), as are tasks its dying code still starts."""
        self.resume_node(node)
        self.dead.add(node)
        self.network.kill(node)
        for task in list(self.node_tasks.get(node, {})):
            task.cancel()

    def _record_error(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        """Unhandled errors are kept for the run's log instead of going to stderr: a killed
        node's cancelled tasks may fail on its closed files, as a real process would die.
        One no fault explains, raised by the product, is marked a `crash` (`crash_of`)."""
        exc = context.get("exception")
        crash = crash_of(exc) if isinstance(exc, BaseException) else None
        where = {"crash": crash} if crash else {}
        self.errors.append(
            {"time": self._now, "message": context.get("message"), **context, **where}
        )

    def _task_done(self, task: asyncio.Task[Any]) -> None:
        """A task that ended with a crash of the product is recorded when it ends, whoever
        awaits it later (a task nobody awaits would be reported only when collected, at a
        time that depends on the garbage collector, not on the seed). Asking a task for its
        exception marks it retrieved, so another exception a task ended with (a dying
        node's `OSError`) is no longer logged when the task is collected."""
        if task.cancelled() or (exc := task.exception()) is None or not crash_of(exc):
            return
        name = getattr(task.get_coro(), "__qualname__", task.get_name())
        self.call_exception_handler({"message": f"task {name} ended with", "exception": exc})

    async def create_connection(  # type: ignore[override]
        self, protocol_factory: Any, host: str, port: int, **kwargs: Any
    ) -> tuple[asyncio.Transport, asyncio.BaseProtocol]:
        return await self.network.connect(protocol_factory, host, port)

    async def create_server(  # type: ignore[override]
        self, protocol_factory: Any, host: str, port: int, **kwargs: Any
    ) -> Any:
        return self.network.listen(protocol_factory, host, port)


def crash_of(exc: BaseException) -> str | None:
    """`exc` as a crash of the product — its type, where in the product's code it was
    raised (the innermost frame there) and its message — or None when it is not one: not
    a `PROGRAMMING_ERRORS` exception, or not raised through the product's code."""
    if not isinstance(exc, PROGRAMMING_ERRORS):
        return None
    site = None
    tb = exc.__traceback__
    while tb is not None:
        site = _product_line(tb.tb_frame, tb.tb_lineno) or site
        tb = tb.tb_next
    return None if site is None else f"{type(exc).__name__} at {site}: {exc}"


def waiting_at(task: asyncio.Task[Any]) -> str | None:
    """The innermost line of the product a suspended task waits at (following what each
    coroutine awaits), with its function's name; None if it waits in no product code."""
    site = None
    awaited: Any = task.get_coro()
    while awaited is not None:
        frame = getattr(awaited, "cr_frame", None) or getattr(awaited, "ag_frame", None)
        if frame is not None and (line := _product_line(frame, frame.f_lineno)):
            site = f"{line} in {frame.f_code.co_name}"
        awaited = getattr(awaited, "cr_await", None) or getattr(awaited, "ag_await", None)
    return site


def _product_line(frame: Any, line: int) -> str | None:
    """`bookie_image/…/file.py:line` if `frame` runs the product's code, else None."""
    parts = Path(frame.f_code.co_filename).parts
    return f"{'/'.join(parts[parts.index(PRODUCT) :])}:{line}" if PRODUCT in parts else None
