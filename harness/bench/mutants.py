"""`bkchaos bench mutants`: how many small defects of the protocol code the no-hint search catches.

Seeded bugs were chosen knowing the harness; mutants are not. A small AST mutator lists
every place of the protocol modules where one of five mutations applies — a comparison's
boundary moved (`<` to `<=`…), a comparison reversed (`==` to `!=`, `in` to `not in`), an
integer constant off by one, a statement removed (a call whose result is unused), a check
skipped (an `if` whose body only raises or returns, never taken) — and a seeded sample of
them is tried one at a time: the mutated module is written into a *copy* of the source
tree (the worktree is never touched) and the no-hint `bkchaos search` runs in a child
process on that copy with a budget (its tests in worker processes on every CPU, `--jobs`:
they import the copy too, as the child's `PYTHONPATH` and `sys.path` name it first). A
mutant is caught when the search reports an invalid history. Survivors are the list to
study: each is an equivalent mutant or a blind spot of the workloads, nemeses or checkers.
"""

from __future__ import annotations

import ast
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

PROTOCOL_MODULES = (
    "bookie_image/client/quorum.py",
    "bookie_image/client/recovery.py",
    "bookie_image/client/ledger.py",
    "bookie_image/client/metadata.py",
    "bookie_image/bookie/bookie.py",
    "bookie_image/bookie/journal.py",
    "bookie_image/bookie/storage.py",
)

_BOUNDARY = {ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt}
_REVERSED = {ast.Eq: ast.NotEq, ast.NotEq: ast.Eq, ast.In: ast.NotIn, ast.NotIn: ast.In}
_SYMBOL = {
    ast.Lt: "<",
    ast.LtE: "<=",
    ast.Gt: ">",
    ast.GtE: ">=",
    ast.Eq: "==",
    ast.NotEq: "!=",
    ast.In: "in",
    ast.NotIn: "not in",
}


@dataclass(frozen=True)
class Mutant:
    """One mutation: the module, the index of the node it changes in `ast.walk` order (so
    it can be re-applied to a fresh parse), its line, kind and what it does, and its
    column (two mutants may share a line)."""

    module: str
    node: int
    line: int
    kind: str
    change: str
    column: int = 0

    @property
    def name(self) -> str:
        return f"{self.module}:{self.line}:{self.column} {self.kind}: {self.change}"

    def source(self, root: Path) -> str:
        return mutated_source(root, self)


@dataclass(frozen=True)
class Defect:
    """A hand-written realistic defect of the protocol classes the search must catch
    (issue 33's list), as a one-place edit: `old` becomes `new` in `module`. Not a seeded
    bug: no switch, no name the product knows."""

    label: str
    module: str
    old: str
    new: str
    kind: str = "defect"

    @property
    def name(self) -> str:
        return f"{self.module} {self.label}"

    def source(self, root: Path) -> str:
        text = (root / self.module).read_text()
        if text.count(self.old) != 1:
            raise ValueError(f"{self.name}: the code it edits changed ({self.old!r})")
        return text.replace(self.old, self.new)


_STATE_MERGE = """\
        if st.key == NO_KEY and key != NO_KEY:
            st.key = key
        st.fenced = st.fenced or fenced
        st.term = max(st.term, term)
        st.lac = max(st.lac, lac)
"""
"""The lines between `Store.apply_state`'s snapshot of a ledger's state and its dirty check."""

