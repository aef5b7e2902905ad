"""The seeded-bug switchboard: off by default, env-driven, unknown names rejected."""

import pytest

from bookie_image import bugs


def test_off_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(bugs.ENV_VAR, raising=False)
    assert bugs.active() == frozenset()
    assert not any(bugs.enabled(name) for name in bugs.KNOWN)


def test_env_switches_bugs_on(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(bugs.ENV_VAR, " no-journal-fsync, read-beyond-lac ,")
    assert bugs.enabled("no-journal-fsync")
    assert bugs.enabled("read-beyond-lac")
    assert not bugs.enabled("no-cookie")


def test_design_list_is_complete() -> None:
    assert len(bugs.KNOWN) == 12
    assert "metadata-blind-write" in bugs.KNOWN


@pytest.mark.parametrize("where", ["env", "query"])
def test_unknown_name_is_an_error_naming_the_known_ones(
    monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    if where == "env":
        monkeypatch.setenv(bugs.ENV_VAR, "no-journal-fsyncc")
        call = lambda: bugs.enabled("no-cookie")  # noqa: E731
    else:
        monkeypatch.delenv(bugs.ENV_VAR, raising=False)
        call = lambda: bugs.enabled("no-journal-fsyncc")  # noqa: E731
    with pytest.raises(bugs.UnknownBugError) as info:
        call()
    assert "no-journal-fsyncc" in str(info.value)
    assert "recovery-unknown-as-negative" in str(info.value)
