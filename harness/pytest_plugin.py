"""pytest plugin (entry point `pytest11: bkchaos`): fault suites written as ordinary tests.

- `@pytest.mark.chaos(workload="ledger", nemesis=["kill"], time_limit=30, bugs=[],
  expect="valid")` runs that chaos test (any other `TestSpec` field may be given too);
  the test fails with a short anomaly summary, the report's path and the command that
  replays the run. `expect="invalid"` is for "this seeded bug must be caught" suites, with
  `anomalies=[...]` to require that one of those anomaly types is among those found, and
  `test_count=K` to run up to K times (seeds seed, seed+1, …) until a run checks invalid,
  as Jepsen's `--test-count` does: a clean build must stay valid K times, a seeded bug be
  caught within K runs.
- `runtime="sim"` (in the marker or the fixture call) runs that test in the deterministic
  simulation (harness/runtime/sim.py) whatever `--bkchaos-runtime` says: the same seed
  gives the same history, so a simulated fault suite is exact and runs in seconds.
- `chaos`: a callable fixture, `chaos(nemesis=("kill",), schedule=...)` runs a test and
  returns a `ChaosRun`; for `@given(schedule=fault_schedules())` suites (add
  `suppress_health_check=[HealthCheck.function_scoped_fixture]`: runs share nothing).
- `bk_cluster`: a running local cluster (ZooKeeper, 3 bookies, 2 client agents) shared by
  one test module, torn down at its end, also on Ctrl-C and SIGTERM.
- Options `--bkchaos-runtime`, `--bkchaos-store`, `--bkchaos-time-limit` (overrides every
  test's) and `--bkchaos-seed` (for runs that set none; default: random per session).

Chaos runs are real clusters on this machine: run them without pytest-xdist, one at a
time. With pytest-html installed, each test's report links to its runs' reports.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from core.signals import sigterm_as_interrupt
from core.verdict import reasons
from harness.command_line import SPEC_FIELDS, replay_command
from harness.errors import UserError
from harness.store import store_name
from harness.testspec import RUNTIMES, TestSpec

if TYPE_CHECKING:  # the local runtime (kazoo) loads only when a test asks for a cluster
    from harness.runtime.local import LocalCluster

SEED_KEY = pytest.StashKey[int]()
RUNS_KEY = pytest.StashKey[list["ChaosRun"]]()
MARKED_KEY = pytest.StashKey[int]()
"""How many of a test's runs its marker made (`test_count`); the body's follow them."""
EXPECTATIONS = {"valid": True, "invalid": False}
VERDICTS = {True: "VALID", False: "INVALID", "unknown": "UNKNOWN"}
TUPLE_FIELDS = frozenset(f.name for f in fields(TestSpec) if isinstance(f.default, tuple))


@dataclass
class ChaosRun:
    """One finished chaos run: what ran, where it is stored, what the checkers said."""

    spec: TestSpec
    run_dir: Path
    results: dict[str, Any] = field(repr=False)

    @property
    def valid(self) -> bool | str:
        return self.results["valid"]

    @property
    def anomaly_types(self) -> list[str]:
        return self.results["anomaly_types"]

    @property
    def report(self) -> Path | None:
        """The run's HTML report, if this build writes one."""
        report = self.run_dir / "report.html"
        return report if report.exists() else None

    def summary(self) -> str:
        """A few lines for a failure message: verdict, anomalies, report, replay command."""
        spec = self.spec
        lines = [
            f"{VERDICTS[self.valid]}: {spec.workload} workload, nemesis "
            f"{','.join(spec.nemesis) or 'none'}, bugs {','.join(spec.bugs) or 'none'}, "
            f"seed {spec.seed}, {spec.time_limit:g}s"
        ]
        lines += [f"  {head}{rest}" for _, head, rest in reasons(self.results)]
        if self.report is not None:
            lines.append(f"report: {self.report}")
        else:
            lines.append(f"run directory: {self.run_dir} (no report.html: it could not be written)")
        lines.append(f"replay: {replay_command(spec, self.run_dir)}")
        return "\n".join(lines)


