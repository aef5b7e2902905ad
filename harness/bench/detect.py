"""`bkchaos bench detect`: does the harness catch every seeded bug, and never cry wolf?

Each seeded bug has one test that should expose it (`EXPOSERS`: workload, configuration,
nemeses — the same table docs/bugs.md gives). The bench runs that test K times with the bug
on, and K times with the bug off (the clean twin, same settings and seeds), on the local
runtime — or on docker, for a bug whose exposing faults need it (`packet`) — or all of them
on the runtime `--runtime` names. In the simulation (`--runtime sim`) a seed gives the same
run on any machine, so its figures travel; on real processes they are this machine's. It
reports per bug the detection rate (runs that checked invalid), the median time from the
run's first op to the first op that made an anomaly visible, the anomaly types seen and
the clean twins' verdicts; and the false positives: clean runs that checked invalid.
Every run is an ordinary run directory under `STORE/bench-detect-*`, so any figure can be
opened as a report.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from harness.errors import UserError
from harness.runner import run_test
from harness.testspec import TestSpec, op_shares_for

BASE = TestSpec(
    name="bench-detect",
    runtime="local",
    time_limit=20.0,
    nemesis_interval=2.0,
    bookies=3,
    concurrency=8,
    rate=200.0,
    takeovers=0.02,
    writer_crashes=0.05,
)
"""Settings every detection run shares: short runs, faults every two seconds, and as many
bookies as the ensemble, so a faulty bookie cannot be replaced and recovery must work with
what the others hold (a spare bookie hides most bugs: measured, docs/performance.md); eight
workers; writers crashing on 5% of ledger ops and takeovers on 2%, so crashed ledgers wait
a few seconds, faults come and go meanwhile, and each recovery has an unconfirmed last
entry to decide (measured against 5% takeovers and 2% crashes: docs/performance.md)."""

SHARED_SETTINGS = (
    "time_limit",
    "nemesis_interval",
    "bookies",
    "concurrency",
    "rate",
    "takeovers",
    "writer_crashes",
)


def detection_run() -> dict[str, Any]:
    """BASE's settings as `TestSpec` fields, for the fault suite's `@pytest.mark.chaos`
    tests: they then catch each bug at the rate docs/performance.md records."""
    return {name: getattr(BASE, name) for name in SHARED_SETTINGS}


SHAPED_LINKS = (
    {"at": 1, "f": "start-packet", "value": {"nodes": ["c1"], "to": ["b2", "b3"], "rate": "1mbit"}},
    {"at": 1, "f": "start-packet", "value": {"nodes": ["c2"], "to": ["b1"], "rate": "256kbit"}},
)
"""c1's requests reach b1 at once and b2, b3 late; c2's the other way round. A writer on c1
taken over from c2 leaves its last adds on b1 alone, the takeover's truncating no-op and
new adds reach b1 late, and c1's readers ask b1 first for one entry in three."""

RECOVERY_KILLS = tuple(
    {
        "at": round(0.5 * i, 1),
        "on": "recovery-started",
        "f": "kill",
        "value": {"nodes": [f"@{i % 2}"]},
        "hold": 0.4,
    }
    for i in range(1, 40)
)
"""A kill of the first or second bookie of the ensemble being recovered, the moment a
recovery starts, armed every half second (each fires at the next recovery): the killed
bookie's answers to the recovery's reads are errors, unknown rather than negative. A
protocol event, not a clock beat, decides when it lands (nemesis/triggers.py)."""

EXPOSERS: dict[str, dict[str, Any]] = {
    # Kills triggered by recoveries starting, not on a beat: the catch does not hinge on
    # the machine's speed. Not for `metadata-blind-write`: its racers disagree over an add
    # that reached one bookie of its write set and not the other, which a kill while
    # writers append makes (a beat does); killing as a race's first recovery starts caught
    # it less often (docs/performance.md, "Exposers triggered by recoveries on real
    # processes").
    "recovery-unknown-as-negative": {
        "workload": "ledger",
        "nemesis": ("kill",),
        "schedule": RECOVERY_KILLS,
    },
    "recovery-reads-no-fence": {"workload": "recovery-race", "nemesis": ("pause", "wipe")},
    "no-recovery-writeback": {"workload": "ledger", "nemesis": ("kill", "wipe")},
    "lac-before-ack-quorum": {"workload": "ledger", "nemesis": ("kill",)},
    "read-beyond-lac": {"workload": "ledger", "nemesis": ("power-loss",)},
    "scope-id-ignored": {"workload": "ledger", "nemesis": ("kill",), "id_bits": 128},
    "ensemble-change-drops-pending": {
        # A bookie whose acks lag (its egress throttled: tbf, so docker) while its partner
        # dies: entries only the partner has acknowledged are pending at the ensemble change.
        "runtime": "docker",
        "workload": "ledger",
        "nemesis": ("packet", "kill"),
        "nemesis_order": "nested",
        "packet": "rate=64kbit",
        "nemesis_interval": 1.0,
        "bookies": 4,
        "pipeline": 4,
        "concurrency": 16,
        "rate": 400.0,
        "op_timeout": 2.0,
    },
    "metadata-blind-write": {
        "workload": "recovery-race",
        "nemesis": ("kill",),
        "nemesis_interval": 0.5,
        "concurrency": 16,
        "rate": 1000.0,
    },
    "no-journal-fsync": {"workload": "ledger", "nemesis": ("power-loss",)},
    "no-cookie": {"workload": "ledger", "nemesis": ("wipe",)},
    "corrupt-returns-noentry": {
        "workload": "ledger",
        "nemesis": ("corrupt",),
        "corruption": "tail",
    },
    "unbounded-no-truncate": {
        # Two client links slowed for the whole run, so that a replica keeps the old term's
        # tail and is read before the new term's adds reach it (docs/bugs.md): tc on docker.
        "runtime": "docker",
        "workload": "unbounded",
        "schedule": SHAPED_LINKS,
        "write_quorum": 3,
        "ack_quorum": 2,
        "pipeline": 4,
        "concurrency": 16,
        "rate": 1000.0,
        "takeovers": 0.5,  # of the ops of processes holding no stream: every other one
    },
}
"""The test that should expose each seeded bug (docs/bugs.md, "Exposed by")."""

