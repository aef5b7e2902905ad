"""Malformed input is exit 254 naming the line, never a crash (255): invalid UTF-8,
integers beyond 64 bits, and whatever Hypothesis makes of random bytes and random JSON
fed to `bkchaos check` and `bkchaos report`."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from harness.cli import main
from tests.helpers.histories import APPEND_THEN_CLOSED_READ

GOOD = APPEND_THEN_CLOSED_READ
BIG = 10**400
NOT_UTF8 = b'{"index":0,"time":1,"type":"invoke","process":0,"f":"\xff","value":null}\n'

OUTCOMES = {0, 1, 2, 254}


def run(argv: list[str]) -> int:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    return exc.value.code


def lines(ops: list[dict[str, Any]]) -> bytes:
    return b"".join(json.dumps(op).encode() + b"\n" for op in ops)


def changed(at: int, path: tuple[str, ...], new: Any) -> bytes:
    """GOOD with one field of op `at` replaced (`path` into the op)."""
    ops = json.loads(json.dumps(GOOD))
    target = ops[at]
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = new
    return lines(ops)


@pytest.mark.parametrize(
    ("body", "line"),
    [
        (lines(GOOD[:1]) + b'{"index":1,"time":2,"type":"ok","process":0,"f":"\xff"}\n', 2),
        (lines(GOOD).replace(b'"p0"]]', b'"p\xc3"]]'), 4),
        (changed(1, ("value", "entry"), BIG), 2),
        (changed(3, ("value", "lac"), -BIG), 4),
        (changed(3, ("value", "entries"), [[BIG, "p0"]]), 4),
        (changed(2, ("index",), 10**30), 3),
        (changed(0, ("time",), 2**63), 1),
        (changed(0, ("process",), 2**64), 1),
        (changed(0, ("value", "ledger"), BIG), 2),  # the call's completion
        (changed(1, ("value", "ledger"), 1.5), 2),
        (changed(1, ("value", "seq"), "first"), 2),
        (changed(3, ("value", "from"), "3"), 4),  # a read's first entry asked for
        (changed(3, ("value", "end"), "yes"), 4),
    ],
)
def test_malformed_values_exit_254_naming_the_line(tmp_path, capsys, body, line) -> None:
    path = tmp_path / "history.jsonl"
    path.write_bytes(body)
    assert run(["check", str(path)]) == 254
    assert f"line {line}" in capsys.readouterr().err


def test_the_good_history_is_valid(tmp_path) -> None:
    path = tmp_path / "history.jsonl"
    path.write_bytes(lines(GOOD))
    assert run(["check", str(path)]) == 0


scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(), st.text(max_size=8)
)
json_values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=12,
)
fields = {
    "index": st.integers(-2, 12) | json_values,
    "time": st.integers(0, 10**12) | json_values,
    "type": st.sampled_from(["invoke", "ok", "fail", "info"]) | json_values,
    "process": st.sampled_from([0, 1, "nemesis"]) | json_values,
    "f": st.sampled_from(["append", "read", "read-lac", "create", "audit", "kill", "heal"]),
    "value": st.fixed_dictionaries(
        {},
        optional={
            k: json_values | st.integers(-1, 5) | st.text(max_size=3)
            for k in ("ledger", "payload", "entry", "mode", "lac", "entries", "stream", "seq",
                      "last_entry", "wq", "aq", "lacking", "divergent", "unbounded", "proof",
                      "from", "end")
        },
    ) | json_values,
    "error": json_values,
}  # fmt: skip
op_like = st.fixed_dictionaries({}, optional=fields).map(
    lambda op: json.dumps(op, allow_nan=True).encode()
)
spliced = st.tuples(op_like, st.integers(0, 120), st.binary(min_size=1, max_size=3)).map(
    lambda t: t[0][: t[1]] + t[2] + t[0][t[1] :]
)  # a few random bytes inside an op: broken UTF-8 in a string, a cut number…
line = st.one_of(
    op_like, spliced, json_values.map(lambda v: json.dumps(v).encode()), st.binary(max_size=40)
)
histories = st.lists(line, max_size=12).map(b"\n".join) | st.binary(max_size=200)
SETTINGS = settings(max_examples=100, deadline=None, suppress_health_check=list(HealthCheck))


@SETTINGS
@given(body=histories, newline=st.booleans())
@example(body=NOT_UTF8, newline=False)
def test_check_never_crashes_on_random_input(tmp_path_factory, body, newline) -> None:
    path = tmp_path_factory.mktemp("h") / "history.jsonl"
    path.write_bytes(body + (b"\n" if newline else b""))
    assert run(["check", str(path)]) in OUTCOMES
    assert run(["check", "--json", str(path)]) in OUTCOMES


VALID_RESULTS = json.dumps(
    {"valid": True, "anomaly_types": [], "anomalies": {}, "stats": {}, "checkers": {}}
)


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    body=histories,
    results=st.sampled_from(["check", VALID_RESULTS]) | json_values.map(json.dumps),
)
@example(body=NOT_UTF8, results=VALID_RESULTS)
@example(body=lines(GOOD)[:-9], results=VALID_RESULTS)  # a cut last line
@example(body=lines(GOOD), results='{"valid": [1], "checkers": [2], "sim": {}}')
def test_report_never_crashes_on_random_input(tmp_path_factory, body, results) -> None:
    """Random histories with the results.json `check --write` leaves, a well-formed one
    that does not match the history, or random JSON."""
    run_dir = tmp_path_factory.mktemp("run")
    (run_dir / "history.jsonl").write_bytes(body)
    if results != "check":  # check --write keeps what it can of a results.json it finds
        (run_dir / "results.json").write_text(results)
        assert run(["check", str(run_dir)]) in OUTCOMES
        assert run(["check", str(run_dir), "--write"]) in OUTCOMES
        (run_dir / "results.json").write_text(results)
    if results == "check":
        assert run(["check", str(run_dir), "--write"]) in OUTCOMES
    else:
        (run_dir / "results.json").write_text(results)
    assert run(["report", str(run_dir)]) in {0, 254}
