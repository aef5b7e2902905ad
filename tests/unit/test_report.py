"""Reports and the store index, without a browser (tests/browser/ opens them in one).

Run directories are built from `checkers.synthesize` histories; the invalid one has an
acknowledged entry dropped from a ledger's final closed read, which the checkers report
as `lost-append` and a `G-single-realtime` cycle.
"""

from __future__ import annotations

import http.client
import json
import logging
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

import checkers
from harness.cli import main
from harness.command_line import replay_command
from harness.errors import UserError
from harness.report import figures, render, timeline, try_write_report
from harness.report.render import write_report
from harness.report.run import Call, Op, reproduce_command
from harness.report.server import list_runs, make_server
from harness.testspec import TestSpec
from tests.helpers.reports import make_run


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    store = tmp_path_factory.mktemp("store")
    made = {
        "valid": make_run(store / "clean" / "20261101T100000", invalid=False),
        "invalid": make_run(store / "bugged" / "20261102T100000", invalid=True),
    }
    for run_dir in made.values():
        write_report(run_dir)
    return made


def test_valid_report_has_verdict_command_plots_and_offline_plotly(runs: dict[str, Path]) -> None:
    run_dir = runs["valid"]
    html = (run_dir / "report.html").read_text()
    assert 'class="verdict valid" id="verdict">valid<' in html
    assert "bkchaos test --nemesis kill,pause --time-limit 20 --seed 3" in html
    assert '<script src="plotly.min.js">' in html and "cdn" not in html.lower()
    assert (run_dir / "plotly.min.js").stat().st_size > 1_000_000
    assert "No anomalies." in html
    for section in ("plot-latency", "plot-quantiles", "plot-rates", "perf-table", "nemesis"):
        assert f'id="{section}"' in html
    assert "logs/b1/bookie.log" in html
    assert "proof" in html  # the synthetic nemesis ops carry proofs


def test_invalid_report_links_every_cited_op_and_draws_the_cycle(runs: dict[str, Path]) -> None:
    run_dir = runs["invalid"]
    results = json.loads((run_dir / "results.json").read_text())
    html = (run_dir / "report.html").read_text()
    assert 'id="verdict">invalid<' in html
    assert results["anomaly_types"] == ["G-single-realtime", "lost-append"]
    for name, cases in results["anomalies"].items():
        assert f'id="anomaly-{name}"' in html
        for case in cases:
            assert case["explanation"].split("; ")[0].replace("'", "&#39;") in html
            for index in case["ops"]:
                assert f'href="timeline.html#op-{index}"' in html
    assert '<svg class="cycle"' in html and "realtime</text>" in html


