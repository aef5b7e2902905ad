"""The mutator of `bkchaos bench mutants`: which mutants it lists, that each changes its
module and still compiles, and that the worktree is never written."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from harness.bench.mutants import (
    DEFECTS,
    PROTOCOL_MODULES,
    MutantResult,
    mutants,
    mutated_source,
    sample,
    summarise,
)
from harness.cli import main

ROOT = Path(__file__).resolve().parents[2]
KINDS = {"boundary", "comparison", "constant", "removed-statement", "skipped-check"}


@pytest.fixture(scope="module")
def every() -> list:
    return mutants(ROOT)


def test_every_kind_is_drawn_from_every_protocol_module(every: list) -> None:
    assert {m.kind for m in every} == KINDS
    assert {m.module for m in every} == set(PROTOCOL_MODULES)
    assert len({m.name for m in every}) == len(every)  # a survivor's name says which one


def test_observing_code_is_not_mutated(every: list) -> None:
    """Probes, BUGGIFY points, event logs and seeded-bug switches change nothing a correct
    run does: their mutants would be equivalent by construction."""
    for mutant in every:
        assert not any(w in mutant.change for w in ("reach(", "buggify", ".emit(", "bugs."))


def test_each_sampled_mutant_changes_its_module_and_compiles(every: list) -> None:
    before = {m: (ROOT / m).read_text() for m in PROTOCOL_MODULES}
    for mutant in sample(every, 40, seed=3):
        original = ast.unparse(ast.parse(before[mutant.module]))
        source = mutated_source(ROOT, mutant)
        assert source != original, mutant.name
        compile(source, mutant.module, "exec")
    assert {m: (ROOT / m).read_text() for m in PROTOCOL_MODULES} == before


def test_a_sample_spreads_over_the_kinds_and_repeats_with_its_seed(every: list) -> None:
    picked = sample(every, 10, seed=1)
    assert {m.kind for m in picked} == KINDS
    assert picked == sample(every, 10, seed=1) and picked != sample(every, 10, seed=2)


def test_the_score_counts_caught_mutants_only(every: list) -> None:
    results = [
        MutantResult(every[0], "caught", 4.0, "lost-append", 12, 5.0),
        MutantResult(every[1], "survived", None, None, 50, 60.0),
        MutantResult(every[2], "crashed", None, None, 0, 1.0, "ImportError"),
    ]
    summary = summarise(results)
    assert (summary["caught"], summary["crashed"], summary["score"]) == (1, 1, 0.333)
    assert summary["median_s_to_catch"] == 4.0


def test_every_realistic_defect_still_applies_and_compiles() -> None:
    """A defect whose code moved would silently test the correct build: it must apply."""
    for defect in DEFECTS:
        source = defect.source(ROOT)
        assert source != (ROOT / defect.module).read_text(), defect.name
        compile(source, defect.module, "exec")


def test_match_lists_only_the_mutants_it_names_and_refuses_a_name_none_has(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["bench", "mutants", "--match", "journal.py:", "--list"])
    assert exited.value.code == 0
    listed = capsys.readouterr().out.splitlines()
    assert listed and all(name.startswith("bookie_image/bookie/journal.py:") for name in listed)
    assert len(listed) == sum(m.module.endswith("journal.py") for m in mutants(ROOT))
    with pytest.raises(SystemExit) as exited:
        main(["bench", "mutants", "--match", "no such mutant", "--list"])
    assert exited.value.code == 254 and "--match" in capsys.readouterr().err


def test_match_picks_realistic_defects_by_name(capsys: pytest.CaptureFixture[str]) -> None:
    """`--defects --match` tries only the defects whose name holds the text, in order."""
    with pytest.raises(SystemExit) as listed:
        main(["bench", "mutants", "--defects", "--list", "--match", "fragment"])
    assert listed.value.code == 0
    names = capsys.readouterr().out.splitlines()
    assert names == [d.name for d in DEFECTS if "fragment" in d.name] and len(names) >= 2
