"""The simulation's ZooKeeper against a real one: the same script, the same outcomes.

The client's correctness rests on these semantics (compare-and-set on znode versions,
sequence numbers that are never reused, ephemeral nodes that die with their session), so
the in-memory service is pinned to what ZooKeeper itself answers, not to our reading of it.
Sessions of bookies cut off by a simulated fault: tests/sim/test_sim_zk_sessions.py.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kazoo.client import KazooClient

from harness.sim.loop import SimLoop
from harness.sim.zk import SimZooKeeper


def _outcome(call: Callable[[], Any], root: str) -> Any:
    """A comparable record of one call: its result (paths relative to the root, stats as
    the fields the product reads) or the name of the error it raised."""
    try:
        result = call()
    except Exception as exc:
        return type(exc).__name__
    if isinstance(result, str):
        return result.removeprefix(root)
    if isinstance(result, tuple) and len(result) == 2:  # get(): (data, stat)
        data, stat = result
        return data, stat.version, stat.numChildren, bool(stat.ephemeralOwner)
    if hasattr(result, "version"):  # a stat
        return result.version, result.numChildren
    return result


def _script(first: Any, second: Any, root: str) -> list[Any]:
    """Operations the product performs, plus their edge cases, on two sessions."""
    steps: list[Callable[[], Any]] = [
        lambda: first.ensure_path(root) and None,  # kazoo returns True or the path
        lambda: first.create(f"{root}/a", b"x"),
        lambda: first.create(f"{root}/a", b"again"),
        lambda: first.get(f"{root}/a"),
        lambda: first.set(f"{root}/a", b"y", 0),
        lambda: first.set(f"{root}/a", b"z", 0),
        lambda: first.set(f"{root}/a", b"z", -1),
        lambda: first.delete(f"{root}/a", version=1),
        lambda: first.get(f"{root}/a"),
        lambda: first.create(f"{root}/idgen/ID-", b"", sequence=True, makepath=True),
        lambda: first.delete(f"{root}/idgen/ID-0000000000"),
        lambda: first.create(f"{root}/idgen/ID-", b"", sequence=True),
        lambda: first.create(f"{root}/idgen/plain", b""),
        lambda: first.create(f"{root}/idgen/ID-", b"", sequence=True),
        lambda: first.delete(f"{root}/idgen"),
        lambda: first.create(f"{root}/no/parent", b""),
        lambda: first.create(f"{root}/available/b1:3181", b"r", ephemeral=True, makepath=True),
        lambda: first.create(f"{root}/available/b1:3181/child", b""),
        lambda: second.get(f"{root}/available/b1:3181"),
        lambda: second.create(f"{root}/available/b1:3181", b"r", ephemeral=True),
        lambda: sorted(second.get_children(f"{root}/available")),
        lambda: sorted(second.get_children(root)),
        lambda: second.delete(f"{root}/a", version=2),
        lambda: second.get(f"{root}/a"),
        lambda: second.delete(f"{root}/missing"),
        first.stop,
        lambda: second.get_children(f"{root}/available"),
        lambda: second.exists(f"{root}/available/b1:3181"),
    ]
    return [_outcome(step, root) for step in steps]


def test_same_outcomes_as_real_zookeeper(zookeeper: str, ledgers_root: str) -> None:
    real = [KazooClient(zookeeper), KazooClient(zookeeper)]
    for client in real:
        client.start()
    try:
        expected = _script(*real, root=ledgers_root)
    finally:
        for client in real:
            client.stop()
            client.close()
    server = SimZooKeeper(SimLoop())
    simulated = [server.client(), server.client()]
    for client in simulated:
        client.start()
    got = _script(*simulated, root=ledgers_root)
    assert [(i, g, e) for i, (g, e) in enumerate(zip(got, expected, strict=True)) if g != e] == []
    assert "NoChildrenForEphemeralsError" in expected and "BadVersionError" in expected