def test_timeline_pages_hold_every_call_once(runs: dict[str, Path], monkeypatch: Any) -> None:
    from harness.report.run import load_run

    run = load_run(runs["invalid"])
    monkeypatch.setattr(timeline, "CALLS_PER_PAGE", 100)
    out = runs["invalid"] / "paged"
    firsts = timeline.write_pages(run.calls, out)
    pages = sorted(out.glob("p*.js"))
    assert len(pages) == len(firsts) == -(-len(run.calls) // 100)
    rows = []
    for page in pages:
        text = page.read_text()
        rows += json.loads(text[text.index(",") + 1 : text.rindex(")")])
    assert [r[0] for r in rows] == [c.inv.index for c in run.calls]
    assert firsts == [rows[i][0] for i in range(0, len(rows), 100)]


def _call(index: int, f: str, nodes: list[str] | None, t0: int, t1: int, **done: Any) -> Call:
    value = msgspec.Raw(json.dumps({"nodes": nodes} if nodes else None).encode())
    inv = Op(index, t0, "invoke", "nemesis", f, value=value)
    proof = msgspec.Raw(json.dumps({"nodes": nodes, "proof": {"ok": True}}).encode())
    return Call(inv, Op(index + 1, t1, "info", "nemesis", f, value=proof, **done), "info")


def test_faults_pair_each_start_with_its_heal() -> None:
    s = 1_000_000_000
    calls = [
        _call(0, "kill", ["b1"], 1 * s, 1 * s),
        _call(2, "pause", ["b2"], 2 * s, 2 * s),
        _call(4, "restart", ["b1"], 3 * s, 3 * s),
        _call(6, "flip-bits", ["b3"], 4 * s, 5 * s),
        _call(8, "start-partition", None, 6 * s, 6 * s, error="EIO"),
        _call(10, "pause", ["b4"], 7 * s, 7 * s),
        _call(12, "resume", ["b4"], 8 * s, 8 * s),
    ]
    got = [(f.label, f.start, f.end, f.error) for f in figures.faults(calls, 10 * s)]
    assert got == [
        ("kill b1", 1, 3, None),
        ("pause b2", 2, 10, None),  # never resumed: lasts to the end
        ("flip-bits b3", 4, 5, None),  # no heal op: its own duration
        ("start-partition", 6, 10, "EIO"),
        ("pause b4", 7, 8, None),
    ]


def test_huge_scatter_is_thinned_keeping_rare_series_whole() -> None:
    series = {
        ("append", "ok"): [(i, 1.0, i) for i in range(200_000)],
        ("read", "ok"): [(i, 1.0, i) for i in range(50_000)],
        ("append", "fail"): [(i, 1.0, i) for i in range(300)],
    }
    dropped = figures._thin(series)
    kept = sum(map(len, series.values()))
    assert kept <= figures.MAX_POINTS and dropped == 250_300 - kept
    assert len(series[("append", "fail")]) == 300
    ratio = len(series[("append", "ok")]) / len(series[("read", "ok")])
    assert 3.9 < ratio < 4.1  # one common rate keeps the relative density


def test_downsampled_report_says_so(tmp_path: Path, monkeypatch: Any) -> None:
    monkeypatch.setattr(figures, "MAX_POINTS", 100)
    run_dir = make_run(tmp_path / "t" / "20261103T000000", invalid=False)
    html = write_report(run_dir).read_text()
    assert 'id="downsampled"' in html and "the scatter shows" in html


def test_reproduce_command_pins_this_runs_seed() -> None:
    test = {"seed": 42, "argv": ["test", "--seed", "40", "--test-count", "3", "--bug", "x y"]}
    assert reproduce_command(test) == "bkchaos test --bug 'x y' --seed 42"
    spec = TestSpec(nemesis=("kill",), bugs=("no-cookie",), write_quorum=3, seed=5)
    command = reproduce_command(json.loads(spec.to_json()))
    assert command == replay_command(spec)  # the one builder, from the run's test.json
    assert command.startswith("bkchaos test --name bkchaos") and "--runtime local" in command
    assert "--nemesis kill" in command and "--bug no-cookie" in command
    assert "--wq 3" in command and "--seed 5" in command
    assert reproduce_command({}) == ""


def test_a_drawn_schedule_replays_from_the_runs_own_test_json(tmp_path: Path) -> None:
    step = {"at": 1.0, "f": "kill", "value": {"nodes": ["b1"]}}
    spec = json.loads(TestSpec(schedule=(step,), seed=7).to_json())
    command = reproduce_command(spec, tmp_path)
    assert command.endswith(f"--schedule {tmp_path / 'test.json'}") and "--seed 7" in command
    assert "--nemesis kill" in command
    assert "--guaranteed-write-quorum" not in command


def test_a_boolean_setting_is_a_bare_flag() -> None:
    spec = json.loads(TestSpec(guaranteed_write_quorum=True, seed=1).to_json())
    words = reproduce_command(spec).split()
    assert "--guaranteed-write-quorum" in words and "True" not in words


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda d: (d / "results.json").unlink(), "run `bkchaos check"),
        (lambda d: (d / "results.json").write_text("{"), "cannot read the results"),
        (lambda d: (d / "results.json").write_text('{"valid": "maybe"}'), "is malformed: bad"),
        (lambda d: (d / "history.jsonl").unlink(), "has no history.jsonl"),
        (lambda d: (d / "history.jsonl").write_text('{"index": "x"}\n'), "is malformed"),
        (lambda d: (d / "test.json").write_text("[]"), "test.json is not a JSON object"),
    ],
)
def test_bad_run_dirs_are_user_errors(tmp_path: Path, damage: Any, message: str) -> None:
    run_dir = make_run(tmp_path / "t" / "20261104T000000", invalid=False, ops=50)
    damage(run_dir)
    with pytest.raises(UserError, match=message.replace("(", r"\(")):
        write_report(run_dir)


