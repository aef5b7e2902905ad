"""Reading a run directory for the report: test.json, results.json and the history.

Everything a run directory may lack or hold malformed becomes a `UserError` that says
what to do, so `bkchaos report` exits 254 instead of crashing on someone's bad input.
The history is read here rather than through `checkers`, whose ops keep only what the
checkers need: a report shows every value (nemesis targets and proofs included), kept
as raw JSON and decoded one page at a time, so a million-op history stays small.
"""

from __future__ import annotations

import contextlib
import json
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec

from harness.errors import UserError

VALID_VALUES = (True, False, "unknown")
NEMESIS = "nemesis"
_CHUNK = 1 << 22


class Op(msgspec.Struct, gc=False):
    """One history line (spec §1); `value` stays raw JSON until a page shows it."""

    index: int
    time: int
    type: str
    process: int | str
    f: str
    value: msgspec.Raw = msgspec.Raw()
    error: str | None = None
    node: str | None = None

    def decoded(self) -> Any:
        return msgspec.json.decode(self.value) if self.value else None


class Call(msgspec.Struct, gc=False):
    """An invoke and its completion; `done` is None if it never completed (info)."""

    inv: Op
    done: Op | None
    type: str

    @property
    def ops(self) -> list[int]:
        return [self.inv.index] if self.done is None else [self.inv.index, self.done.index]


@dataclass
class Run:
    """One run directory, loaded: its parameters, its checked result and its history."""

    dir: Path
    test: dict[str, Any]  # empty when test.json is missing (e.g. a bare history was checked)
    results: dict[str, Any]
    calls: list[Call]  # client and nemesis calls in invocation order (the timeline's)
    end_time: int  # ns, time of the last line

    @property
    def client(self) -> list[Call]:
        return [c for c in self.calls if c.inv.process != NEMESIS]

    @property
    def nemesis(self) -> list[Call]:
        return [c for c in self.calls if c.inv.process == NEMESIS]


_DECODER = msgspec.json.Decoder(Op)


def _ops(path: Path) -> list[Op]:
    """Every op of a history file; a crash-truncated last line is dropped, as the
    checker does, and any other bad line sends the user to `bkchaos check`."""
    ops: list[Op] = []
    with path.open("rb") as fh:
        rest = b""
        while chunk := fh.read(_CHUNK):
            buf = rest + chunk
            cut = buf.rfind(b"\n") + 1
            body, rest = buf[:cut], buf[cut:]
            try:
                ops += _DECODER.decode_lines(body)
            except (msgspec.DecodeError, UnicodeDecodeError) as exc:
                raise UserError(
                    f"{path} is malformed ({exc}): `bkchaos check {path.parent}` names the line"
                ) from exc
        # a last line cut short by a crash (maybe inside a UTF-8 character)
        with contextlib.suppress(msgspec.DecodeError, UnicodeDecodeError):
            ops += _DECODER.decode_lines(rest)
    return ops


def pair(ops: list[Op], path: Path) -> list[Call]:
    """Pair each completion with its process's outstanding invoke (spec §1)."""
    calls: list[Call] = []
    outstanding: dict[Any, int] = {}  # process -> position in calls
    for op in ops:
        if op.type == "invoke":
            outstanding[op.process] = len(calls)
            calls.append(Call(op, None, "info"))
            continue
        at = outstanding.pop(op.process, None)
        if at is None:
            raise UserError(
                f"{path}: op {op.index} completes nothing (no invoke of process "
                f"{op.process}): `bkchaos check {path.parent}` explains"
            )
        calls[at] = Call(calls[at].inv, op, op.type)
    return calls


def read_json(path: Path, what: str, fix: str) -> Any:
    """Parse a JSON file, turning a bad one into an error that says how to fix it."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise UserError(f"{path}: cannot read {what} ({exc}); {fix}") from exc


def check_results(results: Any, path: Path) -> dict[str, Any]:
    """Refuse a results.json that does not have the shape of spec §5."""
    fix = f"re-run `bkchaos check {path.parent}` to rewrite it"
    if not isinstance(results, dict):
        raise UserError(f"{path} is not a JSON object; {fix}")
    problems = [
        name
        for name, ok in (
            ("valid", results.get("valid") in VALID_VALUES),
            ("anomaly_types", isinstance(results.get("anomaly_types"), list)),
            ("anomalies", isinstance(results.get("anomalies"), dict)),
            ("stats", isinstance(results.get("stats"), dict)),
            (
                "checkers",
                isinstance(results.get("checkers", {}), dict)
                and all(isinstance(v, dict) for v in results.get("checkers", {}).values()),
            ),
        )
        if not ok
    ]
    cases = results.get("anomalies")
    if isinstance(cases, dict) and not all(
        isinstance(v, list) and all(isinstance(c, dict) for c in v) for v in cases.values()
    ):
        problems.append("anomalies (cases must be lists of objects)")
    if problems:
        raise UserError(f"{path} is malformed: bad or missing {', '.join(problems)}; {fix}")
    return results


def load_run(run_dir: Path) -> Run:
    """Load everything the report shows; raise UserError naming what is missing."""
    if not run_dir.is_dir():
        raise UserError(f"{run_dir}: no such run directory (try store/latest)")
    history_path = run_dir / "history.jsonl"
    if not history_path.is_file():
        raise UserError(f"{run_dir} has no history.jsonl: pass a run directory of the store")
    results_path = run_dir / "results.json"
    if not results_path.is_file():
        raise UserError(f"{run_dir} has no results.json: run `bkchaos check {run_dir}` first")
    results = check_results(
        read_json(results_path, "the results", f"re-run `bkchaos check {run_dir}`"),
        results_path,
    )
    test_path = run_dir / "test.json"
    test = read_json(test_path, "the test", "fix or delete it") if test_path.is_file() else {}
    if not isinstance(test, dict):
        raise UserError(f"{test_path} is not a JSON object; fix or delete it")
    ops = _ops(history_path)
    return Run(run_dir, test, results, pair(ops, history_path), ops[-1].time if ops else 0)


def reproduce_command(test: dict[str, Any], run_dir: Path | None = None) -> str:
    """The command that re-runs exactly this run: its argv, pinned to this run's seed.

    `--test-count` is dropped because each run of a batch has its own seed; a test built
    by the pytest plugin or the nightly driver (no argv) gets its flags from test.json
    (harness.command_line, the builder every replay command comes from).
    """
    if not test:
        return ""
    seed = str(test.get("seed", 0))
    argv = list(test.get("argv") or [])
    if argv:
        args: list[str] = []
        skip = False
        for arg in argv:
            if skip:
                skip = False
            elif arg in ("--seed", "--test-count"):
                skip = True
            elif not arg.startswith(("--seed=", "--test-count=")):
                args.append(arg)
        return shlex.join(["bkchaos", *args, "--seed", seed])
    from harness.command_line import replay_command, spec_from_test_json

    try:
        spec = spec_from_test_json({**test, "seed": int(seed)})
    except (UserError, TypeError, ValueError):
        return ""  # settings no `bkchaos test` accepts (a hand-made test.json) replay nothing
    return replay_command(spec, run_dir)
