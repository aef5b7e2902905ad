"""The image and the docker runtime, for real: build from scratch, containers, supervisor.

The image is built once per session (a fresh machine pays debootstrap once; later runs
reuse the cache); every cluster is removed by label at the end, and the last tests prove
that nothing labelled with a run survives SIGTERM (`down`, and SIGKILL followed by `gc`:
test_docker_chaos.py, through `bkchaos`).
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import docker
import pytest

from bookie_image.image.build import (
    build_image,
)
from bookie_image.image.follow import READY
from harness.runtime.docker import RUN_LABEL, DockerCluster
from harness.runtime.supervised import NodeStream
from harness.runtime.zookeeper import four_letter_word
from tests.helpers.cli import BKCHAOS
from tests.helpers.docker import labelled

pytestmark = pytest.mark.timeout(900)


def container_ip(cluster: DockerCluster, name: str) -> tuple[str, str]:
    container = cluster.client.containers.get(f"{cluster.network_name}-{name}")
    networks = container.attrs["NetworkSettings"]["Networks"]
    return container.id, networks[cluster.network_name]["IPAddress"]


# ---- the image ---------------------------------------------------------------------------


def test_cached_build_reuses_everything(
    client: docker.DockerClient, image: str, source_snapshot: Path
) -> None:
    again = build_image(client, root=source_snapshot)
    assert again.tag == image
    assert set(again.cached) == set(again.seconds), again  # every step reused, none rebuilt


def test_image_has_every_role_tool(client: docker.DockerClient, image: str) -> None:
    script = (
        "java -version 2>&1 | head -1; python --version; ls /usr/share/java/zookeeper.jar; "
        "ls /usr/lib/*/faketime/libfaketime.so.1; "
        "for t in iptables tc sshd ps; do command -v $t; done; "
        "python -c 'import bookie_image.bookie, kazoo' && echo imports-ok"
    )
    output = client.containers.run(
        image, ["-c", script], entrypoint="sh", remove=True, labels={RUN_LABEL: "image-test"}
    ).decode()
    assert 'version "17' in output and "Python 3.11" in output, output
    for tool in ("zookeeper.jar", "libfaketime.so.1", "iptables", "tc", "sshd", "ps"):
        assert f"/{tool}\n" in output, output
    assert "imports-ok" in output, output


# ---- the cluster -------------------------------------------------------------------------


def test_cluster_up_serves_zookeeper_and_registers_bookies(cluster: DockerCluster) -> None:
    state = cluster.status()
    assert state["runtime"] == "docker" and state["zk_serving"]
    assert [b["name"] for b in state["bookies"]] == ["b1", "b2", "b3"]
    assert all(b["alive"] and b["registered"] for b in state["bookies"]), state
    prefix = state["subnet"].rsplit(".", 1)[0]
    assert [b["ip"] for b in state["bookies"]] == [f"{prefix}.{i}" for i in (11, 12, 13)]
    assert state["zk"] == f"{prefix}.2:2181"
    assert state["zk_published"].startswith("127.0.0.1:")  # never on other interfaces
    for node in ("zk1", "b1", "b2", "b3"):
        assert container_ip(cluster, node)[1] == cluster.node(node).ip
    found = labelled(cluster.client, cluster.run_id)
    assert (len(found["containers"]), len(found["networks"]), len(found["volumes"])) == (4, 1, 4)


def test_containers_have_net_admin(cluster: DockerCluster) -> None:
    code, output = cluster.exec("b1", ["iptables", "-L", "INPUT", "-n"])
    assert code == 0, output


def test_kill_and_restart_keep_the_container_its_ip_and_data(cluster: DockerCluster) -> None:
    before = container_ip(cluster, "b2")
    assert cluster.exec("b2", ["touch", "/var/lib/bkchaos/marker"])[0] == 0
    pid = cluster.kill("b2")
    assert cluster.exec("b2", ["kill", "-0", str(pid)])[0] != 0  # proven gone
    b2 = next(b for b in cluster.status()["bookies"] if b["name"] == "b2")
    assert (b2["alive"], b2["state"], b2["pid"]) == (False, "exited", None)
    cluster.start("b2")  # waits for a registration by the new process's session
    after = next(b for b in cluster.status()["bookies"] if b["name"] == "b2")
    assert after["alive"] and after["registered"] and after["pid"] != pid
    assert container_ip(cluster, "b2") == before
    assert cluster.exec("b2", ["test", "-f", "/var/lib/bkchaos/marker"])[0] == 0
    assert cluster.exec("b2", ["cat", "/run/bkchaos/pid"]) == (0, str(after["pid"]))


def test_pause_resume_and_graceful_stop(cluster: DockerCluster) -> None:
    """Also what a fault triggered by a probe reads of its target (`runs_unstopped`, off
    the engine's process list) agrees with the supervisor at each step."""
    assert cluster.runs_unstopped("b3")
    cluster.pause("b3")
    assert cluster.status()["bookies"][2]["state"] == "paused"
    assert not cluster.runs_unstopped("b3")
    cluster.resume("b3")
    assert cluster.runs_unstopped("b3")
    cluster.stop("b3")
    assert cluster.status()["bookies"][2]["state"] == "stopped"
    assert not cluster.runs_unstopped("b3")
    cluster.start("b3")
    assert cluster.status()["bookies"][2]["registered"]
    assert cluster.runs_unstopped("b3")


def test_a_log_follower_streams_wanted_lines_and_ends_with_its_stream(
    cluster: DockerCluster,
) -> None:
    """The follower a run with triggered faults starts on each node
    (harness/runtime/probe_tail.py): READY, then only the new lines holding a needle, as
    they are written; closing the stream ends it on the node."""
    log, needle = "/tmp/follow-test.log", '"probe": "wanted"'
    assert cluster.exec("b1", ["sh", "-c", f"echo 'written before' > {log}"])[0] == 0
    stream = cluster.stream("b1", [cluster.python, "-m", "bookie_image.image.follow", log, needle])
    try:
        assert _stream_lines(stream, 1) == [READY.rstrip()]
        lines = [f'{{"probe": "{p}"}}' for p in ("other", "wanted")]
        script = "".join(f"echo '{line}' >> {log}; " for line in lines)
        assert cluster.exec("b1", ["sh", "-c", script])[0] == 0
        assert _stream_lines(stream, 1) == [lines[1].encode()]
        assert _followers(cluster) == 1
    finally:
        stream.close()
    deadline = time.monotonic() + 20
    while _followers(cluster) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _followers(cluster) == 0


def _stream_lines(stream: NodeStream, count: int, timeout: float = 30) -> list[bytes]:
    """The next `count` lines of `stream`, read within `timeout` seconds."""
    data, deadline = b"", time.monotonic() + timeout
    while data.count(b"\n") < count and time.monotonic() < deadline:
        if select.select([stream], [], [], max(0.0, deadline - time.monotonic()))[0]:
            chunk = stream.recv()
            assert chunk is not None, data
            data += chunk
    return data.splitlines()


def _followers(cluster: DockerCluster) -> int:
    _, out = cluster.exec("b1", ["pgrep", "-fc", "bookie_image.image.[f]ollow"])
    return int(out.strip() or 0)


def test_a_zookeeper_ensemble_keeps_serving_without_one_server(image: str, tmp_path: Path) -> None:
    """`--zk 3`: three servers that elect a leader; the bookies register through the
    ensemble and stay registered, and a bookie restarts, with zk1 killed."""
    with DockerCluster(tmp_path, bookie_count=2, zk_count=3, image=image).running() as cluster:
        assert [n.name for n in cluster.with_role("zk")] == ["zk1", "zk2", "zk3"]
        modes = sorted(
            four_letter_word(*n.published_address, "srvr").split("Mode: ")[1].split()[0]
            for n in cluster.with_role("zk")
        )
        assert modes == ["follower", "follower", "leader"]
        assert cluster.zk.count(",") == 2 and cluster.zk_published.count(",") == 2
        cluster.kill("zk1")
        state = cluster.status()
        assert state["zk_serving"] and all(b["registered"] for b in state["bookies"]), state
        cluster.kill("b1")
        cluster.start("b1")  # registers through zk2 / zk3
        assert all(b["registered"] for b in cluster.status()["bookies"])


# ---- a controller that dies ----------------------------------------------------------------

CONTROLLER = """
import sys, time
from pathlib import Path
from harness.runtime.docker import DockerCluster
cluster = DockerCluster(Path(sys.argv[1]), bookie_count=1, image=sys.argv[2])
with cluster.running():
    print(cluster.run_id, flush=True)
    time.sleep(300)
"""


def start_controller(image: str, state_dir: Path) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", CONTROLLER, str(state_dir), image],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], 120)
    if not ready:
        proc.kill()
        pytest.fail("the controller did not bring its cluster up within 120s")
    run_id = proc.stdout.readline().strip()
    assert run_id, "the controller exited before its cluster was up"
    return proc, run_id


def test_sigterm_to_the_controller_tears_down(
    client: docker.DockerClient, image: str, tmp_path: Path
) -> None:
    proc, run_id = start_controller(image, tmp_path)
    assert labelled(client, run_id)["containers"]
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=60)
    assert all(not v for v in labelled(client, run_id).values())


def test_unreachable_engine_is_a_user_error() -> None:
    env = {**os.environ, "DOCKER_HOST": "unix:///nonexistent/docker.sock"}
    result = subprocess.run([*BKCHAOS, "gc"], capture_output=True, text=True, env=env)
    assert result.returncode == 254
    assert "start it" in result.stderr and "--runtime local" in result.stderr


def test_a_missing_image_is_a_user_error_never_a_pull(
    client: docker.DockerClient, tmp_path: Path
) -> None:
    up = [*BKCHAOS, "cluster", "up", "--runtime", "docker", "--image", "bkchaos:absent"]
    result = subprocess.run([*up, "--dir", str(tmp_path)], capture_output=True, text=True)
    assert result.returncode == 254, result.stderr
    assert "no image bkchaos:absent" in result.stderr and "bkchaos image build" in result.stderr
