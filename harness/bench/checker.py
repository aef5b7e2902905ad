"""`bkchaos bench checker`: the full check against the stdlib's JSON parse of the history.

Both are timed in fresh child processes, as CPU seconds measured inside the child around
the work only (interpreter start and imports excluded), alternately `repeat` times, and
the fastest run of each counts: other load on the machine disturbs that least. Peak
memory is the check child's maximum resident set size (`wait4` rusage, ru_maxrss),
interpreter included.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import msgspec

TARGET_RATIO = 1.5


def write_history(
    path: Path, ops: int, ledgers: int, read_fraction: float, seed: int, epoch_ops: int = 0
) -> int:
    """Write a valid synthetic history, op by op (memory bounded by one epoch); returns
    its size in bytes. `epoch_ops` > 0 writes it as epochs of that many ops, each with
    fresh ledgers and streams closed-read at its end (a soak's shape); 0: one epoch."""
    from checkers import synthesize

    per_epoch = epoch_ops or ops
    encode = msgspec.json.Encoder().encode
    with open(path, "wb") as fh:
        for op in synthesize(
            seed,
            ops=per_epoch,
            epochs=max(1, ops // per_epoch),
            ledgers=ledgers,
            streams=ledgers // 2,
            processes=10,
            read_fraction=read_fraction,
            rollover=0.0,
        ):
            fh.write(encode(op) + b"\n")
    return path.stat().st_size


def _child(mode: str, path: Path) -> dict[str, Any]:
    """Run one measurement in a fresh interpreter; add its peak RSS from rusage."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "harness.bench.checker", mode, str(path)],
        stdout=subprocess.PIPE,
    )
    out = proc.stdout.read()
    proc.stdout.close()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise RuntimeError(f"bench child {mode!r} exited {proc.returncode}")
    figures = json.loads(out)
    figures["peak_rss_mib"] = round(usage.ru_maxrss / 1024, 1)  # Linux: KiB
    return figures


def run(
    ops: int = 1_000_000,
    ledgers: int = 50,
    read_fraction: float = 0.01,
    seed: int = 1,
    repeat: int = 2,
    epoch_ops: int = 0,
) -> dict[str, Any]:
    """Generate, parse, check; return the figures docs/performance.md records."""
    with tempfile.TemporaryDirectory(prefix="bkchaos-bench-") as tmp:
        path = Path(tmp) / "history.jsonl"
        started = time.perf_counter()
        size = write_history(path, ops, ledgers, read_fraction, seed, epoch_ops)
        generated = time.perf_counter() - started
        runs = [(_child("json", path), _child("check", path)) for _ in range(repeat)]
    parse = min((p for p, _ in runs), key=lambda f: f["cpu_seconds"])
    check = min((c for _, c in runs), key=lambda f: f["cpu_seconds"])
    return {
        "ops": parse["lines"],
        "ledgers": ledgers,
        "epoch_ops": epoch_ops or ops,
        "read_fraction": read_fraction,
        "history_mib": round(size / 2**20, 1),
        "generate_seconds": round(generated, 2),
        "json_parse": parse,
        "check": check,
        "ratio": round(check["cpu_seconds"] / parse["cpu_seconds"], 3),
        "target_ratio": TARGET_RATIO,
        "repeat": repeat,
        "timing": "best CPU seconds inside each child; peak memory: child ru_maxrss",
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
    }


def _measure(mode: str, path: str) -> dict[str, Any]:
    """The child's side: do the work once, report CPU and wall seconds."""
    cpu, wall = time.process_time(), time.perf_counter()
    if mode == "json":
        lines = 0
        with open(path, "rb") as fh:
            for line in fh:
                json.loads(line)
                lines += 1
        extra: dict[str, Any] = {"lines": lines}
    else:
        from checkers import check

        result = check(path)
        graph = result["checkers"]["graph"]
        extra = {
            "valid": result["valid"],
            "graph_nodes": graph.get("nodes"),
            "graph_window_nodes": graph.get("window_nodes"),
        }
    return {
        "cpu_seconds": round(time.process_time() - cpu, 3),
        "wall_seconds": round(time.perf_counter() - wall, 3),
        **extra,
    }


if __name__ == "__main__":
    print(json.dumps(_measure(sys.argv[1], sys.argv[2])))
