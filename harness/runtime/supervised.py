"""What the docker and ssh runtimes share: nodes run under the image's supervisor.

On both, each node (ZooKeeper `zk1`, bookies `b1…`, client agents `c1…`) is one machine —
a container or an ssh host — with its own address, where the supervisor
(bookie_image.image.supervisor) runs the node's one process and outlives it. Every node
operation is a command run *on* the node as root (`_run`: `docker exec` or an ssh
channel): start/stop/kill/pause/resume go to the supervisor's `ctl`, the nemeses' work to
`exec`. Subclasses say how to reach a node and how to bring nodes up and down; the
lifecycle, readiness, status and teardown-on-signal are the same.
"""

from __future__ import annotations

import atexit
import contextlib
import ipaddress
import json
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, fields, is_dataclass
from pathlib import Path
from typing import Any, ClassVar, Protocol, Self

from kazoo.client import KazooClient

from bookie_image.image.faketime import JVM_FAKETIME_ENV, faketime_command, faketime_env
from harness.errors import UserError
from harness.runtime.base import STATE_FILE, save_state
from harness.runtime.bookie_config import bookie_toml
from harness.runtime.local import ZkPoller, _ZkSession, agent_answers, agent_command
from harness.runtime.zookeeper import (
    SERVER_LOG,
    ZOOKEEPER_JAR,
    is_serving,
    log4j_properties,
    myid_command,
    server_command,
    zoo_cfg,
)

DATA_DIR = "/var/lib/bkchaos"  # the node's data (a volume on docker)
LOG_DIR = "/var/log/bkchaos"
CONFIG_DIR = "/etc/bkchaos"
CLOCK_FILE = f"{CONFIG_DIR}/faketime"
"""A bookie's libfaketime offset file: on the node, so it outlives process restarts."""
NODE_PYTHON = "/opt/bkchaos/bin/python"
"""The project's interpreter on every node (the image's venv; the ssh runtime installs it)."""
SUPERVISOR = [NODE_PYTHON, "-m", "bookie_image.image.supervisor"]
ZK_PORT = 2181
BOOKIE_PORT = 3181
AGENT_PORT = 7000
LOG_NAMES = {"zk": "zk.log", "bookie": "bookie.log", "client": "agent.log"}
"""The node's log in LOG_DIR, named as on the local runtime."""
READY_TIMEOUT_S = {"zk": 60.0, "bookie": 30.0, "client": 30.0}
MAX_ZOOKEEPERS = 7


@dataclass
class Node:
    """One machine; `id` is the bookie id exactly as ledger metadata names it;
    `published` is where the controller reaches its service port (ZooKeeper, agents)."""

    name: str
    role: str  # "zk" | "bookie" | "client"
    ip: str
    port: int
    published: str = ""

    @property
    def id(self) -> str:
        return f"{self.ip}:{self.port}"

    @property
    def log_path(self) -> str:
        return f"{LOG_DIR}/{LOG_NAMES[self.role]}"

    @property
    def data_dirs(self) -> list[str]:
        return {
            "zk": [f"{DATA_DIR}/zk"],
            "bookie": [f"{DATA_DIR}/journal", f"{DATA_DIR}/ledgers"],
            "client": [],
        }[self.role]

    @property
    def published_address(self) -> tuple[str, int]:
        host, port = self.published.rsplit(":", 1)
        return host, int(port)


@dataclass(frozen=True)
class AgentEndpoint:
    """Where the controller reaches a client agent (LocalCluster's agents' shape)."""

    name: str
    host: str
    port: int


def bind_address(address: str) -> str:
    """What ZooKeeper and an agent listen on: the node's own address on the run's network,
    which every peer and the controller (docker: through a port published on 127.0.0.1)
    use — not every interface. An ssh host named by a host name is the exception: the name
    may resolve to a loopback address on the host itself (Debian's 127.0.1.1), so it
    listens on every interface (give addresses in the inventory to avoid that)."""
    try:
        ipaddress.ip_address(address)
    except ValueError:
        return "0.0.0.0"
    return address


