"""PID 1 of every container: runs the node's one process and outlives it.

The nemeses kill -9, stop, pause and restart the bookie (or ZooKeeper, sshd, the agent)
while the container — and so its address, volumes and iptables rules — stays. So PID 1 is
this supervisor, never the process itself:

    python -m bookie_image.image.supervisor run [--log FILE] -- COMMAND...
    python -m bookie_image.image.supervisor ctl start|stop|kill|pause|resume|status

On an ssh host the runtime starts `run` detached (`setsid`) instead of as PID 1; its own
pid is in STATE_DIR/supervisor.pid for teardown.

`run` starts COMMAND in its own session (so a signal reaches all its threads and
children), appends its output to the log, reaps every zombie (PID 1's duty) and never
restarts it by itself: whether a dead process comes back is the nemesis's decision.
`ctl` (through `docker exec`) sends one command over a unix socket and prints the JSON
reply; the state is also in STATE_DIR (`pid` is empty while nothing runs).
SIGTERM to PID 1 (`docker stop`) stops the process gracefully, then the supervisor exits.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import selectors
import signal
import socket
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

STATE_DIR = Path(os.environ.get("BKCHAOS_SUPERVISOR_DIR", "/run/bkchaos"))
SOCKET_NAME = "supervisor.sock"
STOP_GRACE_S = 10.0
KILL_WAIT_S = 5.0
CONNECT_WAIT_S = 10.0
SETTLE_WAIT_S = 2.0


def process_state(pid: int) -> str | None:
    """The kernel's one-letter state of `pid` (R, S, T stopped, Z zombie…), None if gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[0]


COMMANDS = ("start", "stop", "kill", "pause", "resume", "status")


@dataclass
class State:
    """What `ctl status` reports; `pid` is the process's pid inside the container."""

    command: list[str]
    state: str = "stopped"  # running | paused | stopped | exited
    pid: int | None = None
    exit_code: int | None = None  # negative: killed by that signal
    starts: int = 0
    log: str = ""
    kernel_state: str | None = None
    """The kernel's state letter of the process when this was reported (R, S, T stopped…):
    one `ctl` call proves a pause or a resume, without a second exec to read /proc."""


