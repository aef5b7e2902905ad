"""The corpus search's shrinker simplifies what the search drew, never what the user gave."""

from __future__ import annotations

from dataclasses import replace

from harness.runtime.sim import SimSpec
from harness.sim.corpus import SHRUNK_SETTINGS, Candidate, Space, _simpler

GIVEN = SimSpec(bookies=4, concurrency=16, write_quorum=3, ack_quorum=3, takeovers=0.5)


def settings_changed(space: Space, candidate: Candidate) -> set[str]:
    return {
        name
        for option in _simpler(candidate, space)
        for name in SHRUNK_SETTINGS
        if getattr(option.spec, name) != getattr(candidate.spec, name)
    }


def test_settings_the_user_gave_are_kept() -> None:
    space = Space(GIVEN, workloads=("ledger",), kinds=("kill",), draw=frozenset())
    assert settings_changed(space, Candidate(GIVEN, ())) == set()


def test_drawn_settings_go_back_to_the_searchs_own_not_the_library_defaults() -> None:
    space = Space(GIVEN, workloads=("ledger",), kinds=("kill",), draw=frozenset({"concurrency"}))
    drawn = replace(GIVEN, concurrency=8)
    options = _simpler(Candidate(drawn, ()), space)
    assert settings_changed(space, Candidate(drawn, ())) == {"concurrency"}
    assert {o.spec.concurrency for o in options} == {8, 16}  # 16: GIVEN's, not SimSpec()'s 4
    assert all(o.spec.bookies == 4 for o in options)
