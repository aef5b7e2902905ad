"""bkchaos checkers: pure functions from a history to a result (docs/history.md).

This package imports nothing else of the project. `check` is the entry point; the
sub-checkers and the history reader are exported for tools that compose their own.
"""

from checkers.availability import check_availability
from checkers.compose import CHECKERS, check, compose, root_first
from checkers.ensemble import check_ensembles
from checkers.graph import check_graph
from checkers.history import History, HistoryError, Op, index_history, read_ops
from checkers.ledger import FINDERS, check_ledgers
from checkers.liveness import check_liveness
from checkers.nemesis import check_nemesis
from checkers.perf import check_perf
from checkers.replication import check_replication
from checkers.result import MAX_CASES, merge_valid
from checkers.stats import check_stats
from checkers.stream import check_streams
from checkers.synth import synthesize

__all__ = [
    "CHECKERS",
    "FINDERS",
    "MAX_CASES",
    "History",
    "HistoryError",
    "Op",
    "check",
    "check_availability",
    "check_ensembles",
    "check_graph",
    "check_ledgers",
    "check_liveness",
    "check_nemesis",
    "check_perf",
    "check_replication",
    "check_stats",
    "check_streams",
    "compose",
    "index_history",
    "merge_valid",
    "read_ops",
    "root_first",
    "synthesize",
]
