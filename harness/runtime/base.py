"""What every runtime's cluster offers, so nemeses and the CLI need not know which one runs.

Exactly the lifecycle LocalCluster (harness.runtime.local) and DockerCluster
(harness.runtime.docker) share; node names are "zk1", "b1"…; `status()` returns the
endpoints JSON that `bkchaos cluster status --json` prints.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Protocol

STATE_FILE = "cluster.json"
"""Where a cluster describes itself, so a later `bkchaos cluster …` process can find it."""


def save_state(state_dir: Path, state: dict[str, Any]) -> None:
    """Write `cluster.json` atomically: a reader never sees half a file."""
    tmp = state_dir / (STATE_FILE + ".tmp")
    tmp.write_text(json.dumps(state, indent=2))
    tmp.replace(state_dir / STATE_FILE)


def unstopped(pid: int | None, state: str | None) -> bool:
    """Whether a process of that pid and kernel state runs and is not stopped (SIGSTOP)
    or a zombie: what a fault triggered by a probe may hit."""
    return pid is not None and unstopped_state(state)


def unstopped_state(state: str | None) -> bool:
    """Whether a kernel state as `ps` shows it (`S`, `Ss`, `T`, `Z+`…) is a running,
    not stopped, not zombie process's."""
    return bool(state) and state[:1] not in ("Z", "T")


class Cluster(Protocol):
    def up(self) -> Cluster: ...

    def start(self, name: str, wait: bool = True) -> Any: ...

    def stop(self, name: str) -> None: ...

    def kill(self, name: str) -> int: ...

    def pause(self, name: str) -> None: ...

    def resume(self, name: str) -> None: ...

    def status(self) -> dict: ...

    def down(self) -> None: ...