RUNTIMES = ("sim", "local", "docker")
"""Where the bench runs exposing tests: `--runtime`, or each exposer's own (`EXPOSERS`)."""


def exposer_runtime(bug: str) -> str:
    """The runtime `bug`'s exposing test asks for: local unless its faults need docker."""
    return str(EXPOSERS[bug].get("runtime", BASE.runtime))


def exposing_run(bug: str, runtime: str | None = None) -> dict[str, Any]:
    """`bug`'s exposing test as `TestSpec` fields, bug off: BASE's shared settings (less
    the shares of ops its workload has none of), then its own, on `runtime` (default: its
    own). Fault-suite tests then run exactly what the bench runs, with the bug on (the
    catch) and off (the clean twin)."""
    runtime = runtime or exposer_runtime(bug)
    exposer = {**EXPOSERS[bug], "runtime": runtime}
    return op_shares_for(exposer["workload"], {**detection_run(), **exposer})


TARGETS = {"detection_rate": 0.9, "median_seconds_to_detect": 30.0, "false_positives": 0}


def exposing_spec(
    bug: str, seed: int, store: str, time_limit: float, runtime: str | None = None
) -> TestSpec:
    """The run that should catch `bug` (with `bug` switched on), on `runtime` (default:
    the exposer's own)."""
    own = {"name": f"bench-detect-{bug}", "seed": seed, "store": store, "time_limit": time_limit}
    return replace(BASE, **{**exposing_run(bug, runtime), **own, "bugs": (bug,)})


def seconds_to_first_anomaly(history: Path, results: dict[str, Any]) -> float | None:
    """Seconds from the run's first op to the earliest op at which some anomaly is visible:
    for each case, its latest op (an anomaly needs all of its ops); then the earliest case."""
    cases = [case for found in results.get("anomalies", {}).values() for case in found]
    wanted = {index for case in cases for index in case.get("ops", [])}
    times: dict[int, int] = {}
    first: int | None = None
    with history.open() as lines:
        for line in lines:
            try:
                op = json.loads(line)
            except ValueError:
                continue  # a crash-truncated last line
            first = op["time"] if first is None else first
            if op["index"] in wanted:
                times[op["index"]] = op["time"]
    visible = [max(times[i] for i in case["ops"] if i in times) for case in cases if case["ops"]]
    if first is None or not visible:
        return None
    return (min(visible) - first) / 1e9


def _summary(runs: list[dict[str, Any]], clean: list[dict[str, Any]]) -> dict[str, Any]:
    detected = [r for r in runs if r["valid"] is False]
    seconds = [r["seconds_to_detect"] for r in detected if r["seconds_to_detect"] is not None]
    return {
        "runs": len(runs),
        "detected": len(detected),
        "detection_rate": round(len(detected) / len(runs), 3) if runs else 0.0,
        "median_seconds_to_detect": round(statistics.median(seconds), 1) if seconds else None,
        "anomalies": sorted({t for r in detected for t in r["anomaly_types"]}),
        "missed_seeds": [r["seed"] for r in runs if r["valid"] is not False],
        "clean_twins": {
            verdict: sum(VERDICTS[r["valid"]] == verdict for r in clean)
            for verdict in VERDICTS.values()
        },
        "run_dirs": [r["run_dir"] for r in runs],
        "triggered": _lag_summary([*runs, *clean]),
    }


VERDICTS: dict[Any, str] = {True: "valid", False: "invalid", "unknown": "unknown"}
"""A run's `valid` as the bench names it."""