def test_report_cli_exit_codes(tmp_path: Path, capsys: Any) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["report", str(tmp_path / "missing")])
    assert exc.value.code == 254 and "no such run directory" in capsys.readouterr().err
    run_dir = make_run(tmp_path / "t" / "20261105T000000", invalid=True, ops=200)
    with pytest.raises(SystemExit) as exc:
        main(["report", str(run_dir)])
    assert exc.value.code == 0 and (run_dir / "report.html").is_file()


def test_a_failed_report_never_loses_the_run(tmp_path: Path, caplog: Any) -> None:
    run_dir = make_run(tmp_path / "t" / "20261106T000000", invalid=False, ops=50)
    (run_dir / "results.json").write_text("not json")
    with caplog.at_level(logging.ERROR):
        assert try_write_report(run_dir) is None
    assert "could not write the report" in caplog.text
    assert (run_dir / "history.jsonl").is_file() and not (run_dir / "report.html").exists()


def test_anomaly_counts_use_the_checkers_full_counts() -> None:
    results = {
        "anomaly_types": ["lost-append"],
        "anomalies": {"lost-append": [{}] * 3},
        "checkers": {"ledger": {"anomaly_counts": {"lost-append": 5000}}, "perf": {}},
    }
    assert render.anomaly_counts(results) == {"lost-append": 5000}


# -- bkchaos serve


@pytest.fixture(scope="module")
def server(runs: dict[str, Path]) -> Iterator[tuple[str, int, Path]]:
    store = runs["valid"].parent.parent
    (store / "trends").mkdir(exist_ok=True)
    (store / "trends" / "index.html").write_text("<h1>trends</h1>")
    (store / "nightly" / "2026-11-07").mkdir(parents=True, exist_ok=True)
    (store / "nightly" / "2026-11-07" / "index.html").write_text("<h1>night</h1>")
    if not (store / "nightly" / "latest").exists():
        (store / "nightly" / "latest").symlink_to("2026-11-07")
    (store / "running" / "20261107T000000").mkdir(parents=True, exist_ok=True)
    (store / "running" / "20261107T000000" / "history.jsonl").write_text("")
    outside = store.parent / "secret.txt"
    outside.write_text("secret")
    if not (store / "escape").exists():
        (store / "escape").symlink_to(store.parent)
        (store / "latest").symlink_to("bugged/20261102T100000")  # as the store links runs
        (store / "bugged" / "latest").symlink_to("20261102T100000")
    srv = make_server(store, "127.0.0.1", 0)
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    try:
        yield "127.0.0.1", srv.server_port, store
    finally:
        srv.shutdown()
        srv.server_close()


def _get(server: tuple[str, int, Path], path: str, method: str = "GET") -> tuple[int, str]:
    conn = http.client.HTTPConnection(server[0], server[1], timeout=10)
    try:
        conn.request(method, path)  # sent as is: http.client does not normalise ".."
        response = conn.getresponse()
        return response.status, response.read().decode(errors="replace")
    finally:
        conn.close()


def test_serve_lists_runs_newest_first_with_verdicts(server: tuple[str, int, Path]) -> None:
    status, html = _get(server, "/")
    assert status == 200
    running, bugged, clean = (html.index(f"<td>{t}</td>") for t in ("running", "bugged", "clean"))
    assert running < bugged < clean
    assert "G-single-realtime × 1" in html and "lost-append × 1" in html
    assert 'href="trends/index.html"' in html and 'href="nightly/latest/index.html"' in html
    assert 'href="bugged/20261102T100000/report.html"' in html
    assert [r["verdict"] for r in list_runs(server[2])] == ["running", "invalid", "valid"]
    assert 'href="latest/report.html"' in html


