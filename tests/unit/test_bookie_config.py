"""Bookie config validation: every error names the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from bookie_image.bookie.__main__ import main
from bookie_image.bookie.config import ConfigError, load_config, parse_config

BASE = {"port": 3181, "zk": "127.0.0.1:2181", "journal_dir": "j", "ledger_dirs": ["l1", "l2"]}


def test_defaults_and_relative_paths(tmp_path: Path) -> None:
    cfg = parse_config(dict(BASE), tmp_path)
    assert cfg.bookie_id == "127.0.0.1:3181"
    assert cfg.journal_dir == tmp_path / "j"
    assert cfg.ledger_dirs == (tmp_path / "l1", tmp_path / "l2")
    assert (cfg.journal_max_batch, cfg.journal_max_wait_ms, cfg.journal_fsync) == (512, 1.0, True)
    assert cfg.readonly_threshold == 0.95 and cfg.zk_ledgers_root == "/ledgers"
    assert cfg.checkpoint_interval_ms == 1000.0
    assert cfg.log_file is None
    assert (cfg.journal_file_bytes, cfg.entry_log_bytes) == (64 << 20, 256 << 20)


def test_file_sizes_are_taken_as_given(tmp_path: Path) -> None:
    cfg = parse_config({**BASE, "journal_file_bytes": 1024, "entry_log_bytes": 2048}, tmp_path)
    assert (cfg.journal_file_bytes, cfg.entry_log_bytes) == (1024, 2048)


@pytest.mark.parametrize(
    ("change", "key"),
    [
        ({"port": 0}, "port"),
        ({"port": "3181"}, "port"),
        ({"zk": ""}, "zk"),
        ({"ledger_dirs": []}, "ledger_dirs"),
        ({"ledger_dirs": ["j"]}, "journal_dir"),
        ({"journal_max_batch": 0}, "journal_max_batch"),
        ({"journal_max_wait_ms": -1}, "journal_max_wait_ms"),
        ({"journal_fsync": 1}, "journal_fsync"),
        ({"journal_file_bytes": 0}, "journal_file_bytes"),
        ({"journal_file_bytes": "64MB"}, "journal_file_bytes"),
        ({"entry_log_bytes": True}, "entry_log_bytes"),
        ({"entry_log_bytes": -1}, "entry_log_bytes"),
        ({"readonly_threshold": 1.5}, "readonly_threshold"),
        ({"readonly_threshold": True}, "readonly_threshold"),
        ({"checkpoint_interval_ms": 0}, "checkpoint_interval_ms"),
        ({"checkpoint_interval_ms": "1s"}, "checkpoint_interval_ms"),
        ({"zk_ledgers_root": "ledgers"}, "zk_ledgers_root"),
        ({"bookie_id": "a/b"}, "bookie_id"),
        ({"jounral_dir": "x"}, "jounral_dir"),
    ],
)
def test_bad_values_name_the_key(tmp_path: Path, change: dict, key: str) -> None:
    with pytest.raises(ConfigError, match=key):
        parse_config({**BASE, **change}, tmp_path)


@pytest.mark.parametrize("key", ["port", "zk", "journal_dir", "ledger_dirs"])
def test_required_keys(tmp_path: Path, key: str) -> None:
    raw = dict(BASE)
    del raw[key]
    with pytest.raises(ConfigError, match=f"'{key}' is required"):
        parse_config(raw, tmp_path)


def test_bad_toml_and_missing_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("port = = 3")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(bad)
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "missing.toml")


def test_main_exits_254_without_traceback(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    cfg = tmp_path / "b.toml"
    cfg.write_text('port = 99999\nzk = "x"\njournal_dir = "j"\nledger_dirs = ["l"]\n')
    assert main(["--config", str(cfg)]) == 254
    err = capsys.readouterr().err
    assert "'port'" in err and "Traceback" not in err
    assert main([]) == 254
    assert "--config" in capsys.readouterr().err