def _one(spec: TestSpec) -> dict[str, Any]:
    run_dir, results = run_test(spec)
    return {
        "seed": spec.seed,
        "valid": results["valid"],
        "anomaly_types": results["anomaly_types"],
        "seconds_to_detect": seconds_to_first_anomaly(run_dir / "history.jsonl", results),
        "run_dir": str(run_dir),
        "triggered": triggered_lags(run_dir),
    }


def triggered_lags(run_dir: Path) -> dict[str, Any]:
    """How late a real run's faults triggered by probes came (nemesis/triggers.py), in ms,
    one entry per fired fault: `read` from the probe line's writing to the controller
    reading it, `start` from then to the nemesis starting the fault, `proven` from then
    to its proof; and how many reaches re-armed their step as too late (`bkchaos.log`)."""
    lags: dict[str, list[float]] = {"read": [], "start": [], "proven": []}
    invoked: dict[str, float] = {}
    with (run_dir / "history.jsonl").open() as lines:
        for line in lines:
            if '"probe_timing"' not in line:
                continue
            op = json.loads(line)
            timing, at_s = op["value"]["probe_timing"], op["time"] / 1e9
            key = json.dumps(timing, sort_keys=True)
            if op["type"] == "invoke":
                invoked[key] = at_s
                lags["read"].append(1000 * (timing["read_s"] - timing["written_s"]))
                lags["start"].append(1000 * (at_s - timing["read_s"]))
            elif key in invoked and op["type"] == "info" and "proof" in op["value"]:
                lags["proven"].append(1000 * (at_s - invoked[key]))
    log = run_dir / "bkchaos.log"
    text = log.read_text(errors="replace") if log.exists() else ""
    return {**lags, "re_armed": text.count(": re-armed")}


def _lag_summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The triggered faults of `runs` together: how many, their lags' median, 90th
    percentile and maximum (ms), and the reaches re-armed as too late."""
    summary: dict[str, Any] = {
        "fired": sum(len(r["triggered"]["read"]) for r in runs),
        "re_armed": sum(r["triggered"]["re_armed"] for r in runs),
    }
    for lag in ("read", "start", "proven"):
        values = sorted(v for r in runs for v in r["triggered"][lag])
        if values:
            summary[f"{lag}_ms"] = {
                "median": round(statistics.median(values), 1),
                "p90": round(values[math.ceil(0.9 * len(values)) - 1], 1),  # nearest rank
                "max": round(values[-1], 1),
            }
    return summary


def runs_on(bug: str, runtime: str) -> bool:
    """Whether `bug`'s exposing test can run on `runtime` (its faults are performed there:
    a `packet` fault needs docker or the simulation)."""
    try:
        exposing_spec(bug, 1, "store", BASE.time_limit, runtime)
    except UserError:
        return False
    return True


def run(
    bug_names: tuple[str, ...],
    runs: int,
    store: str = "store",
    time_limit: float = BASE.time_limit,
    first_seed: int = 1,
    on_run: Callable[[str, bool, dict[str, Any]], None] | None = None,
    runtime: str | None = None,
) -> dict[str, Any]:
    """K runs per bug with it on and K clean twins, on `runtime` (default: each exposer's
    own); the figures `--json` prints."""
    figures: dict[str, Any] = {"bugs": {}, "false_positives": 0, "clean_runs": 0}
    clean_invalid: list[str] = []
    for bug in bug_names:
        buggy, clean = [], []
        for k in range(runs):
            spec = exposing_spec(bug, first_seed + k, store, time_limit, runtime)
            buggy.append(_one(spec))
            if on_run:
                on_run(bug, True, buggy[-1])
            twin = replace(spec, name=f"bench-detect-clean-{bug}", bugs=())
            clean.append(_one(twin))
            if on_run:
                on_run(bug, False, clean[-1])
        figures["bugs"][bug] = {
            "test": _describe(bug),
            "runtime": runtime or exposer_runtime(bug),
            **_summary(buggy, clean),
        }
        figures["clean_runs"] += len(clean)
        clean_invalid += [r["run_dir"] for r in clean if r["valid"] is False]
    figures["false_positives"] = len(clean_invalid)
    figures["false_positive_runs"] = clean_invalid
    figures["targets"] = TARGETS
    figures["settings"] = {
        "runs_per_bug": runs,
        "time_limit": time_limit,
        "runtime": runtime or "each exposer's own",
        "first_seed": first_seed,
    }
    return figures


FLAGS = {"write_quorum": "wq", "ack_quorum": "aq"}
"""`bkchaos test` flags not spelled as their TestSpec field."""


def _describe(bug: str) -> str:
    """The exposing test as the `bkchaos test` flags that differ from the defaults."""
    shown = dict(EXPOSERS[bug])
    words = [f"--workload {shown.pop('workload')}"]
    words += [
        f"--{FLAGS.get(key, key.replace('_', '-'))} {_shown(key, v)}" for key, v in shown.items()
    ]
    return " ".join(words)


def _shown(key: str, value: Any) -> Any:
    if key == "nemesis":
        return ",".join(value)
    if key == "schedule":
        return json.dumps(value)  # a file's content, given inline
    return value
