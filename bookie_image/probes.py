"""Protocol coverage probes: named corners of the protocol, counted when a run reaches them.

A chaos run that finds nothing says little unless we know which narrow windows of the
protocol it went through. The bookie and the client call :func:`reach` at those corners
(fencing reaching its coverage threshold, a recovery read answered negative, a write-back
during recovery, …); whoever runs them — the simulation in-process, a node's event log in
a real process — listens and counts. With no listener, :func:`reach` is one truth test.

Every probe is declared once in :data:`PROBES` with the passage of the reference material
it comes from, so a report can say what was and was not reached.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, NamedTuple

__all__ = [
    "PROBES",
    "Listener",
    "Probe",
    "UnknownProbeError",
    "coverage",
    "listening",
    "logged",
    "reach",
]

Listener = Callable[[str, dict[str, Any]], None]
"""Called with the probe's name and the fields the caller gave (ledger, entry, bookie…)."""


class Probe(NamedTuple):
    """A protocol corner and the passage of the reference material that describes it:
    ``reference`` is the number of a /work/shared/reference file (README there), and
    ``passage`` is quoted from it verbatim (a test checks that it is there). A ``per_add``
    probe is reached on every add (for a fault to aim at one add, not as coverage): a real
    process logs only its first reach (`logged`), or its log would grow with the adds."""

    corner: str
    reference: str
    passage: str
    per_add: bool = False
    side: str = "client"
    """Who reaches it: "bookie" or "client" (an agent's client library). A fault a probe
    triggers aims ``@self`` at the node that reached it, which only a bookie can be."""


_FENCING = "that bookie will not accept any further regular writes to that ledger ever again"
_STOP_OLD_WRITER = "This prevents the original client from continuing to perform writes"
_COVERAGE = (
    "Fencing reaches quorum coverage when no ack quorum in the current ensemble are not fenced"
)
_UNKNOWN = "Unknown (an error or timeout occurred so we just don’t know)"
_WRITE_BACK = (
    "For each entry that it successfully reads, it writes it back to the ensemble of bookies again."
)
_CLOSE = "If all the writes are successful (reach AQ) then the last action is to close the ledger"
_NEVER_FORGET = "never allow a bookie to respond with a NoSuchEntry or NoSuchLedger response"
_TERM_REFUSED = (
    "If a bookie has a higher term, it rejects the request with an InvalidTerm response."
)
_TRUNCATE = "it deletes all entries with a higher entry id"
_NOOP = "adding a no-op entry with a new “truncate” flag as the last entry to be recovered"
_ENSEMBLE_CHANGE = "resending all uncommitted entries to the new bookie"
_UNFLUSHED = (
    "A crash can cause the loss of acknowledged entries as all the unflushed entries will be lost."
)
_INDEX_SAYS = "if the index on a bookie says it exists locally, then it definitely should exist"


def _bookie(corner: str, reference: str, passage: str) -> Probe:
    """A probe a bookie reaches."""
    return Probe(corner, reference, passage, side="bookie")


