"""The docker runtime (DESIGN §5): every node in its own container with its own address.

One bridge network per run with a fixed /24 and static IPs (zk1 = .2, bookie bN = .10+N,
client agent cM = .100+M), NET_ADMIN in every container (iptables / tc for the nemeses),
the node's data on a named volume (it survives process restarts) and
`bkchaos.run=<run id>` on every container, network and volume, so that `down()` and
`bkchaos gc` find everything a run made — also after the controller was SIGKILLed.
PID 1 in each container is the supervisor (bookie_image.image.supervisor);
start/stop/kill/pause/resume go to it through `docker exec`, so killing the bookie keeps
the container, its IP and its volume.

The controller reaches ZooKeeper and the client agents only through ports published on
127.0.0.1; bookie, ZooKeeper and client traffic stays on the run's network, where the
nemeses act.

Containers are created with testcontainers (fluent builder, files copied in before start,
cleanup if start fails), with Ryuk off: it would need an image pull, and every resource
carries our run label instead. Networks, volumes, exec and removal use the docker SDK.
"""

from __future__ import annotations

import atexit
import contextlib
import io
import ipaddress
import json
import os
import signal
import sys
import tarfile
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

import docker
import docker.errors
from docker.models.containers import Container
from docker.types import EndpointConfig, IPAMConfig, IPAMPool
from kazoo.client import KazooClient

from harness.errors import UserError
from harness.runtime.base import STATE_FILE, save_state
from harness.runtime.bookie_config import bookie_toml
from harness.runtime.local import _ZkSession, agent_answers, agent_command
from harness.runtime.zookeeper import ZOOKEEPER_JAR, is_serving, server_command, zoo_cfg

# Ryuk (testcontainers' reaper) would be pulled from a registry; this must be set before
# testcontainers reads its configuration at import.
os.environ["TESTCONTAINERS_RYUK_DISABLED"] = "true"
from testcontainers.core.container import DockerContainer

RUN_LABEL = "bkchaos.run"
NODE_LABEL = "bkchaos.node"
SUBNET_POOL = ipaddress.ip_network("172.29.0.0/16")  # one /24 of it per run
DATA_DIR = "/var/lib/bkchaos"  # the node's volume
LOG_DIR = "/var/log/bkchaos"
CONFIG_DIR = "/etc/bkchaos"
ZK_PORT = 2181
BOOKIE_PORT = 3181
AGENT_PORT = 7000
PUBLISHED_ROLES = ("zk", "client")
"""Roles whose service port the controller reaches, published on 127.0.0.1 only."""
LOG_NAMES = {"zk": "zk.log", "bookie": "bookie.log", "client": "agent.log"}
"""The node's log in LOG_DIR, named as on the local runtime."""
MAX_BOOKIES, MAX_CLIENTS = 89, 150  # bookies at .11-.99, clients at .101-.250
SUPERVISOR = ["python", "-m", "bookie_image.image.supervisor"]
READY_TIMEOUT_S = {"zk": 60.0, "bookie": 30.0, "client": 30.0}


def docker_client(timeout: int = 120) -> docker.DockerClient:
    """A connected client, or a UserError (exit 254) that says how to get one."""
    try:
        client = docker.from_env(timeout=timeout)
        client.ping()
    except docker.errors.DockerException as exc:
        raise UserError(
            f"cannot reach the Docker engine ({exc}); start it (e.g. `service docker start`) "
            "or use `--runtime local`"
        ) from exc
    return client


def gc(client: docker.DockerClient, run_id: str | None = None) -> dict[str, int]:
    """Remove every container, network and volume labelled with `run_id` (any run if None);
    returns how many of each were removed."""
    label = {"label": RUN_LABEL if run_id is None else f"{RUN_LABEL}={run_id}"}
    removed = {"containers": 0, "networks": 0, "volumes": 0}
    for container in client.containers.list(all=True, filters=label):
        with contextlib.suppress(docker.errors.NotFound):
            container.remove(force=True, v=True)
            removed["containers"] += 1
    for network in client.networks.list(filters=label):
        with contextlib.suppress(docker.errors.NotFound):
            network.remove()
            removed["networks"] += 1
    for volume in client.volumes.list(filters=label):
        with contextlib.suppress(docker.errors.NotFound):
            volume.remove(force=True)
            removed["volumes"] += 1
    return removed


