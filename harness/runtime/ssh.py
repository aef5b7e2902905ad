"""The ssh runtime (DESIGN §5): nodes are machines reached over ssh (paramiko), as in Jepsen.

An inventory file names the hosts; the first runs ZooKeeper (`zk1`; the first K with
`--zk K`), the next N the bookies (`b1…`), the next M the client agents (`c1…`), one node
per host:

    user = "root"                  # defaults for every host (each may override)
    key = "~/.ssh/id_ed25519"      # private key file; without one, ssh-agent / ~/.ssh keys
    known_hosts = "~/.ssh/known_hosts"  # the default; host keys are checked against it
    host_keys = "strict"           # or "accept-new": record an unknown host's key (OpenSSH's
                                   # StrictHostKeyChecking=accept-new); a changed key is
                                   # always refused
    [[hosts]]
    host = "10.0.0.11"             # the address the other nodes and the controller use
    port = 22                      # (a host name or an IP address, checked as such)

`up()` installs the project on each host from a bundle built here offline (the node's
wheels and the unpacked project, `bookie_image.image.build.node_bundle`) into
/opt/bkchaos — the image's layout, so the same commands and nemeses work — unless the
host already has that bundle; then it resets each node (refused while another run whose
controller is not proven gone holds the host; stops a previous run's supervisor, deletes
data, config and logs), marks the host as this run's (RUN_MARKER, read by `bkchaos gc`),
writes the configs and starts the image's supervisor detached (`setsid`), which runs the
node's process exactly as PID 1 does in a container. Commands run as root (a non-root user
needs passwordless sudo). `down()` collects the logs into `state_dir/<node>/`, stops the
supervisors and deletes the data on the hosts still marked as this run's.
The controller reaches ZooKeeper and the agents at the hosts' addresses.
"""

from __future__ import annotations

import contextlib
import io
import ipaddress
import re
import shlex
import tarfile
import threading
import tomllib
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, TypeVar

import paramiko

from harness.errors import UserError
from harness.runtime.base import unstopped_state
from harness.runtime.ownership import controller_id, owner_state
from harness.runtime.supervised import (
    AGENT_PORT,
    BOOKIE_PORT,
    CONFIG_DIR,
    DATA_DIR,
    LOG_DIR,
    SUPERVISOR,
    Node,
    SupervisedCluster,
    signals_deferred,
)

INSTALL_DIR = "/opt/bkchaos"
INSTALLED_MARK = f"{INSTALL_DIR}/.bundle"
"""Holds the key of the bundle installed on a host: an unchanged tree is not re-sent."""
SUPERVISOR_DIR = "/run/bkchaos"  # the supervisor's default STATE_DIR
CONNECT_TIMEOUT_S = 10.0
COMMAND_TIMEOUT_S = 300.0
RUN_MARKER = f"{CONFIG_DIR}/run"
"""`<run id> <owner>` of the run whose nodes a host runs (written by `up`, removed by
the teardown): what `bkchaos gc` reads to find a run whose controller is gone."""
PROCESS_STATE = f'pid=$(cat {SUPERVISOR_DIR}/pid) && [ -n "$pid" ] && ps -o stat= -p "$pid"'
"""The kernel state of the node's process (the supervisor keeps its pid); fails if none."""
MARKED_BY_OTHER_RUN = 3
"""The teardown's exit code when the host now belongs to another run."""


def teardown_script(run_id: str | None = None, then: str = "exit 0") -> str:
    """Stop whatever a run left on the host (its supervisor stops its process gracefully;
    a process whose supervisor was killed is killed by its group), delete the node's
    state, then run `then`. With `run_id`, only if the host is not marked as another
    run's (exit MARKED_BY_OTHER_RUN, touching nothing). Idempotent."""
    guard = ""
    if run_id is not None:
        guard = (
            f"marked=$(cut -d' ' -f1 {RUN_MARKER} 2>/dev/null)\n"
            f'if [ -n "$marked" ] && [ "$marked" != {shlex.quote(run_id)} ]; then\n'
            f'  echo "the host now runs $marked"; exit {MARKED_BY_OTHER_RUN}\n'
            "fi\n"
        )
    return f"""{guard}
pid=$(cat {SUPERVISOR_DIR}/supervisor.pid 2>/dev/null)
if [ -n "$pid" ] && kill -TERM "$pid" 2>/dev/null; then
  for _ in $(seq 200); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -KILL "$pid" 2>/dev/null
fi
child=$(cat {SUPERVISOR_DIR}/pid 2>/dev/null)
[ -n "$child" ] && kill -KILL -- "-$child" 2>/dev/null
rm -rf {SUPERVISOR_DIR} {DATA_DIR} {CONFIG_DIR} {LOG_DIR}
{then}
"""


