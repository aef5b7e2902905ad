"""`bkchaos serve` lists a store with unreadable runs in it (they show as unreadable),
and a test name that is not a plain name never puts a run outside the store."""

from __future__ import annotations

import http.client
import json
import threading
from pathlib import Path

import pytest

from harness.cli import main
from harness.errors import UserError
from harness.report.server import list_runs, make_server
from harness.store import link_latest, new_run_dir

RESULTS = {"valid": True, "anomaly_types": [], "anomalies": {}, "stats": {}, "checkers": {}}


def run_dir(store: Path, name: str, test: object, results: object) -> None:
    d = store / name / "20261127T000000"
    d.mkdir(parents=True)
    (d / "history.jsonl").write_text("")
    (d / "test.json").write_text(test if isinstance(test, str) else json.dumps(test))
    (d / "results.json").write_text(results if isinstance(results, str) else json.dumps(results))


def test_one_unreadable_run_does_not_hide_the_store(tmp_path) -> None:
    store = tmp_path / "store"
    run_dir(store, "good", {"workload": "ledger", "nemesis": ["kill"], "seed": 1}, RESULTS)
    run_dir(store, "nemesis-5", {"nemesis": 5}, RESULTS)
    run_dir(store, "lists", {"workload": ["x"], "bugs": [["y"]]}, RESULTS)
    run_dir(store, "not-json", "{", RESULTS)
    run_dir(store, "bad-counts", {}, {**RESULTS, "checkers": {"x": {"anomaly_counts": {"a": "b"}}}})
    run_dir(store, "bad-results", {}, "[1]")
    verdicts = {r["test"]: r["verdict"] for r in list_runs(store)}
    assert verdicts == {
        "good": "valid",
        "nemesis-5": "unreadable",
        "lists": "unreadable",
        "not-json": "unreadable",
        "bad-counts": "unreadable",
        "bad-results": "unreadable",
    }
    server = make_server(store, "127.0.0.1", 0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        conn = http.client.HTTPConnection("127.0.0.1", server.server_port, timeout=30)
        conn.request("GET", "/")
        response = conn.getresponse()
        html = response.read().decode()
        conn.close()
    finally:
        server.shutdown()
        server.server_close()
    assert response.status == 200
    assert "<td>good</td>" in html and "<td>nemesis-5</td>" in html and "unreadable" in html


@pytest.mark.parametrize(
    "name",
    ["..", ".", "", "../x", "a/b", "/tmp/x", "a\\b", "a\0b", "latest", "current", "a b", "x.tmp"],
)
def test_a_test_name_that_is_not_plain_is_refused(tmp_path, name) -> None:
    with pytest.raises(UserError, match="not a plain name"):
        new_run_dir(tmp_path / "store", name)
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_test_name_outside_the_store_exits_254(tmp_path, capsys) -> None:
    store = tmp_path / "store"
    argv = ["test", "--runtime", "sim", "--time-limit", "1", "--store", str(store),
            "--name", "../escaped"]  # fmt: skip
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 254
    assert "not a plain name" in capsys.readouterr().err
    assert not (tmp_path / "escaped").exists() and not (tmp_path / "latest").exists()


def test_a_plain_name_makes_a_run_dir(tmp_path) -> None:
    assert new_run_dir(tmp_path, "my-test.v2").parent == tmp_path / "my-test.v2"


def test_runs_sharing_a_store_relink_without_a_shared_temporary_name(tmp_path) -> None:
    """Each relink has a temporary name of its own (a fixed `latest.tmp` let two runs in one
    store trip over each other); none is left behind."""
    runs = [new_run_dir(tmp_path, name) for name in ("a", "b", "a")]
    for run in runs:
        link_latest(run)
    assert (tmp_path / "latest").resolve() == runs[-1].resolve()
    assert not [p for p in tmp_path.rglob("*.tmp")]