@dataclass
class DockerNode:
    """One container; `id` is the bookie id exactly as ledger metadata names it;
    `published` is where the controller reaches its port (PUBLISHED_ROLES only)."""

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
    """Where the controller reaches a client agent: its port published on 127.0.0.1
    (the shape of LocalCluster's agents: name, host, port)."""

    name: str
    host: str
    port: int


@dataclass
class DockerCluster:
    """ZooKeeper (zk1), N bookies and M client agents, each in a container of one run's
    network.

    `state_dir` keeps `cluster.json` (so a later `bkchaos cluster …` process finds the run)
    and, after `down()`, each node's logs in `<node>/` (the local runtime's layout).
    `image` defaults to the tag of the current source tree, built (or reused) on `up()`.
    `extra_env` goes into every container (e.g. BKCHAOS_BUGS for the seeded bugs).
    """

    state_dir: Path
    bookie_count: int = 3
    client_count: int = 0
    ledgers_root: str = "/ledgers"
    image: str = ""
    extra_env: dict[str, str] = field(default_factory=dict)
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex[:10])
    subnet: str = ""
    nodes: list[DockerNode] = field(default_factory=list)
    _client: docker.DockerClient | None = field(default=None, repr=False, compare=False)

    python: ClassVar[str] = "python"
    """The interpreter `exec` runs project modules with inside a node (the image's)."""

    # ---- lifecycle -------------------------------------------------------------------

    @property
    def client(self) -> docker.DockerClient:
        if self._client is None:
            self._client = docker_client()
        return self._client

    @property
    def network_name(self) -> str:
        return f"bkchaos-{self.run_id}"

    @property
    def zk(self) -> str:
        """ZooKeeper's connect string inside the run's network."""
        return ",".join(n.id for n in self.with_role("zk"))

    @property
    def zk_published(self) -> str:
        """ZooKeeper's port as the controller reaches it (127.0.0.1:<random>)."""
        return next((n.published for n in self.with_role("zk")), "")

    def with_role(self, role: str) -> list[DockerNode]:
        """The nodes of one role ("zk" | "bookie" | "client"), in name order."""
        return [n for n in self.nodes if n.role == role]

    @property
    def bookies(self) -> list[DockerNode]:
        return self.with_role("bookie")

    @property
    def agents(self) -> list[AgentEndpoint]:
        """The client agents as the controller reaches them (LocalCluster.agents' shape)."""
        return [AgentEndpoint(n.name, *n.published_address) for n in self.with_role("client")]

    def up(self) -> DockerCluster:
        """Create the network and every node; return once ZooKeeper serves, every bookie
        is registered and every agent answers. On any failure, everything created so far
        is removed."""
        if not 0 <= self.bookie_count <= MAX_BOOKIES:
            raise UserError(f"--bookies must be 0..{MAX_BOOKIES}, got {self.bookie_count}")
        if not 0 <= self.client_count <= MAX_CLIENTS:
            raise UserError(f"--clients must be 0..{MAX_CLIENTS}, got {self.client_count}")
        self.state_dir.mkdir(parents=True, exist_ok=True)
        if self._previous_run_alive():
            raise UserError(
                f"a docker cluster is already running in {self.state_dir}; "
                "run `bkchaos cluster down` first or pass another --dir"
            )
        if not self.image:
            from bookie_image.image.build import ImageBuildError, build_image

            try:
                self.image = build_image(docker_client(timeout=900)).tag
            except ImageBuildError as exc:
                raise UserError(str(exc)) from exc
        try:
            network = self._create_network()
            hosts = list(network.hosts())
            self.nodes = [DockerNode("zk1", "zk", str(hosts[1]), ZK_PORT)]
            self.nodes += [
                DockerNode(f"b{i}", "bookie", str(hosts[9 + i]), BOOKIE_PORT)
                for i in range(1, self.bookie_count + 1)
            ]
            self.nodes += [
                DockerNode(f"c{i}", "client", str(hosts[99 + i]), AGENT_PORT)
                for i in range(1, self.client_count + 1)
            ]
            self.save()
            zookeepers, bookies, clients = map(self.with_role, ("zk", "bookie", "client"))
            for node in [*zookeepers, *bookies]:
                self._create_node(node)
            self._wait_serving(zookeepers)
            for node in clients:  # an agent connects to ZooKeeper as it starts
                self._create_node(node)
            self._wait_serving([*bookies, *clients])
        except BaseException:
            self.down()
            raise
        return self

    def _previous_run_alive(self) -> bool:
        try:
            previous = json.loads((self.state_dir / STATE_FILE).read_text())["run_id"]
        except (OSError, ValueError, KeyError):
            return False
        label = {"label": f"{RUN_LABEL}={previous}"}
        return bool(self.client.containers.list(all=True, filters=label))

    @contextlib.contextmanager
    def running(self) -> Iterator[DockerCluster]:
        """`up()`, then `down()` however the block ends: return, error, SIGINT, SIGTERM or
        interpreter exit. (SIGKILL cannot be caught: `bkchaos gc` cleans up after that.)"""
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

    def _create_network(self) -> ipaddress.IPv4Network:
        """A bridge network on the first /24 of SUBNET_POOL that no docker network uses."""
        for _attempt in range(5):
            used = [
                ipaddress.ip_network(config["Subnet"])
                for net in self.client.networks.list()
                for config in (net.attrs.get("IPAM") or {}).get("Config") or []
                if "Subnet" in config
            ]
            subnet = next(
                (
                    s
                    for s in SUBNET_POOL.subnets(new_prefix=24)
                    if not any(s.overlaps(u) for u in used)
                ),
                None,
            )
            if subnet is None:
                raise UserError(f"every /24 of {SUBNET_POOL} is in use; run `bkchaos gc`")
            gateway = str(next(subnet.hosts()))
            try:
                self.client.networks.create(
                    self.network_name,
                    driver="bridge",
                    ipam=IPAMConfig(pool_configs=[IPAMPool(subnet=str(subnet), gateway=gateway)]),
                    labels={RUN_LABEL: self.run_id},
                )
            except docker.errors.APIError as exc:
                if "overlap" in str(exc).lower():  # another run took it meanwhile
                    continue
                raise
            self.subnet = str(subnet)
            return subnet  # type: ignore[return-value]
        raise UserError(f"could not find a free subnet in {SUBNET_POOL}; run `bkchaos gc`")

    def _role_files(self, node: DockerNode) -> tuple[list[str], dict[str, bytes]]:
        """The command the supervisor runs for `node`, and the config files it needs."""
        if node.role == "zk":
            config = f"{CONFIG_DIR}/zoo.cfg"
            text = zoo_cfg(node.data_dirs[0], node.port, "0.0.0.0")
            return server_command("java", ZOOKEEPER_JAR, config), {config: text.encode()}
        if node.role == "client":
            return agent_command(self.python, self.zk, self.ledgers_root, "0.0.0.0", node.port), {}
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
        command = ["python", "-m", "bookie_image.bookie", "--config", config]
        return command, {config: text.encode()}

    def _create_node(self, node: DockerNode) -> None:
        labels = {RUN_LABEL: self.run_id, NODE_LABEL: node.name}
        command, files = self._role_files(node)
        endpoint = EndpointConfig(
            self.client.api.api_version, ipv4_address=node.ip, aliases=[node.name]
        )
        container = (
            DockerContainer(self.image)
            .with_kwargs(  # a static IP is not in testcontainers' Network API: docker's own
                labels=labels,
                hostname=node.name,
                cap_add=["NET_ADMIN"],
                network=self.network_name,
                networking_config={self.network_name: endpoint},
            )
            .with_name(f"{self.network_name}-{node.name}")
            .with_command(["--log", node.log_path, "--", *command])
        )
        if node.data_dirs:
            name = f"{self.network_name}-{node.name}"
            volume = self.client.volumes.create(name, labels=labels)
            container.with_volume_mapping(volume.name, DATA_DIR, "rw")
        for key, value in self.extra_env.items():
            container.with_env(key, value)
        for path, data in files.items():
            container.with_copy_into_container(data, path)
        if node.role in PUBLISHED_ROLES:
            # testcontainers binds on every interface; the controller's port must be
            # reachable from this machine only (docker-py reads (ip, None) as "any port").
            container.ports[f"{node.port}/tcp"] = ("127.0.0.1", None)  # type: ignore[assignment]
        container.start()
        if node.role in PUBLISHED_ROLES:
            bound = self._container(node.name).ports[f"{node.port}/tcp"][0]  # fresh attrs
            node.published = f"{bound['HostIp']}:{bound['HostPort']}"
            self.save()

    def _registrations(self, zk: KazooClient) -> dict[str, int]:
        """Bookie id -> the ZooKeeper session that owns its `available` znode."""
        available = f"{self.ledgers_root}/available"
        owners = {}
        for child in zk.get_children(available) if zk.exists(available) else []:
            stat = zk.exists(f"{available}/{child}")
            if stat is not None:
                owners[child] = stat.ephemeralOwner
        return owners

    def _wait_serving(self, nodes: list[DockerNode], stale: dict[str, int] | None = None) -> None:
        """Wait until each node serves: ZooKeeper answers `srvr`, a bookie has registered
        (a znode still owned by a session in `stale` — a killed predecessor's, until it
        expires — does not count), an agent answers a ping. Bounded per role by
        READY_TIMEOUT_S; a process that exits meanwhile fails at once, with its log."""
        stale = stale or {}
        began = time.monotonic()
        with contextlib.ExitStack() as stack:
            zk = None
            if any(n.role == "bookie" for n in nodes):
                zk = stack.enter_context(self.zk_client())
            waiting = list(nodes)
            while waiting:
                registered = self._registrations(zk) if zk else {}
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
                            f"{READY_TIMEOUT_S[node.role]:.0f}s; last lines of its log:\n"
                            f"{self.log_tail(node.name)}"
                        )
                if waiting:
                    time.sleep(0.1)

    def _check_running(self, node: DockerNode) -> None:
        status = self._ctl(node.name, "status")["status"]
        if status["state"] not in ("running", "paused"):
            raise UserError(
                f"{node.name}'s process exited with code {status['exit_code']} while starting; "
                f"last lines of its log:\n{self.log_tail(node.name)}"
            )

    def down(self) -> None:
        """Collect the node logs into `state_dir/<node>/`, then remove every container, the
        network and the volumes of this run. Safe to call twice. SIGINT / SIGTERM wait
        until it is done: a second Ctrl-C must not cut a teardown short."""
        with _signals_deferred():
            with contextlib.suppress(docker.errors.DockerException, OSError):
                self.collect_logs(self.state_dir)
            gc(self.client, self.run_id)

    # ---- node operations (through the supervisor) --------------------------------------

    def node(self, name: str) -> DockerNode:
        for node in self.nodes:
            if name in (node.name, node.id):
                return node
        known = ", ".join(n.name for n in self.nodes) or "none"
        raise UserError(f"no node named {name!r} in this cluster (nodes: {known})")

    def _container(self, name: str) -> Container:
        try:
            return self.client.containers.get(f"{self.network_name}-{self.node(name).name}")
        except docker.errors.NotFound:
            raise UserError(
                f"{name}'s container is gone (run {self.run_id}); start a new cluster"
            ) from None

    def _ctl(self, name: str, command: str) -> dict:
        """One supervisor command inside the node's container; its JSON reply."""
        result = self._container(name).exec_run([*SUPERVISOR, "ctl", command])
        output = result.output.decode(errors="replace").strip()
        try:
            return json.loads(output.splitlines()[-1])
        except (ValueError, IndexError):
            raise RuntimeError(
                f"supervisor of {name} answered {command!r} with: {output}"
            ) from None

    def start(self, name: str, wait: bool = True) -> DockerNode:
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
        """Graceful stop (SIGTERM, SIGKILL if it lingers); the container stays."""
        self._ctl(name, "stop")

    def kill(self, name: str) -> int:
        """SIGKILL, returning the (in-container) pid once it is proven gone."""
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
        """Run a command inside the node's container (as root); (exit code, output).
        `timeout` bounds it inside the container (coreutils `timeout`)."""
        command = ["timeout", "-s", "KILL", f"{timeout:g}", *argv]
        result = self._container(name).exec_run(command)
        return result.exit_code, result.output.decode(errors="replace")

    def process_state(self, name: str) -> tuple[int | None, str | None]:
        """(in-container pid, kernel state letter) of the node's process; (None, None)
        if it is not running."""
        pid = self._ctl(name, "status")["status"]["pid"]
        if pid is None:
            return None, None
        code, out = self.exec(name, ["cat", f"/proc/{pid}/stat"], timeout=10)
        state = out.rsplit(")", 1)[1].split()[0] if code == 0 and ")" in out else None
        return pid, state

    def clock_file(self, name: str) -> str | None:
        """Clock faults are not wired into containers yet (docs/nemeses.md)."""
        return None

    # ---- inspection ------------------------------------------------------------------

    def zk_client(self) -> _ZkSession:
        """A started kazoo client on the published port (a context manager)."""
        return _ZkSession(self.zk_published)

    def log_tail(self, name: str, lines: int = 20) -> str:
        node = self.node(name)
        with contextlib.suppress(UserError, docker.errors.DockerException):
            result = self._container(name).exec_run(["tail", f"-n{lines}", node.log_path])
            return result.output.decode(errors="replace")
        return "(no log: the container is gone)"

    def collect_logs(self, dest: Path) -> None:
        """Copy each node's LOG_DIR to `dest/<node>/`."""
        for node in self.nodes:
            with contextlib.suppress(UserError, docker.errors.NotFound):
                stream, _ = self._container(node.name).get_archive(f"{LOG_DIR}/.")
                target = dest / node.name
                target.mkdir(parents=True, exist_ok=True)
                with tarfile.open(fileobj=io.BytesIO(b"".join(stream))) as tar:
                    tar.extractall(target, filter="data")

    def status(self) -> dict:
        """The local runtime's endpoints JSON, plus each node's IP and the run's network."""
        states: dict[str, dict] = {}
        for node in self.nodes:
            try:
                states[node.name] = self._ctl(node.name, "status")["status"]
            except (UserError, docker.errors.APIError):
                states[node.name] = {"state": "gone", "pid": None}
        host, _, port = self.zk_published.rpartition(":")
        zk_serving = bool(port) and is_serving(host, int(port))
        registered: set[str] = set()
        if zk_serving:
            with self.zk_client() as zk:
                registered = set(self._registrations(zk))

        def describe(node: DockerNode) -> dict:
            state = states[node.name]
            return {
                "name": node.name,
                "ip": node.ip,
                "pid": state["pid"],
                "state": state["state"],
                "alive": state["state"] in ("running", "paused"),
                "log": node.log_path,
                "container": f"{self.network_name}-{node.name}",
            }

        def server(node: DockerNode) -> dict:
            return {"id": node.id, **describe(node), "data_dirs": node.data_dirs}

        def agent(node: DockerNode) -> dict:
            host, port = node.published_address
            return {**describe(node), "host": host, "port": port}

        return {
            "runtime": "docker",
            "run_id": self.run_id,
            "network": self.network_name,
            "subnet": self.subnet,
            "image": self.image,
            "zk": self.zk,
            "zk_published": self.zk_published,
            "zk_serving": zk_serving,
            "ledgers_root": self.ledgers_root,
            "zookeepers": [server(n) for n in self.with_role("zk")],
            "bookies": [{**server(n), "registered": n.id in registered} for n in self.bookies],
            "clients": [agent(n) for n in self.with_role("client")],
        }

    # ---- persistence -----------------------------------------------------------------

    def save(self) -> None:
        state = {
            "runtime": "docker",
            "state_dir": str(self.state_dir),
            "bookie_count": self.bookie_count,
            "client_count": self.client_count,
            "ledgers_root": self.ledgers_root,
            "image": self.image,
            "extra_env": self.extra_env,
            "run_id": self.run_id,
            "subnet": self.subnet,
            "nodes": [vars(n) for n in self.nodes],
        }
        save_state(self.state_dir, state)

    @classmethod
    def load(cls, state_dir: Path) -> DockerCluster:
        path = state_dir / STATE_FILE
        try:
            state = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            raise UserError(f"cannot read {path}: {exc}; is a docker cluster there?") from exc
        state.pop("runtime", None)
        state["state_dir"] = Path(state["state_dir"])
        state["nodes"] = [DockerNode(**n) for n in state["nodes"]]
        return cls(**state)


def _in_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


@contextlib.contextmanager
def _signals_deferred() -> Iterator[None]:
    """Hold SIGINT and SIGTERM (main thread only) until the block is done, then deliver
    them."""
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