@dataclass
class Supervisor:
    command: list[str]
    log: Path
    state_dir: Path = STATE_DIR
    status: State = field(init=False)
    stopping: bool = False

    def __post_init__(self) -> None:
        self.status = State(command=self.command, log=str(self.log))

    # ---- the process -------------------------------------------------------------------

    def start(self) -> dict:
        if self.status.pid is not None:
            return {"ok": False, "error": f"already running (pid {self.status.pid})"}
        self.log.parent.mkdir(parents=True, exist_ok=True)
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT
        self._note(f"starting: {' '.join(self.command)}")
        try:
            pid = os.posix_spawnp(
                self.command[0],
                self.command,
                os.environ,
                file_actions=[
                    (os.POSIX_SPAWN_OPEN, 0, "/dev/null", os.O_RDONLY, 0),
                    (os.POSIX_SPAWN_OPEN, 1, str(self.log), flags, 0o644),
                    (os.POSIX_SPAWN_DUP2, 1, 2),
                ],
                setsid=True,
            )
        except OSError as exc:
            self._note(f"cannot start: {exc}")
            return {"ok": False, "error": f"cannot start {self.command[0]}: {exc}"}
        self.status.pid, self.status.state, self.status.exit_code = pid, "running", None
        self.status.starts += 1
        self._save()
        return {"ok": True, "pid": pid}

    def signal_group(self, sig: signal.Signals) -> int | None:
        """Signal the process's whole session group; the pid signalled, or None."""
        pid = self.status.pid
        if pid is None:
            return None
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, sig)
        return pid

    def wait_exit(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while self.status.pid is not None and time.monotonic() < deadline:
            self.reap()
            if self.status.pid is not None:
                time.sleep(0.01)
        return self.status.pid is None

    def stop(self) -> dict:
        pid = self.signal_group(signal.SIGCONT)  # a paused process cannot act on SIGTERM
        if pid is None:
            return {"ok": True, "pid": None}
        self.signal_group(signal.SIGTERM)
        if not self.wait_exit(STOP_GRACE_S):
            self.signal_group(signal.SIGKILL)
            self.wait_exit(KILL_WAIT_S)
        return {"ok": self.status.pid is None, "pid": pid, "exit_code": self.status.exit_code}

    def kill(self) -> dict:
        pid = self.signal_group(signal.SIGKILL)
        if pid is None:
            return {"ok": False, "error": "not running"}
        gone = self.wait_exit(KILL_WAIT_S)
        return {"ok": gone, "pid": pid, "exit_code": self.status.exit_code}

    def pause(self, paused: bool) -> dict:
        pid = self.signal_group(signal.SIGSTOP if paused else signal.SIGCONT)
        if pid is None:
            return {"ok": False, "error": "not running"}
        self.status.state = "paused" if paused else "running"
        self._save()
        self._settle(pid, paused)
        return {"ok": True, "pid": pid}

    def _settle(self, pid: int, paused: bool) -> None:
        """Signals are delivered asynchronously: wait (bounded) until the kernel shows the
        stop or the continue, so the reply's `kernel_state` already proves it."""
        deadline = time.monotonic() + SETTLE_WAIT_S
        while (process_state(pid) == "T") != paused and time.monotonic() < deadline:
            time.sleep(0.01)

    def reap(self) -> None:
        """Collect every exited child (orphans included: PID 1 inherits them)."""
        while True:
            try:
                pid, wait_status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            if pid == self.status.pid:
                code = os.waitstatus_to_exitcode(wait_status)
                self.status.pid, self.status.state, self.status.exit_code = None, "exited", code
                self._note(f"process {pid} exited with {code}")
                self._save()

    # ---- control -----------------------------------------------------------------------

    def handle(self, command: str) -> dict:
        self.reap()
        if command == "start":
            reply = self.start()
        elif command == "stop":
            reply = self.stop()
            self.status.state = "stopped"
            self._save()
        elif command == "kill":
            reply = self.kill()
        elif command in ("pause", "resume"):
            reply = self.pause(command == "pause")
        elif command == "status":
            reply = {"ok": True}
        else:
            reply = {"ok": False, "error": f"unknown command {command!r}; use one of {COMMANDS}"}
        pid = self.status.pid
        self.status.kernel_state = None if pid is None else process_state(pid)
        return {**reply, "status": asdict(self.status)}

    def _save(self) -> None:
        pid = "" if self.status.pid is None else str(self.status.pid)
        (self.state_dir / "pid").write_text(pid)
        (self.state_dir / "state.json").write_text(json.dumps(asdict(self.status)))

    def _note(self, message: str) -> None:
        """Supervisor events go to the container's output (`docker logs`) and the node log."""
        line = f"{time.strftime('%Y-%m-%dT%H:%M:%S')} supervisor: {message}\n"
        sys.stdout.write(line)
        sys.stdout.flush()
        with contextlib.suppress(OSError), self.log.open("a") as log:
            log.write(line)

    def serve(self) -> int:
        """The main loop: commands on the socket, SIGCHLD reaping, SIGTERM shutdown."""
        self.state_dir.mkdir(parents=True, exist_ok=True)
        # Where PID 1 is not ours (an ssh host), teardown finds the supervisor here.
        (self.state_dir / "supervisor.pid").write_text(str(os.getpid()))
        path = self.state_dir / SOCKET_NAME
        path.unlink(missing_ok=True)
        server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        server.bind(str(path))
        server.listen(8)
        wake_r, wake_w = os.pipe()
        os.set_blocking(wake_w, False)
        signal.set_wakeup_fd(wake_w)
        for sig in (signal.SIGCHLD, signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._on_signal)
        selector = selectors.DefaultSelector()
        selector.register(server, selectors.EVENT_READ)
        selector.register(wake_r, selectors.EVENT_READ)
        self._save()
        self.start()
        while not self.stopping:
            for key, _ in selector.select(timeout=1.0):
                if key.fileobj is server:
                    self._answer(server)
                else:
                    os.read(wake_r, 4096)
            self.reap()
        self._note("SIGTERM: stopping the process and exiting")
        self.stop()
        return 0

    def _on_signal(self, signum: int, _frame: object) -> None:
        if signum in (signal.SIGTERM, signal.SIGINT):
            self.stopping = True

    def _answer(self, server: socket.socket) -> None:
        conn, _ = server.accept()
        with conn:
            conn.settimeout(2.0)
            try:
                command = conn.makefile("r").readline().strip()
                conn.sendall((json.dumps(self.handle(command)) + "\n").encode())
            except OSError as exc:
                self._note(f"control connection failed: {exc}")


def ctl(command: str, state_dir: Path = STATE_DIR) -> dict:
    """Send one command to the running supervisor and return its reply."""
    deadline = time.monotonic() + CONNECT_WAIT_S
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        # stop may take STOP_GRACE_S + KILL_WAIT_S before the supervisor answers.
        sock.settimeout(STOP_GRACE_S + KILL_WAIT_S + 5.0)
        while True:  # right after the container starts, the socket may not exist yet
            try:
                sock.connect(str(state_dir / SOCKET_NAME))
                break
            except (FileNotFoundError, ConnectionRefusedError):
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        sock.sendall(f"{command}\n".encode())
        return json.loads(sock.makefile("r").readline())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="supervisor", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="mode", required=True)
    run = sub.add_parser("run", help="be PID 1: supervise COMMAND")
    run.add_argument("--log", type=Path, default=Path("/var/log/bkchaos/process.log"))
    run.add_argument("command", nargs=argparse.REMAINDER)
    control = sub.add_parser("ctl", help="send one command to the running supervisor")
    control.add_argument("command", choices=COMMANDS)
    args = parser.parse_args(argv)
    if args.mode == "ctl":
        reply = ctl(args.command)
        print(json.dumps(reply))
        return 0 if reply.get("ok") else 1
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("run needs a COMMAND after --")
    return Supervisor(command, args.log).serve()


if __name__ == "__main__":
    sys.exit(main())