PROBES: dict[str, Probe] = {
    # -- the bookie ----------------------------------------------------------------------
    "bookie-fenced": _bookie("a bookie fences a ledger it had not fenced", "003", _FENCING),
    "bookie-fenced-add-refused": _bookie(
        "a fenced bookie refuses a writer's regular add (EFENCED)", "003", _FENCING
    ),
    "bookie-recovery-add-on-fenced": _bookie(
        "a fenced bookie accepts a recovery add (write-back)",
        "003",
        "Writing entries is idempotent and does not cause duplication or ordering issues.",
    ),
    "bookie-recovery-add-new-entry": _bookie(
        "a bookie accepts a recovery add (write-back) of an entry beyond the last it holds: "
        "the write-back brings it a copy it lacked",
        "003",
        _WRITE_BACK,
    ),
    "bookie-readonly": _bookie(
        "a bookie turns read-only (disk full or I/O error)",
        "003",
        "the safest way of decommissioning a bookie is simply to set it to readonly",
    ),
    "bookie-readonly-add-refused": _bookie(
        "a read-only bookie refuses an add (EREADONLY)",
        "003",
        "the safest way of decommissioning a bookie is simply to set it to readonly",
    ),
    "bookie-cookie-mismatch": _bookie(
        "a bookie refuses to start: its disks' cookies do not match ZooKeeper's",
        "003",
        "The BookKeeper cookie prevents a bookie from booting in this case",
    ),
    "bookie-corrupt-entry-read": _bookie(
        "a read finds a stored entry that does not verify: answered EIO (unknown)",
        "003",
        _UNKNOWN,
    ),
    "bookie-read-after-restart": _bookie(
        "a bookie restarted on its old disks serves its first entry read", "003", _NEVER_FORGET
    ),
    "journal-replay-intact": _bookie(
        "a restart replays journal records, every file intact to its end", "003", _NEVER_FORGET
    ),
    "journal-replay-torn-tail": _bookie(
        "a restart finds a journal file ending in a torn (short) record",
        "003",
        "Writes are added to the ledger storage write cache then acknowledged, skipping the "
        "journal completely.",
    ),
    "journal-replay-corrupt": _bookie(
        "a restart finds a journal record whose checksum does not match", "003", _NEVER_FORGET
    ),
    "journal-rolled": _bookie(
        "a bookie's journal file reaches its size limit and the next file is started "
        "(BookKeeper's journalMaxSizeMB)",
        "003",
        _UNFLUSHED,
    ),
    "journal-replay-crossed-files": _bookie(
        "a restart replays from a checkpoint inside one journal file on into later files",
        "003",
        _UNFLUSHED,
    ),
    "entrylog-rolled": _bookie(
        "a checkpoint finds the entry log full and starts the next one (BookKeeper's logSizeLimit)",
        "003",
        _INDEX_SAYS,
    ),
    "bookie-index-reloaded": _bookie(
        "a restart finds entries a checkpoint flushed to the ledger index (the journal holds "
        "only what came after)",
        "003",
        "if the index on a bookie says it exists locally, then it definitely should exist",
    ),
    "unbounded-term-raised": _bookie(
        "a bookie raises a ledger's term for a request carrying a higher one",
        "000",
        "If a bookie has a ledger term that is lower than or equal to the ledger term of a "
        "request, it accepts the request and updates its ledger term.",
    ),
    "unbounded-stale-term-add": _bookie(
        "an add of an older term arrives after a newer term: refused (EINVALIDTERM)",
        "000",
        _TERM_REFUSED,
    ),
    "unbounded-stale-term-read": _bookie(
        "a fencing or recovery read of an older term arrives after a newer term: refused",
        "000",
        _TERM_REFUSED,
    ),
    "unbounded-truncate-applied": _bookie(
        "a bookie stores an entry carrying the truncate flag", "000", _TRUNCATE
    ),
    "unbounded-truncate-dropped": _bookie(
        "the truncate flag drops dirty entries a bookie held beyond it", "000", _TRUNCATE
    ),
    # -- the client: recovery ------------------------------------------------------------
    "recovery-started": Probe(
        "a recovery marks the ledger IN_RECOVERY",
        "003",
        "Recovery begins with the client changing the status of the ledger from OPEN to "
        "IN_RECOVERY in its metadata.",
    ),
    "recovery-fence-exact": Probe(
        "fencing reaches quorum coverage with some bookies of the last fragment unfenced: "
        "exactly the (E−AQ)+1 threshold, not every bookie",
        "003",
        _COVERAGE,
    ),
    "recovery-fence-unreachable": Probe(
        "fencing reaches quorum coverage although some bookie gave no usable answer",
        "003",
        _COVERAGE,
    ),
    "recovery-fence-failed": Probe(
        "fencing cannot reach quorum coverage: the recovery fails", "003", _COVERAGE
    ),
    "recovery-read-negative": Probe(
        "a recovery read answered negative (no such entry / ledger)",
        "003",
        "Negative (the entry does not exist on that bookie)",
    ),
    "recovery-read-unknown": Probe(
        "a recovery read answered with an error or an entry that does not verify",
        "003",
        _UNKNOWN,
    ),
    "recovery-read-timeout": Probe(
        "a recovery read got no answer (timeout, connection lost)", "003", _UNKNOWN
    ),
    "recovery-negative-threshold": Probe(
        "recovery reads reach the (WQ−AQ)+1 negative threshold: the entry is absent",
        "003",
        "The client simply counts the number of negative responses and if the count reaches "
        "quorum coverage, then the entry is unrecoverable.",
    ),
    "recovery-positive-after-negative": Probe(
        "an entry is recovered on a positive answer after negative ones",
        "003",
        "That is, a single positive recovery read can lead the client to decide an entry is "
        "recoverable.",
    ),
    "recovery-unknown-abort": Probe(
        "recovery reads end with neither threshold met: the recovery aborts",
        "003",
        "Instead ledger recovery is aborted, to be retried again.",
    ),
    "recovery-empty": Probe(
        "a recovery finds no entry at all in the ledger (nothing landed before it)",
        "003",
        "There may be subsequent entries that were committed but they need to be discovered.",
    ),
    "recovery-writeback": Probe("a recovery writes recovered entries back", "003", _WRITE_BACK),
    "recovery-writeback-bookie-failed": Probe(
        "a bookie fails a write-back add during recovery (a fault during write-back)",
        "003",
        _WRITE_BACK,
    ),
    "recovery-writeback-failed": Probe(
        "the write-back fails: the recovery aborts without closing", "003", _CLOSE
    ),
    "recovery-closed": Probe("a recovery closes the ledger", "003", _CLOSE),
    "recovery-closed-new-fragment": Probe(
        "a recovery closes the ledger with a fragment its write-back added (a bookie it "
        "replaced while writing back)",
        "003",
        _CLOSE,
    ),
    "recovery-close-lost-race": Probe(
        "a recovery's close finds the ledger no longer IN_RECOVERY in its term (CAS lost)",
        "003",
        _CLOSE,
    ),
    # -- the client: writing -------------------------------------------------------------
    "client-add-sent": Probe(
        "a client sends an entry to the bookies of its write set (none has it yet)",
        "004",
        "每次寫入都從 E 個 Bookie 中順序挑選出 Qw 個節點(writeSet)並行發送數據。",
        per_add=True,
    ),
    "client-add-fenced": Probe(
        "a writer's add is refused as fenced or of an older term: the writer stops",
        "003",
        _STOP_OLD_WRITER,
    ),
    "client-follow-closed": Probe(
        "a follower tailing an open ledger sees it closed and stops at its last entry",
        "003",
        "For the rest of the life of this closed ledger, other clients that perform reads "
        "against the ledger will never read past the Last Entry Id.",
    ),
    "ensemble-change": Probe("a writer begins an ensemble change", "001", _ENSEMBLE_CHANGE),
    "ensemble-change-adds-pending": Probe(
        "an ensemble change begins with adds pending beyond the LAC",
        "001",
        "The new fragment starts at the beginning of the uncommitted zone.",
    ),
    "ensemble-change-in-recovery": Probe(
        "a recovery's write-back replaces a bookie (an ensemble change during recovery)",
        "001",
        _ENSEMBLE_CHANGE,
    ),
    "ensemble-change-lost-to-recovery": Probe(
        "a writer's ensemble change finds the metadata taken by a recovery or newer term",
        "003",
        _STOP_OLD_WRITER,
    ),
    "ensemble-change-no-replacement": Probe(
        "an ensemble change finds no spare writable bookie",
        "001",
        "As soon as a write to a bookie fails, we must be able to complete an ensemble change "
        "in order to be able to resume and get entries acknowledged.",
    ),
    "metadata-cas-conflict": Probe(
        "a metadata compare-and-set loses to a concurrent update and re-reads",
        "001",
        _ENSEMBLE_CHANGE,
    ),
    # -- the client: unbounded ledgers ---------------------------------------------------
    "unbounded-takeover-started": Probe(
        "a takeover raises the ledger's term in the metadata",
        "000",
        "When a new client wants to take over a ledger it increments the term in the ledger "
        "metadata and then starts ledger recovery.",
    ),
    "unbounded-takeover-empty": Probe(
        "a takeover ends a term in which no entry landed (before the first entry)",
        "000",
        "When a new client wants to take over a ledger it increments the term in the ledger "
        "metadata and then starts ledger recovery.",
    ),
    "unbounded-takeover-lost": Probe(
        "a takeover or recovery is overtaken by a newer term (EINVALIDTERM or CAS)",
        "000",
        "When a client receives an InvalidTerm response it should disengage.",
    ),
    "unbounded-takeover": Probe("a takeover reopens the ledger in its new term", "000", _NOOP),
    "unbounded-truncating-noop": Probe(
        "a truncating no-op reaches every bookie of the last fragment", "000", _NOOP
    ),
    "unbounded-truncating-noop-incomplete": Probe(
        "a truncating no-op misses a bookie of the last fragment: the recovery fails",
        "000",
        "We must guarantee that this last entry is written to all bookies of the last fragment",
    ),
    "unbounded-leftover-noop": Probe(
        "a recovery finds a no-op that no metadata records (a takeover that failed midway)",
        "000",
        _NOOP,
    ),
}
"""probe name -> the protocol corner it marks and the reference passage describing it.
Names are kebab-case, prefixed by the component (`bookie-…`, `journal-…`, `entrylog-…`,
`recovery-…`, `ensemble-…`, `client-…`, `metadata-…`, `unbounded-…`); they are stable: coverage
figures of past runs and the search's corpus key on them."""

