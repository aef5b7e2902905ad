"""SIGTERM counts as Ctrl-C inside the block, and only there."""

from __future__ import annotations

import os
import signal

import pytest

from core.signals import sigterm_as_interrupt


def test_sigterm_inside_the_block_is_an_interrupt_and_the_old_handler_comes_back() -> None:
    seen: list[int] = []
    previous = signal.signal(signal.SIGTERM, lambda signum, _frame: seen.append(signum))
    try:
        with pytest.raises(KeyboardInterrupt), sigterm_as_interrupt():
            os.kill(os.getpid(), signal.SIGTERM)
            signal.sigtimedwait([], 0)  # deliver now, not at some later bytecode
        os.kill(os.getpid(), signal.SIGTERM)
        assert seen == [signal.SIGTERM]
    finally:
        signal.signal(signal.SIGTERM, previous)
