"""A test is one plain, serialisable value (Jepsen's test map), saved as `test.json`.

The CLI, the pytest plugin and the nightly driver all build this same object; everything
random in a run derives from `seed`, so `test.json` is enough to re-run it.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from typing import Any

import workloads as workload_registry
from bookie_image import bugs
from checkers.result import FORMAT
from harness.errors import UserError
from nemesis.disk import CORRUPT_MODES
from nemesis.grudge import NAMES as GRUDGE_NAMES
from nemesis.kinds import (
    KINDS,
    ROLE_TARGET_KINDS,
    RUNTIME_NEMESES,
    SIM_CLIENT_TARGET_KINDS,
)
from nemesis.net import packet_destinations, parsed_packet
from nemesis.schedule import check_steps, schedule_kinds

WORKLOADS = tuple(workload_registry.WORKLOADS)
"""The workloads' names (workloads/__init__.py declares each with its factory)."""
PIPELINED_WORKLOADS = ("ledger", "log", "unbounded")
"""The workloads whose writers `--pipeline` gives co-writers."""
SIM_CORRUPT_MODES = ("flip", "tail")
"""The `--corruption` modes the simulation performs (not `truncate` anywhere)."""
RUNTIMES = tuple(RUNTIME_NEMESES)
MAX_ENTRY_SIZE = 1 << 20
MAX_OP_SHARE = 0.5
"""At most half the ops may be takeovers (or writer crashes), so writers still get appends in."""
OP_SHARE_WORKLOADS = {"takeovers": ("ledger", "log", "unbounded"), "writer_crashes": ("ledger",)}
"""The workloads that have each share of ops (`--takeovers`, `--writer-crashes`): a share
given to another workload would be silently ignored, so it is refused."""
NEMESIS_ORDERS = ("shuffled", "nested")
"""`--nemesis-order` (nemesis.combined): CombinedCycle's shuffled bag, or NestedCycle."""
TARGETS = ("one", "minority", "writer", "zk", "client")
"""`--targets`: bookies (one, a minority, or every bookie of the ensemble the newest open
ledger is being written to) or another role's nodes."""