DEFECTS = (
    Defect(
        "ensemble-change-ignores-recovery: a writer's ensemble change does not check that "
        "the ledger is still its own, so it races a recovery's fencing and wins",
        "bookie_image/client/ledger.py",
        "            self._still_owner(m)\n            return m.with_ensemble",
        "            return m.with_ensemble",
    ),
    Defect(
        "writeback-ensembles-forgotten: a recovery closes the ledger with the ensembles it "
        "read, not those its write-back moved to when a bookie failed during it",
        "bookie_image/client/recovery.py",
        "closed_at(m, last_entry, last_length), ensembles=writer.versioned.metadata.ensembles",
        "closed_at(m, last_entry, last_length), ensembles=metadata.ensembles",
    ),
    Defect(
        "recovery-add-skips-term: a bookie checks the term of writers' adds but not of "
        "recovery adds (an old takeover's write-back lands in a newer term)",
        "bookie_image/bookie/bookie.py",
        "refused = self._guard(lk, req.master_key, req.term)",
        "refused = self._guard(lk, req.master_key, None if req.recovery else req.term)",
    ),
    Defect(
        "recovery-skips-first-entry: a recovery (or takeover) that fences a ledger before "
        "its first entry is confirmed starts reading after entry 0",
        "bookie_image/client/recovery.py",
        "    entry_id = lac + 1\n",
        "    entry_id = max(lac, 0) + 1\n",
    ),
    Defect(
        "entrylog-roll-stale-offsets: a checkpoint that rolls over to a new entry log "
        "indexes the entries it writes there at offsets counted from the end of the old log",
        "bookie_image/bookie/storage.py",
        "                    log_id, file = self._log_for(where, rolled)\n"
        "                    buffers[where] = bytearray()\n"
        "                    bases[where] = (log_id, file.size)\n",
        "                    size = self._active[where][1].size if where in self._active else 0\n"
        "                    log_id, file = self._log_for(where, rolled)\n"
        "                    buffers[where] = bytearray()\n"
        "                    bases[where] = (log_id, size)\n",
    ),
    Defect(
        "fragment-lookup-off-by-one: the fragment holding an entry is looked up with the "
        "boundary on the wrong side, so the first entry of each new fragment is read from "
        "(and recovered against) the bookies of the fragment before it",
        "bookie_image/client/metadata.py",
        "            if first > entry_id:",
        "            if first >= entry_id:",
    ),
    Defect(
        "new-fragment-after-queued-adds: an ensemble change starts the new fragment after "
        "the adds already queued instead of at LAC+1, so the pending adds it re-sends to the "
        "replacement stay, by the metadata, on the bookie that failed",
        "bookie_image/client/ledger.py",
        "        first = min(self.lac + 1, next(iter(self._pending), self.lac + 1))",
        "        first = self.next_entry_id",
    ),
    Defect(
        "negative-threshold-off-by-one: recovery takes WQ-AQ explicit negatives as proof "
        "that an entry never reached an ack quorum, not (WQ-AQ)+1",
        "bookie_image/client/quorum.py",
        "    return config.write_quorum - config.ack_quorum + 1",
        "    return config.write_quorum - config.ack_quorum",
    ),
    Defect(
        "recovery-reads-writeback-fragment: once a bookie fails during the write-back, "
        "recovery reads the next entries from the write-back's new fragment, whose "
        "replacement bookie never had them",
        "bookie_image/client/recovery.py",
        "while (entry := await _recovery_read(ctx, metadata, master_key, entry_id, term))",
        "while (entry := await _recovery_read(\n"
        "        ctx, writer.versioned.metadata, master_key, entry_id, term\n"
        "    ))",
    ),
    Defect(
        "lac-piggyback-previous-entry: an add piggybacks the id of the entry before it as "
        "the LAC, as if pipelined adds were confirmed when the next one is sent",
        "bookie_image/client/ledger.py",
        "        lac = self.frozen_lac if self.recovery else self.lac",
        "        lac = self.frozen_lac if self.recovery else entry_id - 1",
    ),
    Defect(
        "fence-read-keeps-term: a bookie checks the term of a takeover's fencing and "
        "recovery reads but does not raise its own to it (only adds do), so the old writer's "
        "adds keep landing until the takeover writes",
        "bookie_image/bookie/bookie.py",
        "            req.master_key,\n            req.term,\n            -1,\n"
        "            req.term is None,",
        "            req.master_key,\n            None,\n            -1,\n"
        "            req.term is None,",
    ),
    Defect(
        "index-last-entry-by-count: after a restart a bookie rebuilds each ledger's last "
        "entry as its number of indexed entries minus one, as if it held every entry from 0",
        "bookie_image/bookie/storage.py",
        '"SELECT scope, ledger, MAX(entry) FROM entries GROUP BY scope, ledger"',
        '"SELECT scope, ledger, COUNT(entry) - 1 FROM entries GROUP BY scope, ledger"',
    ),
    Defect(
        "fence-not-checkpointed: a ledger's state is marked for the next checkpoint when its "
        "key, term or LAC changes but not when it is fenced, so a fence whose journal record "
        "a checkpoint released is forgotten at the next restart",
        "bookie_image/bookie/storage.py",
        "        before = (st.key, st.fenced, st.term, st.lac)\n"
        + _STATE_MERGE
        + "        if before != (st.key, st.fenced, st.term, st.lac):",
        "        before = (st.key, st.term, st.lac)\n"
        + _STATE_MERGE
        + "        if before != (st.key, st.term, st.lac):",
    ),
    Defect(
        "recovery-starts-after-last-stored: fencing takes the id of the last entry a fenced "
        "bookie stores for the LAC, not the LAC that entry carries, so recovery neither "
        "reads nor writes back the entries before it",
        "bookie_image/client/recovery.py",
        "                lac = max(lac, header.lac)",
        "                lac = max(lac, header.entry_id)",
    ),
    Defect(
        "reader-takes-fragment-start-as-confirmed: a reader's LAC read counts the last "
        "fragment's first entry as confirmed (not only the entries before it)",
        "bookie_image/client/ledger.py",
        "        lac = previous = max(self._lac, first - 1)",
        "        lac = previous = max(self._lac, first)",
    ),
    Defect(
        "replay-offset-every-file: journal replay starts every file at the checkpoint's "
        "offset, not only the checkpoint's own file (reachable only once a journal rolls "
        "over to a new file within one bookie run)",
        "bookie_image/bookie/journal.py",
        "        offset = start_offset if seq == start_seq else 0",
        "        offset = start_offset",
    ),
)


