"""Cookie reconciliation rules (no ZooKeeper: the decision is a pure function)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bookie_image.bookie.cookies import Cookie, CookieRefused, reconcile

J, L = Path("/d/journal"), Path("/d/ledgers")


def cookie() -> Cookie:
    return Cookie.new("b1:3181", J, (L,))


def test_new_bookie_when_no_cookie_anywhere() -> None:
    assert reconcile(cookie(), None, {J: None, L: None}) == "new"


def test_matching_cookies_are_ok() -> None:
    c = cookie()
    assert reconcile(cookie(), c, {J: c, L: c}) == "ok"


def test_deleted_zk_cookie_is_restored_from_intact_dirs() -> None:
    c = cookie()
    assert reconcile(cookie(), None, {J: c, L: c}) == "restore-zk"


def test_wiped_dir_is_refused_naming_the_dir() -> None:
    c = cookie()
    with pytest.raises(CookieRefused) as err:
        reconcile(cookie(), c, {J: c, L: None})
    assert err.value.dir == L
    assert "wiped" in str(err.value) and "delete the ZooKeeper cookie" in str(err.value)


def test_foreign_disk_is_refused() -> None:
    c, other = cookie(), cookie()
    with pytest.raises(CookieRefused, match="does not match") as err:
        reconcile(cookie(), c, {J: c, L: other})
    assert err.value.dir == L


def test_changed_dirs_are_refused() -> None:
    c = cookie()
    expected = Cookie.new("b1:3181", J, (L, Path("/d/more")))
    with pytest.raises(CookieRefused, match="ledger_dirs"):
        reconcile(expected, c, {J: c, L: c, Path("/d/more"): None})


def test_unreadable_cookie_is_refused() -> None:
    with pytest.raises(CookieRefused, match="unreadable"):
        reconcile(cookie(), None, {J: ValueError("bad json"), L: None})


def test_round_trip() -> None:
    c = cookie()
    assert Cookie.decode(c.encode()) == c
    with pytest.raises(ValueError):
        Cookie.decode(b"{}")