def test_serve_serves_reports_and_trends(server: tuple[str, int, Path]) -> None:
    assert _get(server, "/bugged/20261102T100000/report.html")[0] == 200
    assert _get(server, "/bugged/20261102T100000/timeline/p0000.js")[0] == 200
    assert _get(server, "/trends/index.html") == (200, "<h1>trends</h1>")


@pytest.mark.parametrize(
    "path",
    ["/../secret.txt", "/clean/../../secret.txt", "/%2e%2e/secret.txt", "/escape/secret.txt"],
)
def test_serve_refuses_paths_outside_the_store(server: tuple[str, int, Path], path: str) -> None:
    status, body = _get(server, path)
    assert status == 403 and "secret" not in body.replace("secret.txt", "")


def test_serve_is_read_only(server: tuple[str, int, Path]) -> None:
    for method in ("POST", "PUT", "DELETE"):
        assert _get(server, "/clean/20261101T100000/report.html", method)[0] == 501
    assert (server[2] / "clean" / "20261101T100000" / "report.html").is_file()


def test_serve_refuses_a_missing_store(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="no such store"):
        make_server(tmp_path / "nope", "127.0.0.1", 0)


def test_thousands_of_faults_are_shaded_as_few_merged_spans() -> None:
    windows = [figures.Fault("kill b1", t, t + 0.5, 0, None) for t in range(0, 3000, 2)]
    spans = figures._merged(windows, 160)
    assert len(spans) <= 160
    assert all(any(a <= w.start and w.end <= b for a, b in spans) for w in windows)
    shading = figures._shading(windows)
    assert len(shading["shapes"]) <= 4 * figures.MAX_LABELS and "annotations" not in shading


def _op(index: int, kind: str, f: str, value: Any, process: Any = 1, **extra: Any) -> Op:
    return Op(
        index, index, kind, process, f, value=msgspec.Raw(json.dumps(value).encode()), **extra
    )


@pytest.mark.parametrize(
    ("inv", "done", "text"),
    [
        (
            {"ledger": 7, "payload": "p0"},
            {"ledger": 7, "payload": "p0", "entry": 3},
            "append 'p0' → L7:e3",
        ),
        ({"stream": "s0", "payload": "p1"}, None, "append 'p1' → stream s0"),
        (
            {"ledger": 7, "mode": "tail"},
            {"lac": 4, "entries": [[3, "a"], [4, "b"]]},
            "read tail L7 → lac 4, 2 entries 3‥4",
        ),
        ({"ledger": 7}, {"last_entry": 9}, "recover L7 → last 9"),
        ({"ledger": 7, "term": 2}, {"ok": 1}, 'take-over {"ledger":7,"term":2}'),
    ],
)
def test_labels_say_what_a_call_did(inv: Any, done: Any, text: str) -> None:
    f = text.split()[0]
    completion = _op(1, "ok", f, done) if done is not None else None
    assert timeline.label(Call(_op(0, "invoke", f, inv), completion, "ok")) == text


def test_nemesis_labels_name_targets_and_details_carry_the_proof() -> None:
    inv = _op(0, "invoke", "kill", {"nodes": ["b1"]}, process="nemesis")
    done = _op(1, "info", "kill", {"nodes": ["b1"], "proof": {"gone": True}}, "nemesis", node="b1")
    call = Call(inv, done, "info")
    assert timeline.label(call) == "kill b1"
    assert timeline.detail(call) == 'node b1; proof {"gone":true}'
    assert timeline.label(Call(_op(0, "invoke", "heal", None, "nemesis"), None, "info")) == "heal"


def test_an_empty_history_still_gets_a_report(tmp_path: Path) -> None:
    run_dir = tmp_path / "t" / "20261108T000000"
    run_dir.mkdir(parents=True)
    (run_dir / "history.jsonl").write_text("")
    (run_dir / "results.json").write_text(json.dumps(checkers.check(run_dir / "history.jsonl")))
    html = write_report(run_dir).read_text()
    # nothing recognised is unknown (docs/history.md §7), no longer valid
    assert 'id="verdict">unknown<' in html and "(no test.json: parameters unknown)" in html
    assert not list((run_dir / "timeline").glob("p*.js"))