OBSERVING = ("bugs.enabled", "buggify.", "reach(", ".emit(")
"""Code that only observes or perturbs (seeded-bug switches, BUGGIFY points, probes, event
logs): mutating it changes nothing a correct run does, so those mutants are not drawn."""


def _sites(tree: ast.Module) -> Iterator[tuple[int, ast.AST, str, str]]:
    """(index, node, kind, change) for every mutation `tree` allows, in `ast.walk` order."""
    for index, node in enumerate(ast.walk(tree)):
        if isinstance(node, ast.Compare) and len(node.ops) == 1:
            op = type(node.ops[0])
            if op in _BOUNDARY:
                yield index, node, "boundary", f"{_SYMBOL[op]} -> {_SYMBOL[_BOUNDARY[op]]}"
            elif op in _REVERSED:
                yield index, node, "comparison", f"{_SYMBOL[op]} -> {_SYMBOL[_REVERSED[op]]}"
        elif (
            isinstance(node, ast.Constant)
            and type(node.value) is int
            and 0 <= node.value <= 64
            and getattr(node, "lineno", 0)
        ):
            yield index, node, "constant", f"{node.value} -> {node.value + 1}"
        elif isinstance(node, ast.Expr) and isinstance(node.value, (ast.Call, ast.Await)):
            yield index, node, "removed-statement", ast.unparse(node)[:80]
        elif isinstance(node, ast.If) and all(
            isinstance(s, (ast.Raise, ast.Return)) for s in node.body
        ):
            yield index, node, "skipped-check", f"if {ast.unparse(node.test)[:70]}: never taken"


def _not_logic(tree: ast.Module) -> set[int]:
    """ids of nodes that are not protocol logic: inside module-level assignments and
    class-level fields (constants of tables, dataclass defaults: configuration), and
    under an `if` that asks an `OBSERVING` switch (a BUGGIFY delay, a seeded bug's branch)."""
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and any(w in ast.unparse(node.test) for w in OBSERVING):
            skip.update(id(n) for n in ast.walk(node))
    for stmt in tree.body:
        bodies = [stmt]
        if isinstance(stmt, ast.ClassDef):
            bodies = [
                s for s in stmt.body if not isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef))
            ]
        for body in bodies:
            if isinstance(body, (ast.Assign, ast.AnnAssign, ast.Expr)):
                skip.update(id(n) for n in ast.walk(body))
    return skip


def mutants(root: Path, modules: tuple[str, ...] = PROTOCOL_MODULES) -> list[Mutant]:
    """Every mutant of `modules` under `root`, in a fixed order."""
    found = []
    for module in modules:
        tree = ast.parse((root / module).read_text())
        skip = _not_logic(tree)
        for index, node, kind, change in _sites(tree):
            if id(node) in skip or any(word in ast.unparse(node) for word in OBSERVING):
                continue
            line, column = getattr(node, "lineno", 0), getattr(node, "col_offset", 0)
            found.append(Mutant(module, index, line, kind, change, column))
    return found


