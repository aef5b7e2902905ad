"""The public surface of bookie_image.client: what it exports and how its errors read."""

import inspect

import pytest

import bookie_image.client as client
from bookie_image.client import errors


def test_all_is_exactly_the_public_names() -> None:
    assert all(hasattr(client, name) for name in client.__all__)
    public = {n for n in vars(client) if not n.startswith("_") and n[0].isupper()}
    assert public == set(client.__all__)


def test_every_error_is_exported_with_a_code() -> None:
    classes = {
        name
        for name, obj in vars(errors).items()
        if inspect.isclass(obj) and issubclass(obj, errors.BKError)
    }
    assert classes == set(errors.__all__) <= set(client.__all__)


@pytest.mark.parametrize("happened", [True, False])
def test_errors_carry_code_and_may_have_happened(happened: bool) -> None:
    err = client.LedgerFencedError("fenced by a recovery", may_have_happened=happened)
    assert err.code == "EFENCED" and err.may_have_happened is happened
    assert str(err).startswith("EFENCED: fenced by a recovery")
    other = client.BookieError("b1: EIO", may_have_happened=False, code="EIO")
    assert other.code == "EIO" and "did not happen" in str(other)
