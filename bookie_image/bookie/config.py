"""Bookie configuration: a TOML file read into a frozen, validated dataclass.

Every error names the offending key and says what to do, because the bookie exits 254 on a
bad config without a traceback. Relative paths are resolved against the config file's
directory, so a launcher can write a self-contained config next to the data.

Keys (required first):

- ``port``: TCP port to serve on (1-65535).
- ``zk``: ZooKeeper connect string, e.g. ``"127.0.0.1:2181"``.
- ``journal_dir``: the journal's directory.
- ``ledger_dirs``: list of directories for entry logs (the index lives in the first).
  Every data dir must be distinct; each carries a cookie.
- ``bookie_id`` (``"host:port"``): the id in ZooKeeper and in ledger metadata.
- ``host`` (``"127.0.0.1"``): address to listen on.
- ``zk_ledgers_root`` (``"/ledgers"``): root of ``available/`` and ``cookies/``.
- ``journal_max_batch`` (512): most entries per journal write + fsync.
- ``journal_max_wait_ms`` (1): longest a batch waits for more requests to join.
- ``journal_fsync`` (true): false acknowledges without fsync (unsafe; for experiments).
- ``journal_file_bytes`` (64 MiB): a journal file is closed and the next one started once
  it holds this many bytes (BookKeeper's ``journalMaxSizeMB``).
- ``entry_log_bytes`` (256 MiB): the same for an entry log (BookKeeper's ``logSizeLimit``).
  Both are tunables, not limits: a batch or a checkpoint's flush is never split, so a file
  may end past them. The simulation sets them small so that its runs roll files.
- ``readonly_threshold`` (0.95): disk usage fraction at which the bookie turns read-only.
- ``checkpoint_interval_ms`` (1000): how often entries and ledger state are flushed to the
  entry logs and the index, after which the journal files before them are deleted.
- ``log_file`` (none: stderr): where the JSON event lines go.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .journal import FILE_BYTES
from .storage import LOG_BYTES


class ConfigError(Exception):
    """A bad configuration; the message names the key."""


@dataclass(frozen=True)
class BookieConfig:
    port: int
    zk: str
    journal_dir: Path
    ledger_dirs: tuple[Path, ...]
    host: str = "127.0.0.1"
    bookie_id: str = ""
    zk_ledgers_root: str = "/ledgers"
    journal_max_batch: int = 512
    journal_max_wait_ms: float = 1.0
    journal_fsync: bool = True
    journal_file_bytes: int = FILE_BYTES
    entry_log_bytes: int = LOG_BYTES
    readonly_threshold: float = 0.95
    checkpoint_interval_ms: float = 1000.0
    log_file: Path | None = None

    @property
    def data_dirs(self) -> tuple[Path, ...]:
        """Every directory that carries a cookie: the journal dir, then the ledger dirs."""
        return (self.journal_dir, *self.ledger_dirs)


_REQUIRED = ("port", "zk", "journal_dir", "ledger_dirs")
_KEYS = {
    "bookie_id",
    "host",
    "port",
    "zk",
    "zk_ledgers_root",
    "journal_dir",
    "ledger_dirs",
    "journal_max_batch",
    "journal_max_wait_ms",
    "journal_fsync",
    "journal_file_bytes",
    "entry_log_bytes",
    "readonly_threshold",
    "checkpoint_interval_ms",
    "log_file",
}


def _typed(raw: dict[str, Any], key: str, kind: type | tuple[type, ...], what: str) -> Any:
    value = raw[key]
    # bool is an int subclass; never accept it where a number is meant.
    if isinstance(value, bool) and bool not in (kind if isinstance(kind, tuple) else (kind,)):
        raise ConfigError(f"config key {key!r} must be {what}, got {value!r}")
    if not isinstance(value, kind):
        raise ConfigError(f"config key {key!r} must be {what}, got {value!r}")
    return value


def parse_config(raw: dict[str, Any], base: Path) -> BookieConfig:
    """Validate a parsed TOML table; `base` resolves relative paths."""
    unknown = sorted(set(raw) - _KEYS)
    if unknown:
        raise ConfigError(
            f"unknown config key {unknown[0]!r}; valid keys are: {', '.join(sorted(_KEYS))}"
        )
    for key in _REQUIRED:
        if key not in raw:
            raise ConfigError(f"config key {key!r} is required; add it to the config file")

    port = _typed(raw, "port", int, "an integer port 1-65535")
    if not 1 <= port <= 65535:
        raise ConfigError(f"config key 'port' must be 1-65535, got {port}")
    zk = _typed(raw, "zk", str, 'a ZooKeeper connect string such as "127.0.0.1:2181"')
    if not zk.strip():
        raise ConfigError("config key 'zk' is empty; give a connect string like '127.0.0.1:2181'")

    def path(key: str) -> Path:
        value = raw[key]
        if not isinstance(value, str) or not value:
            raise ConfigError(f"config key {key!r} must be a non-empty path string")
        return (base / value).resolve()

    journal_dir = path("journal_dir")
    dirs = raw["ledger_dirs"]
    if not isinstance(dirs, list) or not dirs or not all(isinstance(d, str) and d for d in dirs):
        raise ConfigError("config key 'ledger_dirs' must be a non-empty list of path strings")
    ledger_dirs = tuple((base / d).resolve() for d in dirs)
    every = (journal_dir, *ledger_dirs)
    if len(set(every)) != len(every):
        raise ConfigError(
            "config keys 'journal_dir' and 'ledger_dirs' must name distinct directories "
            "(each carries its own cookie)"
        )

    kwargs: dict[str, Any] = {}
    if "host" in raw:
        kwargs["host"] = _typed(raw, "host", str, "a host name or address")
    host = kwargs.get("host", "127.0.0.1")
    kwargs["bookie_id"] = f"{host}:{port}"
    if "bookie_id" in raw:
        bookie_id = _typed(raw, "bookie_id", str, "a string such as 'host:port'")
        if not bookie_id or "/" in bookie_id:
            raise ConfigError("config key 'bookie_id' must be non-empty and contain no '/'")
        kwargs["bookie_id"] = bookie_id
    if "zk_ledgers_root" in raw:
        root = _typed(raw, "zk_ledgers_root", str, "a znode path such as '/ledgers'")
        if not root.startswith("/") or (root.endswith("/") and root != "/"):
            raise ConfigError("config key 'zk_ledgers_root' must start with '/' and not end in '/'")
        kwargs["zk_ledgers_root"] = root
    if "journal_max_batch" in raw:
        batch = _typed(raw, "journal_max_batch", int, "a positive integer (entries)")
        if batch < 1:
            raise ConfigError("config key 'journal_max_batch' must be >= 1")
        kwargs["journal_max_batch"] = batch
    if "journal_max_wait_ms" in raw:
        wait = _typed(raw, "journal_max_wait_ms", (int, float), "a number of milliseconds >= 0")
        if wait < 0:
            raise ConfigError("config key 'journal_max_wait_ms' must be >= 0")
        kwargs["journal_max_wait_ms"] = float(wait)
    if "journal_fsync" in raw:
        kwargs["journal_fsync"] = _typed(raw, "journal_fsync", bool, "true or false")
    for key in ("journal_file_bytes", "entry_log_bytes"):
        if key in raw:
            size = _typed(raw, key, int, "a positive integer (bytes)")
            if size < 1:
                raise ConfigError(f"config key {key!r} must be >= 1 (bytes)")
            kwargs[key] = size
    if "readonly_threshold" in raw:
        threshold = _typed(raw, "readonly_threshold", (int, float), "a fraction in (0, 1]")
        if not 0 < threshold <= 1:
            raise ConfigError("config key 'readonly_threshold' must be a fraction in (0, 1]")
        kwargs["readonly_threshold"] = float(threshold)
    if "checkpoint_interval_ms" in raw:
        interval = _typed(
            raw, "checkpoint_interval_ms", (int, float), "a number of milliseconds > 0"
        )
        if interval <= 0:
            raise ConfigError("config key 'checkpoint_interval_ms' must be > 0")
        kwargs["checkpoint_interval_ms"] = float(interval)
    if "log_file" in raw:
        kwargs["log_file"] = path("log_file")
    return BookieConfig(
        port=port, zk=zk, journal_dir=journal_dir, ledger_dirs=ledger_dirs, **kwargs
    )


def load_config(file: Path) -> BookieConfig:
    """Read and validate a TOML config file."""
    try:
        raw = tomllib.loads(file.read_text())
    except FileNotFoundError:
        raise ConfigError(f"config file {file} does not exist; pass --config FILE.toml") from None
    except OSError as exc:
        raise ConfigError(f"cannot read config file {file}: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {file} is not valid TOML: {exc}") from None
    return parse_config(raw, file.resolve().parent)