@dataclass(frozen=True)
class TestSpec:
    """Everything that defines a run."""

    __test__ = False  # not a pytest test class, despite the name

    name: str = "bkchaos"
    runtime: str = "local"
    workload: str = "ledger"
    nemesis: tuple[str, ...] = ()
    nemesis_interval: float = 5.0
    nemesis_order: str = "shuffled"
    """How several seeded fault kinds combine (NEMESIS_ORDERS): drawn in a shuffled order
    and overlapping by chance, or nested in the order `nemesis` gives them (each started
    while the ones before it hold, on other nodes)."""
    targets: str = "one"
    """What seeded faults hit (TARGETS): one bookie, a minority of the bookies, the
    current writer's bookies, the ZooKeeper node(s) or a client agent."""
    grudge: str = ""
    """The partitions' grudge: a name (nemesis.grudge.NAMES) or a JSON `{node: [nodes]}`;
    empty: drawn per partition (nemesis.schedule.DRAWN_GRUDGES)."""
    corruption: str = ""
    """What a `corrupt` fault does (nemesis.disk.CORRUPT_MODES): bit flips anywhere, a
    truncation anywhere, or a crash that loses the last write fsynced to the newest entry
    logs; empty: the nemesis's default (flips)."""
    packet: str = ""
    """How a seeded `packet` fault shapes its node's egress: `key=value` pairs of
    nemesis.net.NETEM_KEYS and `rate` ("rate=200kbit", "delay_ms=100,loss_pct=5"); empty:
    the nemesis's default (a 50±10 ms delay). Loss and rate alone need no netem (iptables
    statistic, tbf: nemesis.net.packet_plan). `to=b1+b2`
    shapes only what the node sends to those nodes (a link)."""
    time_limit: float = 30.0
    soak_epoch: float = 0.0
    """A soak: the workload starts afresh every this many seconds (workloads/soak.py), so
    that the history is checked in segments; 0: one workload for the whole run."""
    concurrency: int = 4
    clients: int = 2
    rate: float = 200.0
    op_timeout: float = 10.0
    bookies: int = 3
    zookeepers: int = 1
    """ZooKeeper servers: 1, or an odd ensemble (docker and ssh runtimes)."""
    ensemble: int = 3
    write_quorum: int = 2
    ack_quorum: int = 2
    digest: str = "crc32c"
    id_bits: int = 64
    guaranteed_write_quorum: bool = False
    """Ledgers keep every entry pending until all WQ bookies have it (reference 000)."""
    entry_size: int = 0
    """Payloads are padded to this many bytes (0: as short as they come, a few bytes)."""
    takeovers: float | None = None
    """The share of ops that take over what another process is writing right now, the
    writer failover the faults must survive: of a `ledger` writer's ops, recovering another
    writer's ledger (default 1%); of the ops of a `log` or `unbounded` process holding no
    stream, taking a stream over (default 2%). None: the workload's default."""
    writer_crashes: float = 0.0
    """The `ledger` workload's share of ops at which a writer crashes: it walks away from its
    ledger between two appends, leaving it open with its last entry not yet covered by any
    LAC (as a crashed broker does), for the next takeover to recover."""
    pipeline: int = 1
    """Appends in flight per ledger (`ledger`, `log` and `unbounded` workloads): each
    writer's ledger is shared by this many workers on its client agent, as a broker
    pipelines a topic's adds."""
    bugs: tuple[str, ...] = ()
    seed: int = 0
    store: str = "store"
    inventory: str = ""
    """The ssh runtime's inventory file (harness.runtime.ssh): the hosts to run on."""
    ssh_accept_new: bool = False
    """ssh: record unknown host keys instead of refusing them (OpenSSH's accept-new)."""
    schedule: tuple[dict[str, Any], ...] = ()
    """Explicit fault steps replayed as given instead of the seeded FaultCycle."""
    argv: tuple[str, ...] = field(default=(), compare=False)

    def __post_init__(self) -> None:
        if self.schedule and not self.nemesis:  # the schedule says which nemeses it needs
            object.__setattr__(self, "nemesis", self._schedule_kinds())
        self.validate()

    def _validate_targets(self) -> None:
        if self.targets not in TARGETS:
            raise UserError(f"--targets {self.targets!r}: choose one of {TARGETS}")
        if self.targets in ("zk", "client"):
            wrong = [k for k in self.nemesis if k not in ROLE_TARGET_KINDS]
            simulated = self.targets == "client" and set(self.nemesis) <= {*SIM_CLIENT_TARGET_KINDS}
            if wrong or self.runtime == "local" or (self.runtime == "sim" and not simulated):
                raise UserError(
                    f"--targets {self.targets} takes only {ROLE_TARGET_KINDS} faults on the docker "
                    f"or ssh runtime, and {SIM_CLIENT_TARGET_KINDS} on client agents in the sim "
                    f"(got {list(self.nemesis)} on {self.runtime})"
                )
        if self.targets == "writer" and self.runtime == "sim":
            raise UserError("--targets writer needs a real runtime; the sim takes one or minority")
        if self.grudge:
            if "partition" not in self.nemesis:
                raise UserError("--grudge shapes partitions: add partition to --nemesis")
            try:
                parsed_grudge(self.grudge)
            except ValueError as exc:
                raise UserError(f"--grudge {self.grudge!r}: {exc}") from None
        if self.corruption:
            if self.corruption not in CORRUPT_MODES or "corrupt" not in self.nemesis:
                raise UserError(
                    f"--corruption {self.corruption!r} shapes corrupt faults: choose one of "
                    f"{CORRUPT_MODES} and add corrupt to --nemesis"
                )
            if self.schedule:
                raise UserError(
                    "--corruption shapes seeded corruptions; a --schedule's corrupt steps say "
                    "their own (value.mode): drop one of the two"
                )
            if self.runtime == "sim" and self.corruption not in SIM_CORRUPT_MODES:
                raise UserError(
                    f"--corruption {self.corruption}: the simulation performs {SIM_CORRUPT_MODES}"
                )

        if self.packet:
            if "packet" not in self.nemesis:
                raise UserError("--packet shapes packet faults: add packet to --nemesis")
            if self.schedule:
                raise UserError(
                    "--packet shapes seeded packet faults; a --schedule's start-packet steps "
                    "carry their own parameters: drop one of the two"
                )
            try:
                shaping = parsed_packet(self.packet)
                packet_destinations(shaping, [*self.bookie_names(), *self.client_names()])
            except ValueError as exc:
                raise UserError(f"--packet {self.packet!r}: {exc}") from None

    def validate(self) -> None:
        """Refuse a test that cannot run, naming the parameter and what to do."""
        if self.workload not in WORKLOADS:
            raise UserError(f"unknown workload {self.workload!r}; choose one of {WORKLOADS}")
        known = tuple(KINDS)
        unknown = [n for n in self.nemesis if n not in known]
        if unknown:
            raise UserError(f"unknown nemesis {unknown}; choose from {known}")
        if self.runtime not in RUNTIMES:
            raise UserError(f"unknown runtime {self.runtime!r}; choose one of {RUNTIMES}")
        unsupported = [n for n in self.nemesis if n not in RUNTIME_NEMESES[self.runtime]]
        if unsupported:
            raise UserError(
                f"nemesis {unsupported} is not supported on the {self.runtime} runtime "
                f"(it supports {RUNTIME_NEMESES[self.runtime]}); see docs/nemeses.md"
            )
        if self.zookeepers != 1 and (self.runtime in ("local", "sim") or self.zookeepers % 2 == 0):
            raise UserError(
                f"--zk {self.zookeepers}: a ZooKeeper ensemble needs an odd number of servers "
                "and the docker or ssh runtime (the local and sim runtimes run one)"
            )
        self._validate_targets()
        if (self.runtime == "ssh") != bool(self.inventory):
            raise UserError(
                "the ssh runtime needs --inventory FILE (its hosts), and only it takes one"
            )
        if self.ssh_accept_new and self.runtime != "ssh":
            raise UserError("--ssh-accept-new is for --runtime ssh only")
        if not 1 <= self.ack_quorum <= self.write_quorum <= self.ensemble:
            raise UserError(
                f"need 1 <= AQ <= WQ <= E, got E={self.ensemble} WQ={self.write_quorum} "
                f"AQ={self.ack_quorum}"
            )
        if self.ensemble > self.bookies:
            raise UserError(
                f"an ensemble of {self.ensemble} needs at least {self.ensemble} bookies, "
                f"but --bookies is {self.bookies}"
            )
        if self.id_bits not in (64, 128):
            raise UserError(f"--id-bits must be 64 or 128, got {self.id_bits}")
        if not 0 <= self.entry_size <= MAX_ENTRY_SIZE:
            raise UserError(f"--entry-size must be 0..{MAX_ENTRY_SIZE}, got {self.entry_size}")
        for name, workloads in OP_SHARE_WORKLOADS.items():
            share, flag = getattr(self, name), f"--{name.replace('_', '-')}"
            if share is not None and not 0 <= share <= MAX_OP_SHARE:
                raise UserError(f"{flag} must be a fraction 0..{MAX_OP_SHARE}, got {share}")
            if share and self.workload not in workloads:
                raise UserError(
                    f"{flag}: the {self.workload} workload has no such ops; "
                    f"use one of {workloads} or drop {flag}"
                )
        if self.nemesis_order not in NEMESIS_ORDERS:
            raise UserError(
                f"--nemesis-order {self.nemesis_order!r}: choose one of {NEMESIS_ORDERS}"
            )
        if self.nemesis_order == "nested" and (len(self.nemesis) < 2 or self.schedule):
            raise UserError(
                "--nemesis-order nested nests seeded faults of two or more kinds: give "
                "--nemesis with at least two kinds (outermost first) and no --schedule"
            )
        if self.soak_epoch < 0:
            raise UserError("--soak-epoch must be positive")
        for name in ("time_limit", "rate", "op_timeout", "nemesis_interval"):
            if getattr(self, name) <= 0:
                raise UserError(f"--{name.replace('_', '-')} must be positive")
        try:
            bugs.parse(",".join(self.bugs))
        except bugs.UnknownBugError as exc:
            raise UserError(f"--bug: {exc}") from None
        if self.concurrency < 1 or self.clients < 1:
            raise UserError("--concurrency and --clients must be at least 1")
        if self.pipeline > 1 and self.workload not in PIPELINED_WORKLOADS:
            raise UserError(
                f"--pipeline: the {self.workload} workload has no writers to pipeline; "
                f"use one of {PIPELINED_WORKLOADS} or drop --pipeline"
            )
        if not 1 <= self.pipeline <= max(1, self.concurrency // self.clients):
            raise UserError(
                f"--pipeline {self.pipeline}: each ledger is appended to by that many workers "
                f"of one client agent, and {self.clients} agents share {self.concurrency} "
                "workers; lower it or raise --concurrency"
            )
        missing = [k for k in self._schedule_kinds() if k not in self.nemesis]
        if missing:
            raise UserError(f"the schedule uses {missing}: add them to --nemesis or omit it")

    def bookie_names(self) -> list[str]:
        return [f"b{i}" for i in range(1, self.bookies + 1)]

    def client_names(self) -> list[str]:
        return [f"c{i}" for i in range(1, self.clients + 1)]

    def faulted_clients(self) -> list[str]:
        """The client agents a schedule may fault: none on the local runtime, whose
        nemeses act on bookie processes only."""
        return [] if self.runtime == "local" else self.client_names()

    def _schedule_kinds(self) -> tuple[str, ...]:
        """The nemesis kinds of a schedule that can replay on this cluster."""
        try:
            check_steps(self.schedule, self.bookie_names(), self.faulted_clients())
        except ValueError as exc:
            raise UserError(f"{exc}; fix the schedule file or draw a new one") from None
        return schedule_kinds(self.schedule)

    def to_json(self) -> str:
        return json.dumps({"format": FORMAT, **asdict(self)}, indent=2)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TestSpec:
        """A TestSpec from a test.json; one without `format` is format 1."""
        data = dict(data)
        version = data.pop("format", FORMAT)
        if version != FORMAT:
            raise UserError(
                f"test.json has format {version!r}; this bkchaos reads format {FORMAT}: "
                "upgrade bkchaos"
            )
        known = {f.name for f in fields(cls)}
        extra = sorted(set(data) - known)
        if extra:
            raise UserError(f"test.json has unknown keys {extra}")
        tuples = {k: tuple(v) for k, v in data.items() if isinstance(v, list)}
        return cls(**{**data, **tuples})


def parsed_grudge(text: str) -> str | dict[str, list[str]]:
    """`--grudge` as the partition nemesis takes it: a name, or `{node: [nodes]}` JSON."""
    if not text.lstrip().startswith("{"):
        if text not in GRUDGE_NAMES:
            raise ValueError(
                f"a grudge is one of {GRUDGE_NAMES} or a JSON object {{node: [nodes]}}"
            )
        return text
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"not valid JSON ({exc})") from None
    if not isinstance(value, dict) or not all(
        isinstance(v, list) and all(isinstance(n, str) for n in v) for v in value.values()
    ):
        raise ValueError('give each node the list of nodes it drops: {"b1": ["b2", "zk1"]}')
    return value


def op_shares_for(workload: str, settings: dict[str, Any]) -> dict[str, Any]:
    """`settings` with the shares of ops that `workload` has none of unset, so one set of
    settings (the detection bench's, a fault suite's) serves every workload."""
    unread = [name for name, workloads in OP_SHARE_WORKLOADS.items() if workload not in workloads]
    return {**settings, **{name: getattr(TestSpec, name) for name in unread if name in settings}}