# ---- options and configuration --------------------------------------------------------


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("bkchaos", "bkchaos chaos tests")
    group.addoption(
        "--bkchaos-runtime",
        default="local",
        help=f"Runtime of chaos runs and bk_cluster, one of {RUNTIMES} (default: local).",
    )
    group.addoption(
        "--bkchaos-store", default="store", help="Store for chaos runs (default: ./store)."
    )
    group.addoption(
        "--bkchaos-time-limit",
        type=float,
        default=None,
        help="Seconds per chaos run, overriding every test's time_limit.",
    )
    group.addoption(
        "--bkchaos-seed",
        type=int,
        default=None,
        help="Seed of chaos runs that set none (default: random per session, in the header).",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "chaos(workload='ledger', nemesis=[...], time_limit=30, bugs=[], expect='valid', "
        "anomalies=[...], test_count=1, **TestSpec fields): run this chaos test (up to "
        "test_count times, until one checks invalid) and check its verdict",
    )
    runtime = config.getoption("bkchaos_runtime")
    if runtime not in RUNTIMES:
        raise pytest.UsageError(f"--bkchaos-runtime={runtime}: choose one of {RUNTIMES}")
    seed = config.getoption("bkchaos_seed")
    config.stash[SEED_KEY] = seed if seed is not None else int.from_bytes(os.urandom(3))


def pytest_report_header(config: pytest.Config) -> str:
    return (
        f"bkchaos: runtime {config.getoption('bkchaos_runtime')}, "
        f"store {config.getoption('bkchaos_store')}, seed {config.stash[SEED_KEY]}"
    )


# ---- fixtures -------------------------------------------------------------------------


class Chaos:
    """The `chaos` fixture: runs tests built from keyword arguments and the plugin options."""

    def __init__(self, item: pytest.Item) -> None:
        self.item = item

    @property
    def runs(self) -> list[ChaosRun]:
        """This test's runs so far, in order (a marked test's run is the first)."""
        return self.item.stash.get(RUNS_KEY, [])

    def spec(self, spec: TestSpec | None = None, **overrides: Any) -> TestSpec:
        """The TestSpec to run: `spec` or the defaults, then `overrides`; store and time
        limit come from the options, the runtime and the seed too unless the test sets them."""
        unknown = sorted(set(overrides) - SPEC_FIELDS)
        if unknown:
            raise UserError(f"unknown chaos arguments {unknown}; use TestSpec fields")
        config = self.item.config
        data = {} if spec is None else {k: getattr(spec, k) for k in SPEC_FIELDS}
        data.update({k: _as_field(k, v) for k, v in overrides.items()})
        data.setdefault("name", store_name(self.item.name))
        data.setdefault("seed", config.stash[SEED_KEY])
        if "runtime" not in overrides:  # a test may name its own (runtime="sim")
            data["runtime"] = config.getoption("bkchaos_runtime")
        data["store"] = config.getoption("bkchaos_store")
        if config.getoption("bkchaos_time_limit") is not None:
            data["time_limit"] = config.getoption("bkchaos_time_limit")
        return TestSpec(**data)

    def __call__(self, spec: TestSpec | None = None, **overrides: Any) -> ChaosRun:
        """Run one chaos test to completion (cluster up, workload, faults, checks, down)."""
        from harness.runner import run_test

        full = self.spec(spec, **overrides)
        run_dir, results = run_test(full)
        run = ChaosRun(full, run_dir, results)
        self.item.stash.setdefault(RUNS_KEY, []).append(run)
        self.item.user_properties.append(("bkchaos_run", str(run_dir)))
        self.item.add_report_section("call", "bkchaos", run.summary())
        _hypothesis_note(run.summary())
        return run


def _as_field(name: str, value: Any) -> Any:
    """Lists as tuples, and one name where a tuple is due (`nemesis="kill"`) as a 1-tuple."""
    if isinstance(value, list):
        return tuple(value)
    if isinstance(value, str) and name in TUPLE_FIELDS:
        return (value,)
    return value


