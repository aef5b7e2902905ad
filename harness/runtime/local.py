"""The local runtime: ZooKeeper and bookies as processes on loopback, no containers.

It is the fast path for host-side integration tests and for process, disk and clock
faults (network faults need the docker runtime). All state lives under one directory:
`cluster.json` describes the cluster so that a later `bkchaos cluster status|kill|down`
(another process) can find it; each node has its own sub-directory with its config,
data dirs and log.

Every node process carries the cluster's run id and owner (harness.runtime.ownership):
unless `detached` (`bkchaos cluster up`), a watchdog stops them all once the controller
is gone, however it ended; a recorded pid is signalled only while it still carries the
run id, so a pid the kernel reused is never hit.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import ClassVar, TypeVar

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, NoNodeError

from bookie_image.image.faketime import LIBFAKETIME, faketime_command, faketime_env
from harness.errors import UserError
from harness.runtime.base import STATE_FILE, save_state, unstopped
from harness.runtime.bookie_config import bookie_toml
from harness.runtime.ownership import (
    DETACHED,
    OWNER_ENV,
    RUN_ENV,
    belongs_to,
    controller_id,
    stop_run,
)
from harness.runtime.process import (
    free_port,
    pid_alive,
    process_state,
    stop_pid,
    tail,
    wait_gone,
)
from harness.runtime.zookeeper import LocalZooKeeper, is_serving

BOOKIE_READY_TIMEOUT_S = 30.0
CLOCK_FILE = "faketime"


@dataclass
class ProcessNode:
    """A node that is one local process with its own directory and log."""

    name: str
    host: str
    port: int
    node_dir: str
    pid: int | None = None

    log_name: ClassVar[str]

    @property
    def log_path(self) -> Path:
        return Path(self.node_dir) / self.log_name


@dataclass
class BookieNode(ProcessNode):
    """One bookie process: `id` is the bookie id exactly as ledger metadata names it."""

    log_name: ClassVar[str] = "bookie.log"

    @property
    def id(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def config_path(self) -> Path:
        return Path(self.node_dir) / "bookie.toml"

    @property
    def data_dirs(self) -> list[str]:
        return [str(Path(self.node_dir) / "journal"), str(Path(self.node_dir) / "ledgers")]


@dataclass
class AgentNode(ProcessNode):
    """One client agent process (`bookie_image.agent`), reached by the controller on `port`."""

    log_name: ClassVar[str] = "agent.log"


@dataclass
class LocalCluster:
    """ZooKeeper plus N bookie processes under `state_dir`.

    With `zk` given, an already running ZooKeeper is used (tests share one per session and
    give each cluster its own `ledgers_root`); otherwise the cluster starts its own.
    """

    state_dir: Path
    bookie_count: int = 3
    zk: str | None = None
    ledgers_root: str = "/ledgers"
    zk_pid: int | None = None
    zk_dir: str | None = None
    bookies: list[BookieNode] = field(default_factory=list)
    client_count: int = 0
    agents: list[AgentNode] = field(default_factory=list)
    extra_env: dict[str, str] = field(default_factory=dict)
    faketime: bool = False
    """Preload libfaketime into the bookies, each with its own offset file (the clock
    nemesis); off by default, as every wall-clock call then reads that file."""
    small_disks_mb: int = 0
    """Mount a tmpfs of this many MiB as each bookie's ledger dir, a disk of its own that
    the `disk-full` nemesis can fill without filling the host's (needs root); 0: none."""
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex[:10])
    detached: bool = False
    """Outlive the controller (`bkchaos cluster up`): no watchdog, owner DETACHED."""
    owner: str = ""
    """The controller that owns the nodes (ownership.controller_id), set by `up`."""

    python: ClassVar[str] = sys.executable
    """The interpreter `exec` runs project modules with on a node (here: the host)."""

    def __post_init__(self) -> None:
        # Node configs, data dirs and the nemeses' file operations must all name the same
        # files whatever the working directory (the bookie resolves relative config paths
        # against the config file's own directory).
        self.state_dir = Path(self.state_dir).resolve()
        self._watchdog: subprocess.Popen | None = None
        self._watchdog_pipe: int | None = None  # our end: closed, the watchdog acts

    # ---- lifecycle -------------------------------------------------------------------

    def up(self) -> LocalCluster:
        """Start ZooKeeper (unless given) and every bookie; return once all are registered."""
        if self.bookie_count < 1:
            raise UserError(f"--bookies must be at least 1, got {self.bookie_count}")
        if self.faketime and not Path(LIBFAKETIME).exists():
            raise UserError(
                f"the clock nemesis needs libfaketime ({LIBFAKETIME} is missing); "
                "install it: apt-get install -y faketime libfaketime"
            )
        self.state_dir.mkdir(parents=True, exist_ok=True)
        if (self.state_dir / STATE_FILE).exists() and self.load(self.state_dir).any_alive():
            raise UserError(
                f"a cluster is already running in {self.state_dir}; "
                "run `bkchaos cluster down` first or pass another --dir"
            )
        self.owner = DETACHED if self.detached else controller_id()
        try:
            if not self.detached:
                self._start_watchdog()
            if self.zk is None:
                zk_dir = self.state_dir / "zk1"
                server = LocalZooKeeper(zk_dir, env=self._node_env()).start()
                self.zk, self.zk_pid, self.zk_dir = server.connect_string, server.pid, str(zk_dir)
            self.bookies = [self._new_bookie(i + 1) for i in range(self.bookie_count)]
            self.agents = [self._new_agent(i + 1) for i in range(self.client_count)]
            self.save()
            for node in self.bookies:
                self.start(node.name)
            for agent in self.agents:
                self._start_agent(agent)
        except BaseException:
            self.down()
            raise
        return self

    def _start_watchdog(self) -> None:
        """harness.runtime.watchdog, reading a pipe only we hold the other end of."""
        read_end, self._watchdog_pipe = os.pipe()
        try:
            with (self.state_dir / "watchdog.log").open("ab") as log:
                self._watchdog = subprocess.Popen(
                    [sys.executable, "-m", "harness.runtime.watchdog", self.run_id],
                    stdin=read_end,
                    stdout=subprocess.DEVNULL,
                    stderr=log,
                    start_new_session=True,
                )
        finally:
            os.close(read_end)

    def _stop_watchdog(self) -> None:
        """Close our end of its pipe: it stops what is left of the run, then exits."""
        if self._watchdog_pipe is not None:
            os.close(self._watchdog_pipe)
            self._watchdog_pipe = None
        if self._watchdog is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._watchdog.wait(timeout=30)
            self._watchdog = None

    def _node_env(self) -> dict[str, str]:
        """A node process's environment: ours, the cluster's extras, the ownership marks."""
        return {**os.environ, **self.extra_env, RUN_ENV: self.run_id, OWNER_ENV: self.owner}

    def _ours(self, pid: int | None) -> bool:
        """Whether `pid` is a live node of this cluster (not a pid reused since)."""
        return pid is not None and pid_alive(pid) and belongs_to(pid, self.run_id)

    def _new_bookie(self, number: int) -> BookieNode:
        node_dir = self.state_dir / f"b{number}"
        node_dir.mkdir(parents=True, exist_ok=True)
        node = BookieNode(f"b{number}", "127.0.0.1", free_port(), str(node_dir))
        if self.small_disks_mb:
            self._mount_small_disk(Path(node.data_dirs[1]))
        node.config_path.write_text(
            bookie_toml(
                bookie_id=node.id,
                host=node.host,
                port=node.port,
                zk=self.zk or "",
                ledgers_root=self.ledgers_root,
                journal_dir=node.data_dirs[0],
                ledger_dirs=node.data_dirs[1:],
            )
        )
        return node

    def _mount_small_disk(self, ledgers: Path) -> None:
        ledgers.mkdir(parents=True, exist_ok=True)
        size = f"size={self.small_disks_mb}m"
        done = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", size, "bkchaos-disk", str(ledgers)],
            capture_output=True,
            text=True,
        )
        if done.returncode != 0:
            raise UserError(
                f"the disk-full fault gives each local bookie a tmpfs of its own, and mounting "
                f"one failed ({done.stderr.strip()}): run as root, or leave disk-full out"
            )

    def _unmount_small_disks(self) -> None:
        """Unmount the tmpfs ledger dirs `up` mounted (their data goes with them)."""
        for node in self.bookies:
            ledgers = Path(node.data_dirs[1])
            if ledgers.is_mount():
                subprocess.run(["umount", "-l", str(ledgers)], capture_output=True)

    def _new_agent(self, number: int) -> AgentNode:
        node_dir = self.state_dir / f"c{number}"
        node_dir.mkdir(parents=True, exist_ok=True)
        return AgentNode(f"c{number}", "127.0.0.1", free_port(), str(node_dir))

    def _start_agent(self, agent: AgentNode) -> None:
        command = agent_command(
            sys.executable, self.zk or "", self.ledgers_root, agent.host, agent.port
        )
        proc = self._spawn(agent, command)
        deadline = time.monotonic() + BOOKIE_READY_TIMEOUT_S
        while not agent_answers(agent.host, agent.port):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise UserError(
                    f"client agent {agent.name} did not start; last lines of "
                    f"{agent.log_path}:\n{tail(agent.log_path)}"
                )
            time.sleep(0.05)

    def node(self, name: str) -> BookieNode:
        for node in self.bookies:
            if node.name == name or node.id == name:
                return node
        known = ", ".join(n.name for n in self.bookies) or "none"
        raise UserError(f"no node named {name!r} in this cluster (nodes: {known})")

    def start(self, name: str, wait: bool = True) -> BookieNode:
        """Start a bookie process; with `wait`, return once it is registered in ZooKeeper."""
        node = self.node(name)
        if self._ours(node.pid):
            raise UserError(f"{name} is already running (pid {node.pid})")
        command = [sys.executable, "-m", "bookie_image.bookie", "--config", str(node.config_path)]
        proc = self._spawn(node, command)
        if wait:
            self._wait_registered(node, proc)
        return node

    def _spawn(self, node: ProcessNode, command: list[str]) -> subprocess.Popen:
        """Start a node's process detached (its own session), logging to its log file."""
        env = self._node_env()
        if self.faketime and isinstance(node, BookieNode):
            clock = Path(node.node_dir) / CLOCK_FILE
            if not clock.exists():
                clock.write_text("+0\n")
            env.update(faketime_env(str(clock)))
            command = faketime_command(command)
        with node.log_path.open("ab") as log:
            proc = subprocess.Popen(
                command,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                env=env,
            )
        node.pid = proc.pid
        self.save()
        return proc

    def _wait_registered(self, node: BookieNode, proc: subprocess.Popen) -> None:
        """Wait for *this* process's registration: after a SIGKILL the dead bookie's
        ephemeral znode outlives it until its ZooKeeper session expires."""
        path = f"{self.ledgers_root}/available/{node.id}"
        deadline = time.monotonic() + BOOKIE_READY_TIMEOUT_S
        with ZkPoller(self.zk_client) as poller:
            while time.monotonic() < deadline:
                if proc.poll() is not None:
                    node.pid = None
                    self.save()
                    raise UserError(
                        f"bookie {node.name} exited with code {proc.returncode} while starting; "
                        f"last lines of {node.log_path}:\n{tail(node.log_path)}"
                    )
                if poller.read(lambda zk: registered_pid(zk, path)) == proc.pid:
                    return
                time.sleep(0.05)
        raise UserError(
            f"bookie {node.name} did not register at {path} within "
            f"{BOOKIE_READY_TIMEOUT_S:.0f}s{poller.why()}; last lines of {node.log_path}:\n"
            f"{tail(node.log_path)}"
        )

    def stop(self, name: str) -> None:
        """Graceful stop (SIGTERM, then SIGKILL if it lingers)."""
        node = self.node(name)
        if self._ours(node.pid):
            stop_pid(node.pid)  # type: ignore[arg-type]
        node.pid = None
        self.save()

    def kill(self, name: str) -> int:
        """SIGKILL, returning the pid that was killed once it is proven gone."""
        node = self.node(name)
        if node.pid is None or not self._ours(node.pid):
            raise UserError(f"{name} is not running")
        pid = node.pid
        self._signal(node, signal.SIGKILL)
        if not wait_gone(pid, timeout=5):
            raise RuntimeError(f"{name} (pid {pid}) survived SIGKILL for 5s")
        node.pid = None
        self.save()
        return pid

    def process_state(self, name: str) -> tuple[int | None, str | None]:
        """(pid, kernel state letter) of a node's process; (None, None) if not running."""
        node = self.node(name)
        if node.pid is None:
            return None, None
        return node.pid, process_state(node.pid)

    def runs_unstopped(self, name: str) -> bool:
        return unstopped(*self.process_state(name))

    def pause(self, name: str) -> None:
        self._signal(self.node(name), signal.SIGSTOP)

    def exec(self, name: str, argv: list[str], timeout: float = 60.0) -> tuple[int, str]:
        """Run a command where the node's files are (this host); (exit code, output)."""
        self.node(name)
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired as exc:
            raise RuntimeError(f"{argv[0]} on {name} ran over {timeout:.0f}s") from exc
        return done.returncode, done.stdout + done.stderr

    def clock_file(self, name: str) -> str | None:
        """The node's libfaketime offset file, or None if clocks are not faked here."""
        return str(Path(self.node(name).node_dir) / CLOCK_FILE) if self.faketime else None

    def resume(self, name: str) -> None:
        self._signal(self.node(name), signal.SIGCONT)

    def _signal(self, node: BookieNode, sig: signal.Signals) -> None:
        if node.pid is None or not belongs_to(node.pid, self.run_id):
            raise UserError(f"{node.name} is not running")
        os.kill(node.pid, sig)

    def down(self) -> None:
        """Stop every process this cluster started, found by the run id it carries (so a
        recorded pid the kernel reused is never signalled, and a node whose pid was never
        recorded is not missed): agents and bookies at once, ZooKeeper once they are gone.
        Then the watchdog, which finds nothing left to stop."""
        stop_run(self.run_id, last=frozenset({self.zk_pid} if self.zk_pid else ()))
        for node in [*self.agents, *self.bookies]:
            node.pid = None
        self.zk_pid = None
        self._stop_watchdog()
        self._unmount_small_disks()
        if self.state_dir.exists():
            self.save()

    # ---- inspection ------------------------------------------------------------------

    def any_alive(self) -> bool:
        pids = [n.pid for n in [*self.bookies, *self.agents]] + [self.zk_pid]
        return any(self._ours(pid) for pid in pids)

    def zk_client(self) -> _ZkSession:
        """A started kazoo client (use as a context manager to stop it)."""
        return _ZkSession(self.zk or "")

    def status(self) -> dict:
        """The endpoints JSON with liveness: what `cluster up --json` and `status` print."""
        registered: set[str] = set()
        zk_serving = False
        if self.zk:
            host, port = self.zk.rsplit(":", 1)
            zk_serving = is_serving(host, int(port))
        if zk_serving:
            available = f"{self.ledgers_root}/available"
            with ZkPoller(self.zk_client) as poller:  # unreadable: none counts as registered
                children = poller.read(
                    lambda zk: zk.exists(available) and zk.get_children(available)
                )
                registered = set(children or ())
        return {
            "runtime": "local",
            "zk": self.zk,
            "zk_serving": zk_serving,
            "ledgers_root": self.ledgers_root,
            "bookies": [
                {
                    "id": n.id,
                    "name": n.name,
                    "pid": n.pid,
                    "alive": self._ours(n.pid),
                    "registered": n.id in registered,
                    "data_dirs": n.data_dirs,
                    "log": str(n.log_path),
                }
                for n in self.bookies
            ],
            "clients": [
                {
                    "name": a.name,
                    "host": a.host,
                    "port": a.port,
                    "pid": a.pid,
                    "alive": self._ours(a.pid),
                    "log": str(a.log_path),
                }
                for a in self.agents
            ],
        }

    # ---- persistence -----------------------------------------------------------------

    def save(self) -> None:
        state = asdict(self)
        state["state_dir"] = str(self.state_dir)
        save_state(self.state_dir, state)

    @classmethod
    def load(cls, state_dir: Path) -> LocalCluster:
        path = state_dir / STATE_FILE
        try:
            state = json.loads(path.read_text())
        except FileNotFoundError:
            raise UserError(
                f"no cluster in {state_dir} ({path} is missing); "
                "start one with `bkchaos cluster up --runtime local --dir DIR`"
            ) from None
        except (OSError, ValueError) as exc:
            raise UserError(
                f"cannot read {path}: {exc}; remove the directory and start again"
            ) from exc
        if "run_id" not in state:  # written before nodes carried their run id
            pids = [n.get("pid") for n in [*state["bookies"], *state.get("agents", [])]]
            pids = [pid for pid in [state.get("zk_pid"), *pids] if pid]
            raise UserError(
                f"{path} was written by an older bkchaos: it records no run id, so its pids "
                f"({', '.join(map(str, pids)) or 'none'}) cannot be told from pids reused "
                "since; check them with `ps -o pid,args -p PID`, stop the ones that are "
                f"ZooKeeper, bookies or agents, then remove {state_dir}"
            )
        state["state_dir"] = Path(state["state_dir"])
        state["bookies"] = [BookieNode(**b) for b in state["bookies"]]
        state["agents"] = [AgentNode(**a) for a in state.get("agents", [])]
        return cls(**state)