class NodeStream(Protocol):
    """The output of a command left running on a node (`SupervisedCluster.stream`), read
    as it comes by a thread that waits on many at once."""

    def fileno(self) -> int:
        """A descriptor that turns readable when `recv` has something to say."""
        ...

    def recv(self) -> bytes | None:
        """What the command printed since (perhaps nothing yet); None once it ended."""
        ...

    def close(self) -> None:
        """Stop reading: the command's standard input ends."""
        ...


@dataclass
class SupervisedCluster:
    """ZooKeeper (zk1), N bookies and M client agents, one per machine, each under the
    supervisor. `state_dir` keeps `cluster.json` and, after `down()`, each node's logs in
    `<node>/`. `extra_env` reaches every node's process (e.g. BKCHAOS_BUGS); `faketime`
    preloads libfaketime into the bookies, each reading CLOCK_FILE (the clock nemesis)."""

    state_dir: Path
    bookie_count: int = 3
    client_count: int = 0
    zk_count: int = 1
    """ZooKeeper servers: 1 (standalone `zk1`) or an ensemble `zk1…zkN` (N odd)."""
    ledgers_root: str = "/ledgers"
    extra_env: dict[str, str] = field(default_factory=dict)
    faketime: bool = False
    nodes: list[Node] = field(default_factory=list)

    runtime: ClassVar[str]
    python: ClassVar[str] = NODE_PYTHON
    """The interpreter `exec` runs project modules with on a node."""

    # ---- what a runtime provides ---------------------------------------------------------

    def _run(self, name: str, argv: list[str]) -> tuple[int, str]:
        """Run `argv` on the node as root; (exit code, stdout and stderr). A node that
        cannot be reached raises UserError."""
        raise NotImplementedError

    def stream(self, name: str, argv: list[str]) -> NodeStream:
        """Start `argv` on the node as root, its standard input kept open until the
        stream is closed, and return its output (stdout and stderr) as a stream."""
        raise NotImplementedError

    def up(self) -> Self:
        raise NotImplementedError

    def down(self) -> None:
        raise NotImplementedError

    def _status_extras(self) -> dict:
        """Runtime-specific top-level fields of `status()`."""
        return {}

    def _node_extras(self, node: Node) -> dict:
        """Runtime-specific per-node fields of `status()`."""
        return {}

    # ---- the nodes -----------------------------------------------------------------------

    @property
    def zk(self) -> str:
        """ZooKeeper's connect string as the nodes reach it."""
        return ",".join(n.id for n in self.with_role("zk"))

    @property
    def zk_published(self) -> str:
        """ZooKeeper's connect string as the controller reaches it (every server)."""
        return ",".join(n.published for n in self.with_role("zk") if n.published)

    def zk_names(self) -> list[tuple[str, str, int]]:
        """(name, role, port) of the ZooKeeper nodes this cluster asks for, checked."""
        if self.zk_count < 1 or self.zk_count % 2 == 0 or self.zk_count > MAX_ZOOKEEPERS:
            raise UserError(
                f"--zk must be an odd number of servers from 1 to {MAX_ZOOKEEPERS} (a "
                f"majority must survive a failure), got {self.zk_count}"
            )
        return [(f"zk{i}", "zk", ZK_PORT) for i in range(1, self.zk_count + 1)]

    def with_role(self, role: str) -> list[Node]:
        """The nodes of one role ("zk" | "bookie" | "client"), in name order."""
        return [n for n in self.nodes if n.role == role]

    @property
    def bookies(self) -> list[Node]:
        return self.with_role("bookie")

    @property
    def agents(self) -> list[AgentEndpoint]:
        """The client agents as the controller reaches them."""
        return [AgentEndpoint(n.name, *n.published_address) for n in self.with_role("client")]

    def node(self, name: str) -> Node:
        for node in self.nodes:
            if name in (node.name, node.id):
                return node
        known = ", ".join(n.name for n in self.nodes) or "none"
        raise UserError(f"no node named {name!r} in this cluster (nodes: {known})")

    def _role_files(self, node: Node) -> tuple[list[str], dict[str, bytes]]:
        """The command the supervisor runs for `node`, and the config files it needs; with
        `faketime`, under libfaketime (every role: ZooKeeper, bookies and agents)."""
        command, files = self._role_command(node)
        if self.faketime:  # `env` execs the process: the preload reaches it, not the supervisor
            env = faketime_env(CLOCK_FILE) | (JVM_FAKETIME_ENV if node.role == "zk" else {})
            preload = [f"{key}={value}" for key, value in env.items()]
            python_module = command[1:2] == ["-m"]
            command = ["env", *preload, *(faketime_command(command) if python_module else command)]
            files[CLOCK_FILE] = b"+0\n"
        return command, files

    def _role_command(self, node: Node) -> tuple[list[str], dict[str, bytes]]:
        listen = bind_address(node.ip)
        if node.role == "zk":
            config, zookeepers = f"{CONFIG_DIR}/zoo.cfg", self.with_role("zk")
            log_config = f"{CONFIG_DIR}/log4j.properties"
            command = server_command("java", ZOOKEEPER_JAR, config, log_config)
            files = {log_config: log4j_properties(f"{LOG_DIR}/{SERVER_LOG}").encode()}
            if len(zookeepers) == 1:
                text = zoo_cfg(node.data_dirs[0], node.port, listen)
                return command, {config: text.encode(), **files}
            ensemble = [n.ip for n in zookeepers]
            text = zoo_cfg(node.data_dirs[0], node.port, listen, ensemble)
            myid = zookeepers.index(node) + 1
            files[config] = text.encode()
            return myid_command(command, node.data_dirs[0], myid), files
        if node.role == "client":
            return agent_command(self.python, self.zk, self.ledgers_root, listen, node.port), {}
        config = f"{CONFIG_DIR}/bookie.toml"
        text = bookie_toml(
            bookie_id=node.id,
            host=node.ip,
            port=node.port,
            zk=self.zk,
            ledgers_root=self.ledgers_root,
            journal_dir=node.data_dirs[0],
            ledger_dirs=node.data_dirs[1:],
        )
        command = [self.python, "-m", "bookie_image.bookie", "--config", config]
        return command, {config: text.encode()}

    def _start_in_order(self, start: Callable[[Node], None]) -> None:
        """`start` ZooKeeper and the bookies, then, once ZooKeeper serves, the agents (an
        agent connects to ZooKeeper as it starts); return once every node serves."""
        zookeepers, bookies, clients = map(self.with_role, ("zk", "bookie", "client"))
        for node in [*zookeepers, *bookies]:
            start(node)
        self._wait_serving(zookeepers)
        for node in clients:
            start(node)
        self._wait_serving([*bookies, *clients])

    @contextlib.contextmanager
    def running(self) -> Iterator[Self]:
        """`up()`, then `down()` however the block ends: return, error, SIGINT, SIGTERM or
        interpreter exit. (SIGKILL cannot be caught: `bkchaos gc` / the next `up` clean
        up after that.)"""
        previous = None
        if _in_main_thread():
            previous = signal.signal(signal.SIGTERM, _exit_on_sigterm)
        atexit.register(self.down)
        try:
            yield self.up()
        finally:
            self.down()
            atexit.unregister(self.down)
            if previous is not None:
                signal.signal(signal.SIGTERM, previous)

    # ---- readiness -----------------------------------------------------------------------

    def _registrations(self, zk: KazooClient) -> dict[str, int]:
        """Bookie id -> the ZooKeeper session that owns its `available` znode."""
        available = f"{self.ledgers_root}/available"
        owners = {}
        for child in zk.get_children(available) if zk.exists(available) else []:
            stat = zk.exists(f"{available}/{child}")
            if stat is not None:
                owners[child] = stat.ephemeralOwner
        return owners

    def _wait_serving(self, nodes: list[Node], stale: dict[str, int] | None = None) -> None:
        """Wait until each node serves: ZooKeeper answers `srvr`, a bookie has registered
        (a znode still owned by a session in `stale` — a killed predecessor's, until it
        expires — does not count), an agent answers a ping. Bounded per role by
        READY_TIMEOUT_S; a process that exits meanwhile fails at once, with its log."""
        stale = stale or {}
        began = time.monotonic()
        needs_zk = any(n.role == "bookie" for n in nodes)
        with ZkPoller(self.zk_client) as poller:
            waiting = list(nodes)
            while waiting:
                registered = (poller.read(self._registrations) if needs_zk else None) or {}
                for node in list(waiting):
                    if node.role == "bookie":
                        ready = node.id in registered and registered[node.id] != stale.get(node.id)
                    else:
                        probe = is_serving if node.role == "zk" else agent_answers
                        ready = probe(*node.published_address)
                    if ready:
                        waiting.remove(node)
                        continue
                    self._check_running(node)
                    if time.monotonic() - began > READY_TIMEOUT_S[node.role]:
                        raise UserError(
                            f"{node.name} ({node.role}) was not serving within "
                            f"{READY_TIMEOUT_S[node.role]:.0f}s{poller.why()}; "
                            f"last lines of its log:\n{self.log_tail(node.name)}"
                        )
                if waiting:
                    time.sleep(0.1)

    def _check_running(self, node: Node) -> None:
        status = self._ctl(node.name, "status")["status"]
        if status["state"] not in ("running", "paused"):
            raise UserError(
                f"{node.name}'s process exited with code {status['exit_code']} while starting; "
                f"last lines of its log:\n{self.log_tail(node.name)}"
            )

    # ---- node operations (through the supervisor) ----------------------------------------

    def _ctl(self, name: str, command: str) -> dict:
        """One supervisor command on the node; its JSON reply."""
        _, output = self._run(name, [*SUPERVISOR, "ctl", command])
        try:
            return json.loads(output.strip().splitlines()[-1])
        except (ValueError, IndexError):
            raise RuntimeError(
                f"supervisor of {name} answered {command!r} with: {output.strip()}"
            ) from None

    def start(self, name: str, wait: bool = True) -> Node:
        """Start the node's process; with `wait`, return once it serves / is registered."""
        node = self.node(name)
        stale: dict[str, int] = {}
        if wait and node.role == "bookie":
            with self.zk_client() as zk:
                stale = self._registrations(zk)
        reply = self._ctl(name, "start")
        if not reply["ok"]:
            raise UserError(f"cannot start {name}: {reply.get('error')}")
        if wait:
            self._wait_serving([node], stale)
        return node

    def stop(self, name: str) -> None:
        """Graceful stop (SIGTERM, SIGKILL if it lingers); the machine stays."""
        self._ctl(name, "stop")

    def kill(self, name: str) -> int:
        """SIGKILL, returning the node-local pid once it is proven gone."""
        reply = self._ctl(name, "kill")
        if not reply.get("pid"):
            raise UserError(f"{name} is not running")
        if not reply["ok"]:
            raise RuntimeError(f"{name} (pid {reply['pid']}) survived SIGKILL")
        return int(reply["pid"])

    def pause(self, name: str) -> None:
        self._expect(name, "pause")

    def resume(self, name: str) -> None:
        self._expect(name, "resume")

    def _expect(self, name: str, command: str) -> None:
        reply = self._ctl(name, command)
        if not reply["ok"]:
            raise UserError(f"cannot {command} {name}: {reply.get('error')}")

    def exec(self, name: str, argv: list[str], timeout: float = 60.0) -> tuple[int, str]:
        """Run a command on the node (as root); (exit code, output). `timeout` bounds it
        on the node (coreutils `timeout`)."""
        return self._run(name, ["timeout", "-s", "KILL", f"{timeout:g}", *argv])

    def process_state(self, name: str) -> tuple[int | None, str | None]:
        """(node-local pid, kernel state letter) of the node's process; (None, None) if it
        is not running."""
        status = self._ctl(name, "status")["status"]
        return status["pid"], status["kernel_state"]

    def clock_file(self, name: str) -> str | None:
        """The node's libfaketime offset file, or None if clocks are not faked."""
        self.node(name)
        return CLOCK_FILE if self.faketime else None

    # ---- inspection ----------------------------------------------------------------------

    def zk_client(self) -> _ZkSession:
        """A started kazoo client on ZooKeeper's published address (a context manager)."""
        return _ZkSession(self.zk_published)

    def log_tail(self, name: str, lines: int = 20) -> str:
        node = self.node(name)
        with contextlib.suppress(UserError):
            logs = [node.log_path, *([f"{LOG_DIR}/{SERVER_LOG}"] if node.role == "zk" else [])]
            return self._run(name, ["tail", f"-n{lines}", *logs])[1]
        return "(no log: the node is gone)"

    def status(self) -> dict:
        """The local runtime's endpoints JSON, plus each node's address."""
        states: dict[str, dict] = {}
        for node in self.nodes:
            try:
                states[node.name] = self._ctl(node.name, "status")["status"]
            except (UserError, RuntimeError):
                states[node.name] = {"state": "gone", "pid": None}
        zk_serving = any(
            is_serving(*n.published_address) for n in self.with_role("zk") if n.published
        )
        registered: set[str] = set()
        if zk_serving:
            with ZkPoller(self.zk_client) as poller:  # unreadable: none counts as registered
                registered = set(poller.read(self._registrations) or ())

        def describe(node: Node) -> dict:
            state = states[node.name]
            return {
                "name": node.name,
                "ip": node.ip,
                "pid": state["pid"],
                "state": state["state"],
                "alive": state["state"] in ("running", "paused"),
                "log": node.log_path,
                **self._node_extras(node),
            }

        def server(node: Node) -> dict:
            return {"id": node.id, **describe(node), "data_dirs": node.data_dirs}

        def agent(node: Node) -> dict:
            host, port = node.published_address
            return {**describe(node), "host": host, "port": port}

        return {
            "runtime": self.runtime,
            **self._status_extras(),
            "zk": self.zk,
            "zk_published": self.zk_published,
            "zk_serving": zk_serving,
            "ledgers_root": self.ledgers_root,
            "zookeepers": [server(n) for n in self.with_role("zk")],
            "bookies": [{**server(n), "registered": n.id in registered} for n in self.bookies],
            "clients": [agent(n) for n in self.with_role("client")],
        }

    # ---- persistence ---------------------------------------------------------------------

    def save(self) -> None:
        """`cluster.json`: every public field, so `load` gives back this cluster."""
        state: dict[str, Any] = {"runtime": self.runtime}
        for spec in fields(self):
            if not spec.name.startswith("_"):
                value = getattr(self, spec.name)
                if isinstance(value, list):
                    value = [vars(item) if is_dataclass(item) else item for item in value]
                state[spec.name] = value
        state["state_dir"] = str(self.state_dir)
        save_state(self.state_dir, state)

    @classmethod
    def load(cls, state_dir: Path) -> Self:
        path = state_dir / STATE_FILE
        try:
            state = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            raise UserError(
                f"cannot read {path}: {exc}; is a {cls.runtime} cluster there?"
            ) from exc
        state.pop("runtime", None)
        state["state_dir"] = Path(state["state_dir"])
        state["nodes"] = [Node(**n) for n in state["nodes"]]
        return cls(**cls._revive(state))

    @classmethod
    def _revive(cls, state: dict[str, Any]) -> dict[str, Any]:
        """Turn a subclass's own JSON fields back into their types (`load`)."""
        return state


def _in_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


@contextlib.contextmanager
def signals_deferred() -> Iterator[None]:
    """Hold SIGINT and SIGTERM (main thread only) until the block is done, then deliver
    them: a second Ctrl-C must not cut a teardown short."""
    if not _in_main_thread():
        yield
        return
    caught: list[int] = []
    held = (signal.SIGINT, signal.SIGTERM)
    previous = {sig: signal.signal(sig, lambda signum, _f: caught.append(signum)) for sig in held}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        for signum in caught:
            signal.raise_signal(signum)


def _exit_on_sigterm(signum: int, _frame: object) -> None:
    """SIGTERM becomes SystemExit, so `finally` blocks and atexit handlers tear down."""
    sys.exit(128 + signum)