def mutated_source(root: Path, mutant: Mutant) -> str:
    """The module's source with `mutant` applied (re-parsed, so formatting is ast's)."""
    tree = ast.parse((root / mutant.module).read_text())
    node = next(n for i, n in enumerate(ast.walk(tree)) if i == mutant.node)
    if isinstance(node, ast.Compare):
        op = type(node.ops[0])
        node.ops = [(_BOUNDARY.get(op) or _REVERSED[op])()]
    elif isinstance(node, ast.Constant):
        node.value = node.value + 1
    elif isinstance(node, ast.Expr):
        node.value = ast.Constant(None)  # the statement does nothing
    elif isinstance(node, ast.If):
        node.test = ast.Constant(False)
    else:
        raise ValueError(f"{mutant.name}: no such mutation site")
    return ast.unparse(ast.fix_missing_locations(tree))


@dataclass
class MutantResult:
    mutant: Mutant | Defect
    outcome: str  # caught | survived | crashed | timed out
    seconds_to_catch: float | None
    anomaly: str | None
    tests: int
    seconds: float
    detail: str = ""


HANG_GRACE_S = 120.0
"""Past twice its budget and this, a mutant's search is stopped: a mutation that makes the
product spin without moving the simulated clock never reaches the budget check of a search
that runs its tests itself (`--jobs 1`, or storing the find); with workers, the search
stops a spinning test at its budget's end."""


def run_mutant(
    root: Path, mutant: Mutant | Defect, budget: str, search_args: tuple[str, ...] = ()
) -> MutantResult:
    """Apply `mutant` to a copy of the source tree and run the no-hint search on it."""
    from bookie_image.image.build import PROJECT_PACKAGES  # it loads the docker SDK
    from harness.cli.search import parse_budget

    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="bkchaos-mutant-") as tmp:
        copy_root = Path(tmp) / "src"
        for package in PROJECT_PACKAGES:  # what a search imports, and nothing else
            shutil.copytree(
                root / package, copy_root / package, ignore=shutil.ignore_patterns("__pycache__")
            )
        (copy_root / mutant.module).write_text(mutant.source(root))
        command = [
            sys.executable,
            "-c",
            "from harness.cli import main; main()",
            *("search", "--runtime", "sim", "--budget", budget, "--json"),
            *("--store", str(Path(tmp) / "store"), *search_args),
        ]
        env = {**os.environ, "PYTHONPATH": str(copy_root), "PYTHONDONTWRITEBYTECODE": "1"}
        try:
            done = subprocess.run(
                command,
                cwd=copy_root,
                env=env,
                capture_output=True,
                text=True,
                timeout=parse_budget(budget) * 2 + HANG_GRACE_S,
            )
        except subprocess.TimeoutExpired:  # a test spun in the search's own process
            seconds = round(time.monotonic() - started, 1)
            return MutantResult(mutant, "timed out", None, None, 0, seconds, "search hung")
    seconds = round(time.monotonic() - started, 1)
    try:
        summary: dict[str, Any] = json.loads(done.stdout)
    except ValueError:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return MutantResult(mutant, "crashed", None, None, 0, seconds, last[:200])
    caught = summary.get("anomaly") is not None
    return MutantResult(
        mutant,
        "caught" if caught else "survived",
        summary.get("seconds_to_find"),
        summary.get("anomaly"),
        summary.get("examples", 0),
        seconds,
    )


def sample(all_mutants: list[Mutant], count: int, seed: int) -> list[Mutant]:
    """`count` mutants drawn with `seed`, spread over the kinds, in a fixed order."""
    rng = random.Random(seed)
    by_kind: dict[str, list[Mutant]] = {}
    for mutant in all_mutants:
        by_kind.setdefault(mutant.kind, []).append(mutant)
    for group in by_kind.values():
        rng.shuffle(group)
    picked: list[Mutant] = []
    while len(picked) < count and any(by_kind.values()):
        for kind in sorted(by_kind):
            if by_kind[kind] and len(picked) < count:
                picked.append(by_kind[kind].pop())
    return picked


def summarise(results: list[MutantResult]) -> dict[str, Any]:
    caught = [r for r in results if r.outcome == "caught"]
    times = sorted(r.seconds_to_catch for r in caught if r.seconds_to_catch is not None)
    return {
        "mutants": len(results),
        "caught": len(caught),
        "crashed": sum(r.outcome == "crashed" for r in results),
        "timed_out": sum(r.outcome == "timed out" for r in results),
        "score": round(len(caught) / len(results), 3) if results else None,
        "median_s_to_catch": times[len(times) // 2] if times else None,
        "results": [
            {**asdict(r), "mutant": asdict(r.mutant), "name": r.mutant.name} for r in results
        ],
    }