READ_MARKER = (
    f"cat {RUN_MARKER} 2>/dev/null || {{ test -s {SUPERVISOR_DIR}/supervisor.pid && echo; }}"
)
"""Prints the host's run marker; an empty line if a node runs there without one (started
by an older bkchaos); nothing if the host runs no node."""
UNMARKED = "unmarked"
"""The run id `bkchaos gc` gives nodes that run without a marker."""


T = TypeVar("T")
DEFAULT_KNOWN_HOSTS = "~/.ssh/known_hosts"
HOST_KEY_POLICIES = ("strict", "accept-new")
HOST_FIELDS = ("host", "port", "user", "key", "known_hosts", "host_keys")
_HOST_NAME = re.compile(r"(?!-)[A-Za-z0-9-]{1,63}(?<!-)(\.(?!-)[A-Za-z0-9-]{1,63}(?<!-))*\.?")
_USER = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,31}")


@dataclass
class SshHost:
    """One inventory entry."""

    host: str
    port: int = 22
    user: str = "root"
    key: str = ""
    known_hosts: str = DEFAULT_KNOWN_HOSTS
    host_keys: str = "strict"

    def __str__(self) -> str:
        return f"{self.user}@{self.host}:{self.port}"


def valid_host(host: object) -> bool:
    """An IP address or a host name (RFC 1123 labels, 253 characters at most): what may
    reach a node's iptables and tc commands."""
    if not isinstance(host, str):
        return False
    with contextlib.suppress(ValueError):
        ipaddress.ip_address(host)
        return "%" not in host  # an IPv6 scope id may hold any character: refused
    return len(host) <= 253 and _HOST_NAME.fullmatch(host) is not None


def _check_host(host: SshHost, where: str) -> None:
    """Refuse an inventory entry whose values could not be what they claim to be."""
    if not valid_host(host.host):
        raise UserError(f"{where}: host must be a host name or an IP address, got {host.host!r}")
    if not isinstance(host.port, int) or not 0 < host.port < 65536:
        raise UserError(f"{where}: port must be 1-65535")
    if not isinstance(host.user, str) or not _USER.fullmatch(host.user):
        raise UserError(f"{where}: user must be a user name, got {host.user!r}")
    if host.host_keys not in HOST_KEY_POLICIES:
        raise UserError(
            f"{where}: host_keys must be one of {list(HOST_KEY_POLICIES)}, got {host.host_keys!r}"
        )
    for name in ("key", "known_hosts"):
        if not isinstance(getattr(host, name), str):
            raise UserError(f"{where}: {name} must be a file name")


def host_key_policy(host: SshHost) -> paramiko.MissingHostKeyPolicy:
    """As OpenSSH: an unknown host key is refused unless the inventory says accept-new;
    then it is recorded in the host's known_hosts file (paramiko saves it there because
    the client loaded that file). A key that differs from the recorded one is refused
    either way (paramiko raises BadHostKeyException before asking the policy)."""
    if host.host_keys == "accept-new":
        return paramiko.AutoAddPolicy()
    return paramiko.RejectPolicy()


