"""The docker runtime (DESIGN §5): every node in its own container with its own address.

One bridge network per run with a fixed /24 and static IPs (ZooKeeper zkN = .1+N, bookie
bN = .10+N, client agent cM = .100+M), NET_ADMIN in every container (iptables / tc for the
nemeses), the node's data on a named volume (it survives process restarts) and
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

import contextlib
import io
import ipaddress
import json
import os
import tarfile
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import docker
import docker.errors
from docker.models.containers import Container
from docker.types import EndpointConfig, IPAMConfig, IPAMPool

from harness.errors import UserError
from harness.runtime.base import STATE_FILE, unstopped_state
from harness.runtime.ownership import OWNER_LABEL, controller_id
from harness.runtime.supervised import (
    AGENT_PORT,
    BOOKIE_PORT,
    DATA_DIR,
    LOG_DIR,
    Node,
    SupervisedCluster,
    signals_deferred,
)

# Ryuk (testcontainers' reaper) would be pulled from a registry; this must be set before
# testcontainers reads its configuration at import.
os.environ["TESTCONTAINERS_RYUK_DISABLED"] = "true"
from testcontainers.core.container import DockerContainer

RUN_LABEL = "bkchaos.run"
NODE_LABEL = "bkchaos.node"
SUBNET_POOL = ipaddress.ip_network("172.29.0.0/16")  # one /24 of it per run
PUBLISHED_ROLES = ("zk", "client")
"""Roles whose service port the controller reaches, published on 127.0.0.1 only."""
MAX_BOOKIES, MAX_CLIENTS = 89, 150  # bookies at .11-.99, clients at .101-.250
EXEC_OUTPUT_DIR = "/tmp/bkchaos-exec"
EXEC_MARK = "bkchaos-exec-exit"
EXEC_READBACKS = 3
EXEC_KEEP_MINUTES = 5
"""How long an exec's output file stays on the node for a read-back (each exec deletes
older ones)."""


def exec_script(path: str) -> str:
    """The shell wrapper of every exec: run "$@", keep its output and exit code at `path`
    (the last line, after EXEC_MARK), print the file."""
    return (
        f"mkdir -p {EXEC_OUTPUT_DIR}; "
        f"find {EXEC_OUTPUT_DIR} -type f -mmin +{EXEC_KEEP_MINUTES} -delete 2>/dev/null; "
        f'{{ "$@"; printf "\\n{EXEC_MARK} %d\\n" "$?"; }} > {path} 2>&1; cat {path}'
    )


def split_exec_output(output: str) -> tuple[int, str] | None:
    """(exit code, output) from a wrapped exec's printed file; None if its end mark is
    missing (the output was lost or cut)."""
    body, mark, code = output.rpartition(f"\n{EXEC_MARK} ")
    code = code.removesuffix("\n")
    if not mark or not code.lstrip("-").isdigit():
        return None
    return int(code), body


def docker_client(timeout: int = 120) -> docker.DockerClient:
    """A connected client, or a UserError (exit 254) that says how to get one."""
    try:
        client = docker.from_env(timeout=timeout)
        client.ping()
    except docker.errors.DockerException as exc:
        raise UserError(
            f"cannot reach the Docker engine ({exc}); start it (e.g. `service docker start`) "
            "or use `--runtime local` or `--runtime ssh --inventory FILE`"
        ) from exc
    return client


def run_owners(client: docker.DockerClient) -> dict[str, str]:
    """{run id: owner} of every run with a container, network or volume labelled here
    (owner "" for a run labelled before owners were: it counts as gone only with --all)."""
    owners: dict[str, str] = {}
    label = {"label": RUN_LABEL}
    listed = [
        *client.containers.list(all=True, filters=label),
        *client.networks.list(filters=label),
        *client.volumes.list(filters=label),
    ]
    for thing in listed:
        labels = thing.attrs.get("Labels") or thing.attrs.get("Config", {}).get("Labels") or {}
        run = labels.get(RUN_LABEL)
        if run and not owners.get(run):
            owners[run] = labels.get(OWNER_LABEL, "")
    return owners


def remove_run(client: docker.DockerClient, run_id: str) -> dict[str, int]:
    """Remove every container, network and volume labelled with `run_id`; returns how
    many of each were removed."""
    label = {"label": f"{RUN_LABEL}={run_id}"}
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


class ExecStream:
    """A `docker exec`'s output as it comes (harness.runtime.supervised.NodeStream). With
    no tty, the engine sends stdout and stderr on one socket in frames (an 8-byte header:
    the stream, three zero bytes, the payload's length, big-endian); `recv` returns the
    payloads of the whole frames received so far."""

    def __init__(self, attached: Any) -> None:
        self.attached = attached  # docker-py's socket object: it keeps the response alive
        self.socket = getattr(attached, "_sock", attached)
        self.buffer = b""

    def fileno(self) -> int:
        return int(self.socket.fileno())

    def recv(self) -> bytes | None:
        chunk = self.socket.recv(1 << 16)
        if not chunk:
            return None
        self.buffer += chunk
        payloads = []
        while len(self.buffer) >= _FRAME_HEADER:
            end = _FRAME_HEADER + int.from_bytes(self.buffer[4:_FRAME_HEADER], "big")
            if len(self.buffer) < end:
                break
            payloads.append(self.buffer[_FRAME_HEADER:end])
            self.buffer = self.buffer[end:]
        return b"".join(payloads)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.attached.close()
            self.socket.close()


_FRAME_HEADER = 8


@dataclass
class DockerCluster(SupervisedCluster):
    """ZooKeeper (zk1), N bookies and M client agents, each in a container of one run's
    network.

    `state_dir` keeps `cluster.json` (so a later `bkchaos cluster …` process finds the run)
    and, after `down()`, each node's logs in `<node>/` (the local runtime's layout).
    `image` defaults to the tag of the current source tree, built (or reused) on `up()`.
    `extra_env` goes into every container (e.g. BKCHAOS_BUGS for the seeded bugs).
    """

    image: str = ""
    capabilities: list[str] = field(default_factory=lambda: ["NET_ADMIN"])
    """Added to every container: NET_ADMIN lets the nemeses use iptables and tc inside."""
    net_admin: bool = True
    """Whether iptables works in the containers (checked on `up`). Where the engine refuses
    NET_ADMIN, partitions fall back to `docker network disconnect` — isolating one node
    at a time, nothing finer — and packet faults are unavailable; the status says so."""
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex[:10])
    owner: str = ""
    """The controller that owns the run (ownership.controller_id, set on `up`), or
    DETACHED (`bkchaos cluster up`); a label on everything, read by `bkchaos gc`."""
    subnet: str = ""
    _client: docker.DockerClient | None = field(default=None, repr=False, compare=False)

    runtime: ClassVar[str] = "docker"

    # ---- lifecycle -------------------------------------------------------------------

    @property
    def client(self) -> docker.DockerClient:
        if self._client is None:
            self._client = docker_client()
        return self._client

    @property
    def network_name(self) -> str:
        return f"bkchaos-{self.run_id}"

    def up(self) -> DockerCluster:
        """Create the network and every node; return once ZooKeeper serves, every bookie
        is registered and every agent answers. On any failure, everything created so far
        is removed."""
        if not 0 <= self.bookie_count <= MAX_BOOKIES:
            raise UserError(f"--bookies must be 0..{MAX_BOOKIES}, got {self.bookie_count}")
        if not 0 <= self.client_count <= MAX_CLIENTS:
            raise UserError(f"--clients must be 0..{MAX_CLIENTS}, got {self.client_count}")
        self.owner = self.owner or controller_id()
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
        try:  # nothing can be pulled here: a missing image must not become a pull attempt
            self.client.images.get(self.image)
        except docker.errors.ImageNotFound:
            raise UserError(
                f"there is no image {self.image} in the Docker engine (nothing can be pulled); "
                "run `bkchaos image build`, or leave out --image to use the tree's own"
            ) from None
        try:
            network = self._create_network()
            hosts = list(network.hosts())
            self.nodes = [  # zk1… at .2, .3, …
                Node(name, role, str(hosts[i]), port)
                for i, (name, role, port) in enumerate(self.zk_names(), 1)
            ]
            self.nodes += [
                Node(f"b{i}", "bookie", str(hosts[9 + i]), BOOKIE_PORT)
                for i in range(1, self.bookie_count + 1)
            ]
            self.nodes += [
                Node(f"c{i}", "client", str(hosts[99 + i]), AGENT_PORT)
                for i in range(1, self.client_count + 1)
            ]
            self.save()
            self._start_in_order(self._create_node)
            self._check_net_admin(self.nodes[0])
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
                    labels={RUN_LABEL: self.run_id, OWNER_LABEL: self.owner},
                )
            except docker.errors.APIError as exc:
                if "overlap" in str(exc).lower():  # another run took it meanwhile
                    continue
                raise
            self.subnet = str(subnet)
            return subnet  # type: ignore[return-value]
        raise UserError(f"could not find a free subnet in {SUBNET_POOL}; run `bkchaos gc`")

    def _create_node(self, node: Node) -> None:
        labels = {RUN_LABEL: self.run_id, OWNER_LABEL: self.owner, NODE_LABEL: node.name}
        command, files = self._role_files(node)
        endpoint = EndpointConfig(
            self.client.api.api_version, ipv4_address=node.ip, aliases=[node.name]
        )
        container = (
            DockerContainer(self.image)
            .with_kwargs(  # a static IP is not in testcontainers' Network API: docker's own
                labels=labels,
                hostname=node.name,
                cap_add=list(self.capabilities),
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

    def _check_net_admin(self, node: Node) -> None:
        """Find out whether iptables works in the containers (NET_ADMIN granted)."""
        code, _ = self.exec(node.name, ["iptables", "-S", "INPUT"], timeout=20)
        if self.net_admin != (code == 0):
            self.net_admin = code == 0
            self.save()

    def disconnect(self, name: str) -> None:
        """Cut the node off the run's network (the partition fallback without NET_ADMIN)."""
        network = self.client.networks.get(self.network_name)
        network.disconnect(self._container(name), force=True)

    def reconnect(self, name: str) -> None:
        """Put a disconnected node back, with its own address and name."""
        node = self.node(name)
        network = self.client.networks.get(self.network_name)
        network.connect(self._container(name), ipv4_address=node.ip, aliases=[node.name])

    def down(self) -> None:
        """Collect the node logs into `state_dir/<node>/`, then remove every container, the
        network and the volumes of this run. Safe to call twice. SIGINT / SIGTERM wait
        until it is done: a second Ctrl-C must not cut a teardown short."""
        with signals_deferred():
            with contextlib.suppress(docker.errors.DockerException, OSError):
                self.collect_logs(self.state_dir)
            remove_run(self.client, self.run_id)

    # ---- reaching a node ----------------------------------------------------------------

    def _container(self, name: str) -> Container:
        try:
            return self.client.containers.get(f"{self.network_name}-{self.node(name).name}")
        except docker.errors.NotFound:
            raise UserError(
                f"{name}'s container is gone (run {self.run_id}); start a new cluster"
            ) from None

    def _run(self, name: str, argv: list[str]) -> tuple[int, str]:
        """`docker exec` as root in the node's container: (exit code, stdout and stderr).

        The engine now and then loses a short-lived exec's output (it runs before the
        attached stream is read: docker-py #2042, moby #27289), which made a proof or a
        supervisor reply look empty. So the command writes its output and exit code to a
        file on the node and prints it; a reply without the end mark is read back from
        the file (EXEC_READBACKS times)."""
        container = self._container(name)
        path = f"{EXEC_OUTPUT_DIR}/{uuid.uuid4().hex}"
        try:
            first = reply = container.exec_run(["sh", "-c", exec_script(path), "sh", *argv])
            for attempt in range(1 + EXEC_READBACKS):
                if attempt:
                    reply = container.exec_run(["cat", path])
                marked = split_exec_output(reply.output.decode(errors="replace"))
                if marked is not None:
                    return marked
        except docker.errors.APIError as exc:
            raise UserError(f"cannot run a command in {name}'s container: {exc}") from exc
        return first.exit_code, first.output.decode(errors="replace")

    def runs_unstopped(self, name: str) -> bool:
        """Whether the node's process runs and is not stopped, read off the engine's list
        of the container's processes (`docker top`: tens of milliseconds, where a
        supervisor status through `docker exec` takes hundreds on a loaded machine, and a
        fault triggered by a probe waits for the answer). The node's process is the child
        of the container's PID 1, the supervisor; an exec's processes have other parents."""
        container = self._container(name)  # freshly inspected: State.Pid is PID 1's here
        init = str(container.attrs["State"]["Pid"])
        try:
            listed = container.top(ps_args="-o pid,ppid,stat")["Processes"] or []
        except docker.errors.APIError as exc:
            raise UserError(f"cannot list the processes of {name}'s container: {exc}") from exc
        return any(ppid == init and unstopped_state(stat) for _, ppid, stat in listed)

    def stream(self, name: str, argv: list[str]) -> ExecStream:
        """`argv` in a `docker exec` whose standard input stays attached (closing the
        stream closes it), its output read off the exec's socket."""
        try:
            reply = self._container(name).exec_run(argv, stdin=True, socket=True)
        except docker.errors.APIError as exc:
            raise UserError(f"cannot run a command in {name}'s container: {exc}") from exc
        return ExecStream(reply.output)

    def collect_logs(self, dest: Path) -> None:
        """Copy each node's LOG_DIR to `dest/<node>/`."""
        for node in self.nodes:
            with contextlib.suppress(UserError, docker.errors.NotFound):
                stream, _ = self._container(node.name).get_archive(f"{LOG_DIR}/.")
                target = dest / node.name
                target.mkdir(parents=True, exist_ok=True)
                with tarfile.open(fileobj=io.BytesIO(b"".join(stream))) as tar:
                    tar.extractall(target, filter="data")

    def _status_extras(self) -> dict:
        return {
            "run_id": self.run_id,
            "network": self.network_name,
            "subnet": self.subnet,
            "image": self.image,
            "network_faults": (
                "iptables and tc in the containers (NET_ADMIN)"
                if self.net_admin
                else "isolation only, by docker network disconnect (NET_ADMIN refused)"
            ),
        }

    def _node_extras(self, node: Node) -> dict:
        return {"container": f"{self.network_name}-{node.name}"}