def _hypothesis_note(text: str) -> None:
    """Inside a Hypothesis test, print `text` with the falsifying example (to replay it)."""
    try:
        from hypothesis import note
        from hypothesis.errors import InvalidArgument
    except ImportError:
        return
    with contextlib.suppress(InvalidArgument):  # raised outside @given
        note(text)


@pytest.fixture
def chaos(request: pytest.FixtureRequest) -> Chaos:
    """Run chaos tests from a test body: `run = chaos(nemesis=["kill"], time_limit=10)`."""
    return Chaos(request.node)


@pytest.fixture(scope="module")
def bk_cluster(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LocalCluster]:
    """A running cluster for one module: ZooKeeper, 3 bookies and 2 client agents.

    Module scope: faults a module injects end with it. SIGTERM counts as Ctrl-C while it
    lives, so a killed pytest still runs this teardown and leaves no process behind.
    """
    runtime = request.config.getoption("bkchaos_runtime")
    if runtime != "local":
        pytest.fail(f"bk_cluster supports the local runtime only, not {runtime!r}", pytrace=False)
    from harness.runtime.local import LocalCluster

    cluster = LocalCluster(tmp_path_factory.mktemp("bk_cluster"), bookie_count=3, client_count=2)
    with sigterm_as_interrupt():
        try:
            yield cluster.up()
        finally:
            cluster.down()


@pytest.fixture(autouse=True)
def _bkchaos_marker(request: pytest.FixtureRequest) -> None:
    """Run the chaos test a `chaos` marker describes, before the test body."""
    marker = request.node.get_closest_marker("chaos")
    if marker is None:
        return
    kwargs = dict(marker.kwargs)
    expect = kwargs.pop("expect", "valid")
    kwargs.pop("anomalies", None)
    test_count = kwargs.pop("test_count", 1)
    try:
        if expect not in EXPECTATIONS or marker.args:
            raise UserError(
                f"it takes keyword arguments only and expect='valid' or 'invalid', "
                f"got args {marker.args} expect={expect!r}"
            )
        if isinstance(test_count, bool) or not isinstance(test_count, int) or test_count < 1:
            raise UserError(f"test_count must be a whole number of runs >= 1, got {test_count!r}")
        chaos = request.getfixturevalue("chaos")
        first_seed = chaos.spec(**kwargs).seed
        for i in range(test_count):  # like `bkchaos test --test-count`: seeds seed, seed+1, …
            request.node.stash[MARKED_KEY] = i + 1
            if chaos(**{**kwargs, "seed": first_seed + i}).valid is False:
                break  # Jepsen's rule: the first invalid run ends the series
    except UserError as exc:
        problem = str(exc)
    else:
        return
    pytest.fail(f"bad @pytest.mark.chaos: {problem}", pytrace=False)


# ---- verdicts and reporting -----------------------------------------------------------


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_call(item: pytest.Item) -> None:
    """Fail a marked test whose run's verdict is not the expected one (body not run)."""
    marker = item.get_closest_marker("chaos")
    runs = item.stash.get(RUNS_KEY, [])
    if marker is None or not runs:
        return
    expect = marker.kwargs.get("expect", "valid")
    wanted = set(marker.kwargs.get("anomalies", ()))
    run = runs[item.stash.get(MARKED_KEY, 1) - 1]  # the marker's last run: the verdict
    if run.valid is not EXPECTATIONS[expect]:
        pytest.fail(f"expected a {expect} run, got {run.summary()}", pytrace=False)
    if wanted and not wanted & set(run.anomaly_types):
        pytest.fail(
            f"expected one of the anomalies {sorted(wanted)}, got {run.summary()}", pytrace=False
        )


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """Attach links to the runs' reports for pytest-html, when it is installed."""
    report = yield
    runs = item.stash.get(RUNS_KEY, [])
    if report.when == "call" and runs:
        try:
            from pytest_html import extras
        except ImportError:
            return report
        links = [
            extras.url(str((r.report or r.run_dir).resolve()), name=f"bkchaos {r.run_dir.name}")
            for r in runs
        ]
        report.extras = [*getattr(report, "extras", []), *links]
    return report