def read_inventory(path: str | Path, accept_new: bool = False) -> list[SshHost]:
    """The hosts of an inventory file (see the module docstring), or a UserError that
    says what is wrong with it. `accept_new` (`--ssh-accept-new`) sets every host's
    host_keys to "accept-new", whatever the file says."""
    try:
        data = tomllib.loads(Path(path).read_text())
    except OSError as exc:
        raise UserError(f"cannot read the inventory {path}: {exc}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise UserError(f"the inventory {path} is not valid TOML: {exc}") from exc
    defaults = {k: data[k] for k in HOST_FIELDS[1:] if k in data}
    entries = data.get("hosts")
    if not isinstance(entries, list) or not entries:
        raise UserError(
            f'the inventory {path} lists no hosts; add [[hosts]] tables with host = "…"'
        )
    hosts = []
    for i, entry in enumerate(entries, 1):
        if not isinstance(entry, dict) or "host" not in entry or set(entry) - set(HOST_FIELDS):
            got = sorted(entry) if isinstance(entry, dict) else entry
            raise UserError(
                f"host #{i} of the inventory {path} needs `host` and may have only "
                f"{', '.join(HOST_FIELDS[1:])} (got {got})"
            )
        host = SshHost(**{**defaults, **entry})
        host.host_keys = "accept-new" if accept_new else host.host_keys
        _check_host(host, f"host #{i} of the inventory {path}")
        host.key = str(Path(host.key).expanduser()) if host.key else ""
        hosts.append(host)
    return hosts


@dataclass
class ChannelStream:
    """An ssh channel's output as it comes (harness.runtime.supervised.NodeStream)."""

    channel: paramiko.Channel

    def fileno(self) -> int:
        return self.channel.fileno()

    def recv(self) -> bytes | None:
        return self.channel.recv(1 << 16) or None

    def close(self) -> None:
        self.channel.close()


@dataclass
class SshCluster(SupervisedCluster):
    """ZooKeeper, N bookies and M client agents on the hosts of `inventory`."""

    inventory: str = ""
    hosts: list[SshHost] = field(default_factory=list)
    """The host of each node, in `nodes` order (assigned by `up`)."""
    accept_new: bool = False
    """Record the key of a host not yet in known_hosts instead of refusing it
    (`--ssh-accept-new`: OpenSSH's StrictHostKeyChecking=accept-new for every host)."""
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex[:10])
    owner: str = ""
    """The controller that owns the run (ownership.controller_id, set on `up`), or
    DETACHED (`bkchaos cluster up`); with the run id in each host's RUN_MARKER."""
    _connections: dict[str, paramiko.SSHClient] = field(
        default_factory=dict, repr=False, compare=False
    )
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    runtime: ClassVar[str] = "ssh"

    # ---- lifecycle -------------------------------------------------------------------

    def up(self) -> SshCluster:
        """Install, reset and start every node; return once ZooKeeper serves, every
        bookie is registered and every agent answers. On any failure, every node is
        stopped and reset again."""
        available = read_inventory(self.inventory, self.accept_new)
        roles = self.zk_names()
        needed = self.zk_count + self.bookie_count + self.client_count
        if len(available) < needed:
            raise UserError(
                f"{self.zk_count} ZooKeeper, {self.bookie_count} bookies and "
                f"{self.client_count} clients need {needed} hosts, but the inventory "
                f"{self.inventory} has {len(available)}; add hosts or ask for fewer nodes"
            )
        self.owner = self.owner or controller_id()
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self.hosts = available[:needed]
        roles += [(f"b{i}", "bookie", BOOKIE_PORT) for i in range(1, self.bookie_count + 1)]
        roles += [(f"c{i}", "client", AGENT_PORT) for i in range(1, self.client_count + 1)]
        self.nodes = [
            Node(name, role, host.host, port, f"{host.host}:{port}")
            for (name, role, port), host in zip(roles, self.hosts, strict=True)
        ]
        self.save()
        try:
            from bookie_image.image.build import ImageBuildError, node_bundle

            try:
                bundle, key = node_bundle()
            except ImageBuildError as exc:
                raise UserError(str(exc)) from exc
            self._on_every_node(lambda node: self._install(node, bundle, key))
            self._refuse_hosts_in_use()
            self._on_every_node(self._claim)
            self._start_in_order(self._launch)
        except BaseException:
            self.down()
            raise
        return self

    def _on_every_node(
        self, action: Callable[[Node], None], nodes: list[Node] | None = None
    ) -> None:
        """`action(node)` on all `nodes` (default: every node) at once."""
        nodes = self.nodes if nodes is None else nodes
        if not nodes:
            return
        with ThreadPoolExecutor(max_workers=min(8, len(nodes))) as pool:
            for done in [pool.submit(action, node) for node in nodes]:
                done.result()

    def _install(self, node: Node, bundle: Path, key: str) -> None:
        """Install the bundle (`node_bundle`) into /opt/bkchaos unless that very one is there."""
        from bookie_image.image.build import IMAGE_PYTHON, VENV_INSTALL

        code, found = self._run(node.name, ["cat", INSTALLED_MARK])
        if code == 0 and found.strip() == key:
            return
        wanted = ".".join(map(str, IMAGE_PYTHON))
        code, version = self._run(node.name, ["python3", "-c", "import sys; print(sys.version)"])
        if code != 0 or not version.startswith(wanted + "."):
            raise UserError(
                f"{self._host(node.name)} needs python {wanted} with venv (Debian bookworm's "
                f"python3 and python3-venv); it has: {version.strip() or 'no python3'}"
            )
        staging = f"{INSTALL_DIR}.staging"
        archive = io.BytesIO()
        with tarfile.open(fileobj=archive, mode="w:gz") as tar:
            tar.add(bundle, arcname=".")
        self._check(node, ["sh", "-c", f"rm -rf {staging} && mkdir -p {staging}"])
        self._check(node, ["tar", "-xz", "-C", staging], stdin=archive.getvalue())
        site = f"{INSTALL_DIR}/lib/python3.11/site-packages"
        script = (
            f"rm -rf {INSTALL_DIR} && {VENV_INSTALL.format(deps=staging + '/deps')}"
            f" && cp -a {staging}/project/. {site}/ && rm -rf {staging}"
            f" && echo {key} > {INSTALLED_MARK}"
        )
        self._check(node, ["sh", "-c", script])

    def _refuse_hosts_in_use(self) -> None:
        """A host marked as another run's is taken over only once that run's controller
        is proven gone; a live one, a detached cluster or an owner that cannot be told
        from here keeps its hosts."""
        runs, unreachable = self.host_runs(self.hosts)
        for error in unreachable.values():
            raise error
        for run, (owner, hosts) in runs.items():
            verdict = owner_state(owner)
            if run != self.run_id and verdict.state != "gone":
                raise UserError(
                    f"{', '.join(map(str, hosts))} run the nodes of run {run} "
                    f"({verdict.why}); stop that run, or reap it with `bkchaos gc --run {run} "
                    f"--inventory {self.inventory}` if you know its controller is gone"
                )

    def _claim(self, node: Node) -> None:
        """Reset the host (whatever a gone run left there) and mark it as this run's."""
        marker = shlex.quote(f"{self.run_id} {self.owner}")
        claim = f"mkdir -p {CONFIG_DIR} && echo {marker} > {RUN_MARKER}"
        self._check(node, ["sh", "-c", teardown_script(then=claim)])

    def _reset_quietly(self, node: Node) -> None:
        """Stop this run's node and delete its state, skipping a host that cannot be
        reached (its next `up` resets it) or that another run took over meanwhile."""
        with contextlib.suppress(UserError):
            self._check(node, ["sh", "-c", teardown_script(self.run_id)])

    def _launch(self, node: Node) -> None:
        """Write the node's config files and start its supervisor, detached."""
        command, files = self._role_files(node)
        for path, data in files.items():
            directory = str(Path(path).parent)
            script = f"mkdir -p {shlex.quote(directory)} && cat > {shlex.quote(path)}"
            self._check(node, ["sh", "-c", script], stdin=data)
        env = [f"{key}={value}" for key, value in self.extra_env.items()]
        supervisor = [*SUPERVISOR, "run", "--log", node.log_path, "--", *command]
        detached = shlex.join(["setsid", "-f", "env", *env, *supervisor])
        out = shlex.quote(f"{LOG_DIR}/supervisor.out")
        script = f"mkdir -p {DATA_DIR} {LOG_DIR} && {detached} > {out} 2>&1 < /dev/null"
        self._check(node, ["sh", "-c", script])

    def down(self) -> None:
        """Collect the node logs into `state_dir/<node>/`, stop every supervisor and
        delete the nodes' data. Safe to call twice; a host that cannot be reached is
        skipped (its next `up` resets it)."""
        with signals_deferred():
            with contextlib.suppress(OSError):
                self.collect_logs(self.state_dir)
            # Agents and bookies first, all at once: a bookie told to stop deregisters
            # from ZooKeeper, and takes its full grace period when ZooKeeper is gone.
            zookeepers = self.with_role("zk")
            others = [n for n in self.nodes if n not in zookeepers]
            for group in (others, zookeepers):
                self._on_every_node(self._reset_quietly, group)
            self.down_connections()

    def collect_logs(self, dest: Path) -> None:
        """Copy each node's LOG_DIR to `dest/<node>/`."""
        for node in self.nodes:
            with contextlib.suppress(UserError, tarfile.TarError):
                code, data = self._exec(node.name, ["tar", "-c", "-C", LOG_DIR, "."])
                if code != 0:
                    continue
                target = dest / node.name
                target.mkdir(parents=True, exist_ok=True)
                with tarfile.open(fileobj=io.BytesIO(data)) as tar:
                    tar.extractall(target, filter="data")

    # ---- reaching a node -------------------------------------------------------------

    def _host(self, name: str) -> SshHost:
        return self.hosts[self.nodes.index(self.node(name))]

    def _connection(self, name: str) -> paramiko.SSHClient:
        host = self._host(name)
        with self._lock:
            connection = self._connections.get(host.host)
            transport = connection.get_transport() if connection else None
            if connection is None or transport is None or not transport.is_active():
                connection = paramiko.SSHClient()
                self._load_host_keys(connection, host)
                connection.set_missing_host_key_policy(host_key_policy(host))
                try:
                    connection.connect(
                        host.host,
                        port=host.port,
                        username=host.user,
                        key_filename=host.key or None,
                        timeout=CONNECT_TIMEOUT_S,
                        banner_timeout=CONNECT_TIMEOUT_S,
                        auth_timeout=CONNECT_TIMEOUT_S,
                    )
                except paramiko.BadHostKeyException as exc:
                    raise UserError(
                        f"the host key of {host} ({name}) is not the one recorded in "
                        f"{host.known_hosts}: {exc}; if the host was re-created, remove the "
                        f"old key (ssh-keygen -R {host.host} -f {host.known_hosts})"
                    ) from exc
                except paramiko.SSHException as exc:
                    if "not found in known_hosts" not in str(exc):
                        raise UserError(f"cannot ssh to {host} ({name}): {exc}") from exc
                    raise UserError(
                        f"the host key of {host} ({name}) is not in {host.known_hosts}; add it "
                        f"(ssh-keyscan -p {host.port} {host.host} >> {host.known_hosts}, after "
                        f'checking it) or set host_keys = "accept-new" in {self.inventory}'
                    ) from exc
                except OSError as exc:
                    raise UserError(
                        f"cannot ssh to {host} ({name}): {exc}; check the inventory "
                        f"{self.inventory} (host, port, user, key) and that sshd runs there"
                    ) from exc
                self._connections[host.host] = connection
            return connection

    @staticmethod
    def _load_host_keys(connection: paramiko.SSHClient, host: SshHost) -> None:
        """The system's and the host's known_hosts; with accept-new, a missing file is
        created (mode 600) so that the accepted key is recorded there."""
        with contextlib.suppress(OSError):
            connection.load_system_host_keys("/etc/ssh/ssh_known_hosts")
        known = Path(host.known_hosts).expanduser()
        if host.host_keys == "accept-new" and not known.exists():
            known.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            known.touch(mode=0o600)
        if known.exists():
            try:
                connection.load_host_keys(str(known))
            except (OSError, paramiko.SSHException) as exc:
                raise UserError(f"cannot read the known_hosts file {known}: {exc}") from exc

    def _exec(self, name: str, argv: list[str], stdin: bytes = b"") -> tuple[int, bytes]:
        """Run `argv` on the node as root (sudo -n for another user), feeding `stdin`;
        (exit code, stdout and stderr as bytes)."""
        try:
            channel = self._channel(name, argv)
            with channel:
                channel.settimeout(COMMAND_TIMEOUT_S)
                if stdin:
                    channel.sendall(stdin)
                channel.shutdown_write()
                output = bytearray()
                while chunk := channel.recv(1 << 16):
                    output += chunk
                return channel.recv_exit_status(), bytes(output)
        except (paramiko.SSHException, OSError) as exc:
            raise UserError(f"ssh to {self._host(name)} ({name}) failed: {exc}") from exc

    def _channel(self, name: str, argv: list[str]) -> paramiko.Channel:
        """A session channel running `argv` on the node as root (sudo -n for another
        user), stderr merged into stdout."""
        command = shlex.join(argv)
        if self._host(name).user != "root":
            command = f"sudo -n -- {command}"
        transport = self._connection(name).get_transport()
        assert transport is not None
        channel = transport.open_session(timeout=CONNECT_TIMEOUT_S)
        try:
            channel.set_combine_stderr(True)
            channel.exec_command(command)
        except BaseException:
            channel.close()
            raise
        return channel

    def runs_unstopped(self, name: str) -> bool:
        """Whether the node's process runs and is not stopped: its kernel state, read by
        `ps` over the open connection (a supervisor status would start Python on the
        host, and a fault triggered by a probe waits for the answer)."""
        code, state = self._run(name, ["sh", "-c", PROCESS_STATE])
        return code == 0 and unstopped_state(state.strip())

    def stream(self, name: str, argv: list[str]) -> ChannelStream:
        """`argv` in an ssh channel left open (closing the stream closes the channel and
        so the command's standard input)."""
        try:
            return ChannelStream(self._channel(name, argv))
        except (paramiko.SSHException, OSError) as exc:
            raise UserError(f"ssh to {self._host(name)} ({name}) failed: {exc}") from exc

    def _run(self, name: str, argv: list[str]) -> tuple[int, str]:
        code, output = self._exec(name, argv)
        return code, output.decode(errors="replace")

    def _check(self, node: Node, argv: list[str], stdin: bytes = b"") -> None:
        code, output = self._exec(node.name, argv, stdin)
        if code != 0:
            raise UserError(
                f"on {self._host(node.name)} ({node.name}) `{shlex.join(argv)[:200]}` failed "
                f"(exit {code}): {output.decode(errors='replace').strip()[-1500:]}"
            )

    @classmethod
    def host_runs(
        cls, hosts: list[SshHost]
    ) -> tuple[dict[str, tuple[str, list[SshHost]]], dict[str, UserError]]:
        """{run id: (owner, its hosts)} of the runs whose nodes run on `hosts`, read from
        each host's RUN_MARKER (nodes running without a marker are run UNMARKED, owner
        unknown), and {host: why} of the hosts that could not be reached."""

        def read(cluster: SshCluster, node: Node) -> str | UserError:
            try:
                return cluster._run(node.name, ["sh", "-c", READ_MARKER])[1]
            except UserError as exc:
                return exc

        runs: dict[str, tuple[str, list[SshHost]]] = {}
        unreachable: dict[str, UserError] = {}
        for host, marker in zip(hosts, cls._on_hosts(hosts, read), strict=True):
            if isinstance(marker, UserError):
                unreachable[str(host)] = marker
            elif marker:
                run, _, owner = marker.strip().partition(" ")
                runs.setdefault(run or UNMARKED, (owner, []))[1].append(host)
        return runs, unreachable

    @classmethod
    def reset_hosts(cls, hosts: list[SshHost], run_id: str | None = None) -> None:
        """Stop the nodes on `hosts` and delete their state (`bkchaos gc`): every node
        there, or with `run_id` only where the host is still that run's."""
        script = teardown_script(None if run_id in (None, UNMARKED) else run_id)

        def reset(cluster: SshCluster, node: Node) -> None:
            cluster._exec(node.name, ["sh", "-c", script])

        cls._on_hosts(hosts, reset)

    @classmethod
    def _on_hosts(cls, hosts: list[SshHost], action: Callable[[SshCluster, Node], T]) -> list[T]:
        """`action` for a node on each host at once, through one throw-away cluster."""
        nodes = [Node(f"h{i}", "client", h.host, 0) for i, h in enumerate(hosts, 1)]
        cluster = cls(Path("."), hosts=hosts, nodes=nodes)
        try:
            with ThreadPoolExecutor(max_workers=max(1, min(8, len(nodes)))) as pool:
                return list(pool.map(lambda node: action(cluster, node), nodes))
        finally:
            cluster.down_connections()

    def down_connections(self) -> None:
        for connection in self._connections.values():
            connection.close()
        self._connections.clear()

    def _status_extras(self) -> dict:
        return {"inventory": self.inventory}

    def _node_extras(self, node: Node) -> dict:
        return {"ssh": str(self._host(node.name))}

    @classmethod
    def _revive(cls, state: dict[str, Any]) -> dict[str, Any]:
        return {**state, "hosts": [SshHost(**h) for h in state.get("hosts", [])]}
