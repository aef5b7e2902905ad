"""What the docker tier's tests look up in the engine and run inside its containers."""

from __future__ import annotations

import asyncio

import docker

from harness.runtime.docker import RUN_LABEL, DockerCluster

HOSTS = 5  # zk1, b1-b3, c1: the ssh hosts the docker tier's inventory fixture starts


def labelled(client: docker.DockerClient, run_id: str) -> dict[str, list]:
    label = {"label": f"{RUN_LABEL}={run_id}"}
    return {
        "containers": client.containers.list(all=True, filters=label),
        "networks": client.networks.list(filters=label),
        "volumes": client.volumes.list(filters=label),
    }


ADD_ONE = """
import asyncio, sys
from bookie_image.client import BookKeeper

async def main():
    async with BookKeeper(zk=sys.argv[1], ledgers_root=sys.argv[2]) as bk:
        size = int(sys.argv[3])
        lh = await bk.create_ledger(
            ensemble=size, write_quorum=size, ack_quorum=size, password=b"pw"
        )
        print(await lh.append(b"x"))

asyncio.run(asyncio.wait_for(main(), 8))
"""


def add_from(cluster: DockerCluster, node: str, ensemble: int = 2) -> tuple[int, str]:
    """A client running inside `node`'s container creates a ledger on `ensemble` bookies
    (every one must ack) and adds one entry."""
    argv = ["python", "-c", ADD_ONE, cluster.zk, cluster.ledgers_root, str(ensemble)]
    return cluster.exec(node, argv, 30)


SEND_ONCE = """
import socket, sys
server = socket.create_server(("", 7777))
server.settimeout(20)
conn, _ = server.accept()
conn.sendall(b"x" * int(sys.argv[1]))
conn.close()
"""

RECEIVE_ALL = """
import socket, sys, time
for _ in range(100):  # until the sender listens
    try:
        conn = socket.create_connection((sys.argv[1], 7777), timeout=20)
        break
    except OSError:
        time.sleep(0.1)
started, got = time.monotonic(), 0
while chunk := conn.recv(65536):
    got += len(chunk)
print(got, round(time.monotonic() - started, 3))
"""


async def transfer_s(cluster: DockerCluster, sender: str, receiver: str, size: int) -> float:
    """Seconds `receiver` takes to read `size` bytes that `sender` sends (its egress)."""
    ip = next(n.ip for n in cluster.nodes if n.name == sender)
    send = asyncio.to_thread(cluster.exec, sender, ["python", "-c", SEND_ONCE, str(size)], 30)
    receive = asyncio.to_thread(cluster.exec, receiver, ["python", "-c", RECEIVE_ALL, ip], 30)
    _, (code, out) = await asyncio.gather(send, receive)
    got, seconds = out.split()[-2:]
    assert code == 0 and int(got) == size, out
    return float(seconds)
