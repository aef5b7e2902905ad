"""Listen ports for local nodes: outside the kernel's ephemeral range, never handed out twice."""

from __future__ import annotations

from harness.runtime.process import ephemeral_port_range, free_port


def test_listen_ports_avoid_the_ephemeral_range_and_are_not_repeated() -> None:
    low, high = ephemeral_port_range()
    ports = [free_port() for _ in range(50)]
    assert len(set(ports)) == len(ports)
    assert not any(low <= port <= high for port in ports)