def registered_pid(zk: KazooClient, path: str) -> int | None:
    """The pid a bookie wrote into its registration znode, if the znode exists."""
    try:
        data, _ = zk.get(path)
        return json.loads(data).get("pid")
    except (NoNodeError, ValueError, AttributeError):
        return None


def agent_command(python: str, zk: str, ledgers_root: str, host: str, port: int) -> list[str]:
    """The client agent's command line, the same on every runtime."""
    return [
        python,
        "-m",
        "bookie_image.agent",
        "--zk",
        zk,
        "--ledgers-root",
        ledgers_root,
        "--host",
        host,
        "--port",
        str(port),
    ]


def agent_answers(host: str, port: int) -> bool:
    """True once the agent at host:port answers a ping (it is connected to ZooKeeper)."""
    try:
        with socket.create_connection((host, port), timeout=2) as sock:
            sock.sendall(b'{"id": 0, "f": "ping"}\n')
            return b'"ok"' in sock.makefile("rb").readline()
    except OSError:
        return False


T = TypeVar("T")


class ZkPoller:
    """The controller's reads of ZooKeeper while it waits for nodes, through one session
    that is reopened when it drops. On a loaded machine ZooKeeper can stall past the
    session timeout (seen: kazoo's session expired while a powered-on bookie registered);
    that is not the node's failure, so `read` answers None and the waiter asks again, on a
    fresh session, until its own deadline. `last_error` says what went wrong last."""

    def __init__(self, open_session: Callable[[], _ZkSession]) -> None:
        self.open_session = open_session
        self.session: _ZkSession | None = None
        self.zk: KazooClient | None = None
        self.last_error = ""

    def read(self, what: Callable[[KazooClient], T]) -> T | None:
        try:
            if self.zk is None:
                self.session = self.open_session()
                self.zk = self.session.__enter__()
            return what(self.zk)
        except (KazooException, UserError) as exc:
            self.last_error = f"{type(exc).__name__}: {exc}"
            self.close()
            return None

    def why(self) -> str:
        """For a timeout message: what ZooKeeper last answered, if reading failed."""
        return f" (ZooKeeper, last: {self.last_error})" if self.last_error else ""

    def close(self) -> None:
        if self.session is not None:
            with contextlib.suppress(Exception):  # a dead session may not stop cleanly
                self.session.__exit__(None, None, None)
        self.session = self.zk = None

    def __enter__(self) -> ZkPoller:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _ZkSession:
    """A kazoo client as a context manager, with a clear error if ZooKeeper is gone."""

    def __init__(self, hosts: str) -> None:
        self.client = KazooClient(hosts=hosts, timeout=5.0)

    def __enter__(self) -> KazooClient:
        try:
            self.client.start(timeout=10)
        except Exception as exc:
            raise UserError(f"cannot reach ZooKeeper at {self.client.hosts}: {exc}") from exc
        return self.client

    def __exit__(self, *exc: object) -> None:
        self.client.stop()
        self.client.close()