_listeners: list[Listener] = []


class UnknownProbeError(KeyError):
    """A probe reached under a name nobody declared (a typo would silently count nothing)."""


def reach(name: str, **fields: Any) -> None:
    """Mark that the running code reached probe ``name``; free when nobody listens."""
    if not _listeners:
        return
    if name not in PROBES:
        raise UnknownProbeError(name)
    for listener in tuple(_listeners):
        listener(name, fields)


def logged(emit: Callable[..., None]) -> Listener:
    """A listener that writes each probe reached as a structured log event ``probe``
    (``emit(event, **fields)``, as `EventLog.emit`): how a real process reports them, for
    the harness to count from the node logs after the run. A `per_add` probe is written
    once per listener (its count there says which processes reached it, not how often)."""
    written: set[str] = set()

    def log(name: str, fields: dict[str, Any]) -> None:
        if PROBES[name].per_add:
            if name in written:
                return
            written.add(name)
        emit("probe", probe=name, **fields)

    return log


@contextmanager
def listening(listener: Listener) -> Iterator[None]:
    """Call ``listener`` for every probe reached while the block runs."""
    _listeners.append(listener)
    try:
        yield
    finally:
        _listeners.remove(listener)


def coverage(counts: dict[str, int]) -> dict[str, int]:
    """Every declared probe with its count (0 when never reached), in name order: the
    shape of `results.json`'s ``coverage``. A count under an undeclared name is an error."""
    unknown = set(counts) - set(PROBES)
    if unknown:
        raise UnknownProbeError(", ".join(sorted(unknown)))
    return {name: counts.get(name, 0) for name in sorted(PROBES)}
