"""`bkchaos bench bookie`: one real bookie on loopback against the echo baseline.

Both servers run as their own processes and are driven by the same pipelined load: 1 KiB
entries with 1, 8 and 64 adds in flight. The bookie journals with fsync on (its default),
so its figures include real group-commit durability; the echo server only frames.
Every level is bounded by an add count and a time cap, so the benchmark always ends.
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from bookie_image.bookie.service import STATS_INTERVAL_S
from bookie_image.protocol import (
    NEED_DATA,
    AddRequest,
    AddResponse,
    Connection,
    DigestType,
    LedgerId,
    Role,
    Status,
    encode_entry,
    master_key_for,
)
from harness.runtime.local import LocalCluster
from harness.runtime.process import free_port, stop_pid

ENTRY_SIZE = 1024
PASSWORD = b"bench"


@dataclass
class LevelResult:
    """The figures for one server at one in-flight level."""

    in_flight: int
    adds: int
    seconds: float
    adds_per_s: float
    p50_ms: float
    p99_ms: float
    fsyncs_per_s: float | None = None


async def drive(
    host: str, port: int, ledger: int, in_flight: int, count: int, time_cap: float
) -> tuple[int, float, list[float]]:
    """Send up to `count` adds keeping `in_flight` outstanding; (acked, seconds, latencies)."""
    key = master_key_for(PASSWORD)
    ledger_id = LedgerId(0, ledger)
    payload = os.urandom(ENTRY_SIZE)
    conn = Connection(Role.CLIENT)
    reader, writer = await asyncio.open_connection(host, port)
    sent_at: dict[int, float] = {}
    latencies: list[float] = []
    next_entry = 0

    def request(entry_id: int) -> bytes:
        entry = encode_entry(
            ledger_id,
            entry_id,
            entry_id - 1,
            (entry_id + 1) * ENTRY_SIZE,
            payload,
            DigestType.CRC32C,
            key,
        )
        sent_at[entry_id] = time.perf_counter()
        return conn.send(AddRequest(entry_id, key, entry))

    start = time.perf_counter()
    deadline = start + time_cap
    first = min(in_flight, count)
    writer.write(b"".join(request(i) for i in range(first)))
    next_entry = first
    acked = 0
    try:
        while acked < next_entry:
            data = await asyncio.wait_for(reader.read(1 << 16), timeout=30)
            if not data:
                raise ConnectionError(f"server on port {port} closed the connection")
            conn.receive_data(data)
            out = []
            now = time.perf_counter()
            while (event := conn.next_event()) is not NEED_DATA:
                if not isinstance(event, AddResponse) or event.status != Status.EOK:
                    raise RuntimeError(f"unexpected reply during benchmark: {event}")
                latencies.append(now - sent_at.pop(event.request_id))
                acked += 1
                if next_entry < count and now < deadline:
                    out.append(request(next_entry))
                    next_entry += 1
            if out:
                writer.write(b"".join(out))
    finally:
        writer.close()
    return acked, time.perf_counter() - start, latencies


def _level(
    name_port: tuple[str, int], ledger: int, in_flight: int, count: int, time_cap: float
) -> LevelResult:
    acked, seconds, latencies = asyncio.run(drive(*name_port, ledger, in_flight, count, time_cap))
    quantiles = statistics.quantiles(latencies, n=100) if len(latencies) > 1 else [0.0] * 99
    return LevelResult(
        in_flight,
        acked,
        round(seconds, 3),
        round(acked / seconds, 1),
        round(quantiles[49] * 1e3, 3),
        round(quantiles[98] * 1e3, 3),
    )


def _fsync_count(log: Path) -> int | None:
    """The bookie's journal fsync counter once it is idle, from its last `journal-stats` line.

    The bookie logs the counter within one stats interval of a change, so after two quiet
    intervals the last line is exact (and the first line exists even before any load).
    """
    time.sleep(2 * STATS_INTERVAL_S + 0.1)
    count = None
    for line in log.read_text(errors="replace").splitlines():
        if '"journal-stats"' in line:
            try:
                count = json.loads(line).get("fsyncs")
            except ValueError:
                continue
    return count


def run(levels: tuple[int, ...] = (1, 8, 64), adds: int = 20_000, time_cap: float = 15.0) -> dict:
    """Measure the echo server and a real bookie side by side; return the figures."""
    results: dict[str, list[dict]] = {"echo": [], "bookie": []}
    with tempfile.TemporaryDirectory(prefix="bkchaos-bench-") as tmp:
        port = free_port()
        echo = subprocess.Popen(
            [sys.executable, "-m", "harness.bench.echo", str(port)],
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            if echo.stdout is None or echo.stdout.readline().strip() != "ready":
                raise RuntimeError("the echo server did not start")
            for i, k in enumerate(levels):
                results["echo"].append(
                    asdict(_level(("127.0.0.1", port), i + 1, k, adds, time_cap))
                )
        finally:
            stop_pid(echo.pid)
        cluster = LocalCluster(Path(tmp) / "cluster", bookie_count=1).up()
        try:
            node = cluster.bookies[0]
            for i, k in enumerate(levels):
                before = _fsync_count(node.log_path)
                level = _level((node.host, node.port), 1000 + i, k, adds, time_cap)
                after = _fsync_count(node.log_path)
                if before is not None and after is not None:
                    level.fsyncs_per_s = round((after - before) / level.seconds, 1)
                results["bookie"].append(asdict(level))
        finally:
            cluster.down()
    top = levels.index(max(levels))
    ratio = results["bookie"][top]["adds_per_s"] / results["echo"][top]["adds_per_s"]
    return {
        "entry_size": ENTRY_SIZE,
        "fsync": True,
        "levels": list(levels),
        "echo": results["echo"],
        "bookie": results["bookie"],
        "ratio_at_max_in_flight": round(ratio, 3),
        "target_ratio": 0.3,
        "cpus": os.cpu_count(),
    }
