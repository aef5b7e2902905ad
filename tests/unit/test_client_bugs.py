"""The seeded bugs as a value: off by default, read from the environment only when asked
(a process's entry point), unknown names rejected."""

import pytest

from bookie_image import bugs


def test_off_by_default() -> None:
    assert bugs.Bugs() == bugs.NO_BUGS
    assert not any(bugs.NO_BUGS.enabled(name) for name in bugs.KNOWN)


def test_env_switches_bugs_on_where_a_process_reads_it() -> None:
    seeded = bugs.Bugs.from_env({bugs.ENV_VAR: " no-journal-fsync, read-beyond-lac ,"})
    assert seeded == bugs.Bugs(("read-beyond-lac", "no-journal-fsync"))
    assert seeded.enabled("no-journal-fsync")
    assert seeded.enabled("read-beyond-lac")
    assert not seeded.enabled("no-cookie")
    assert bugs.Bugs.from_env({}) == bugs.NO_BUGS


def test_the_value_does_not_follow_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(bugs.ENV_VAR, "no-cookie")
    seeded = bugs.Bugs.from_env()
    monkeypatch.setenv(bugs.ENV_VAR, "")
    assert seeded.enabled("no-cookie")
    assert not bugs.NO_BUGS.enabled("no-cookie")


def test_design_list_is_complete() -> None:
    assert len(bugs.KNOWN) == 12
    assert "metadata-blind-write" in bugs.KNOWN


@pytest.mark.parametrize("where", ["env", "value", "query"])
def test_unknown_name_is_an_error_naming_the_known_ones(where: str) -> None:
    with pytest.raises(bugs.UnknownBugError) as info:
        if where == "env":
            bugs.Bugs.from_env({bugs.ENV_VAR: "no-journal-fsyncc"})
        elif where == "value":
            bugs.Bugs({"no-journal-fsyncc"})
        else:
            bugs.NO_BUGS.enabled("no-journal-fsyncc")
    assert "no-journal-fsyncc" in str(info.value)
    assert "recovery-unknown-as-negative" in str(info.value)
