"""Every value that reaches a node's root shell is quoted, and inventory hosts are host
names or addresses: hostile strings (Hypothesis) never change the shape of a script."""

from __future__ import annotations

import shlex
import string

import pytest
from hypothesis import given
from hypothesis import strategies as st

from harness.errors import UserError
from harness.runtime.ssh import read_inventory, valid_host
from nemesis.net import _link_shaping, drop_rules, loss_rules

BENIGN = "192.0.2.77"
hostile = st.text(min_size=1).filter(lambda s: "\0" not in s)


def _same_shape(build, value: str) -> None:
    """`build([value])` splits into the tokens `build([BENIGN])` does, with BENIGN's
    tokens carrying `value` whole: the value is one word, never shell syntax."""
    expected = [t.replace(BENIGN, value) for t in shlex.split(build([BENIGN]))]
    assert shlex.split(build([value])) == expected


@given(hostile)
def test_partition_rules_quote_addresses(value: str) -> None:
    _same_shape(drop_rules, value)


@given(hostile)
def test_loss_rules_quote_addresses(value: str) -> None:
    _same_shape(lambda addresses: loss_rules(0.1, addresses), value)


@given(hostile)
def test_link_shaping_quotes_addresses(value: str) -> None:
    _same_shape(lambda addresses: _link_shaping("tbf rate 1mbit", addresses), value)


SAFE = set(string.ascii_letters + string.digits + ".:-")


@given(hostile)
def test_a_valid_host_holds_no_shell_syntax(value: str) -> None:
    if valid_host(value):
        assert set(value) <= SAFE, value


@pytest.mark.parametrize("host", ["10.0.0.1", "fe80::1", "db-1.example.org", "h1", "localhost."])
def test_host_names_and_addresses_are_accepted(host: str) -> None:
    assert valid_host(host)


@pytest.mark.parametrize(
    "host",
    ["10.0.0.1;touch /tmp/x", "$(reboot)", "-oProxyCommand=x", "a b", "fe80::1%$x", "", "a..b"],
)
def test_an_inventory_host_that_is_not_a_name_or_address_is_refused(tmp_path, host) -> None:
    inventory = tmp_path / "hosts.toml"
    inventory.write_text(f"[[hosts]]\nhost = {host!r}\n".replace("'", '"'))
    with pytest.raises(UserError, match="host must be a host name or an IP address"):
        read_inventory(inventory)


def test_host_key_checking_is_strict_unless_the_inventory_says_accept_new(tmp_path) -> None:
    inventory = tmp_path / "hosts.toml"
    inventory.write_text(
        '[[hosts]]\nhost = "h1"\n[[hosts]]\nhost = "h2"\nhost_keys = "accept-new"\n'
    )
    assert [h.host_keys for h in read_inventory(inventory)] == ["strict", "accept-new"]
    inventory.write_text('host_keys = "yes"\n[[hosts]]\nhost = "h1"\n')
    with pytest.raises(UserError, match="host_keys must be one of"):
        read_inventory(inventory)
