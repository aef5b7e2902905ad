"""The watchdog of a local run: stops the run's nodes once its controller is gone.

`python -m harness.runtime.watchdog RUN_ID`, started by the controller with a pipe as its
stdin and in a session of its own (a Ctrl-C meant for the controller must not stop it
first). The controller never writes; when it ends in any way — return, exception, Ctrl-C,
SIGTERM, SIGKILL, the OOM killer — the kernel closes its end, the read here sees EOF, and
every process carrying the run's id is stopped (harness.runtime.ownership.stop_run). On a
normal end the controller has stopped its nodes already and there is nothing left to do.
"""

from __future__ import annotations

import signal
import sys

from harness.runtime.ownership import stop_run


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m harness.runtime.watchdog RUN_ID", file=sys.stderr)
        return 2
    for sig in (signal.SIGINT, signal.SIGHUP, signal.SIGPIPE):
        signal.signal(sig, signal.SIG_IGN)
    while sys.stdin.buffer.read(4096):  # the controller never writes: only EOF ends this
        pass
    stopped = stop_run(argv[0])
    if stopped:
        print(f"watchdog: controller gone, stopped run {argv[0]}: pids {stopped}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
