"""ssh host keys as OpenSSH checks them, against real sshd containers: an unknown key is
refused by default, recorded with `host_keys = "accept-new"`, and a key that differs from
the recorded one is refused either way."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa

from harness.errors import UserError
from harness.runtime.ssh import SshCluster, read_inventory
from harness.runtime.supervised import Node

pytestmark = [pytest.mark.docker, pytest.mark.timeout(900)]


def another_key(kind: str) -> str:
    """A fresh public key of `kind` in OpenSSH's format ("ssh-ed25519 AAAA…"). (The
    hosts share one image, and so their host keys: another host's would be the same.)"""
    if kind == "ssh-ed25519":
        private = ed25519.Ed25519PrivateKey.generate()
    elif kind.startswith("ecdsa-sha2-nistp"):
        curves = {"256": ec.SECP256R1(), "384": ec.SECP384R1(), "521": ec.SECP521R1()}
        private = ec.generate_private_key(curves[kind[-3:]])
    else:
        private = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    public = private.public_key().public_bytes(
        serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH
    )
    return public.decode()


def _reach_host(
    inventory_text: str, folder: Path, index: int = 0, accept_new: bool = False
) -> None:
    """Run `true` over ssh on one host of the inventory, as the runtime does (with
    `accept_new`, as `--ssh-accept-new` makes it)."""
    path = folder / "inventory.toml"
    path.write_text(inventory_text)
    host = read_inventory(path, accept_new)[index]
    cluster = SshCluster(
        folder, inventory=str(path), hosts=[host], nodes=[Node("h1", "client", host.host, 0)]
    )
    try:
        assert cluster._run("h1", ["true"])[0] == 0
    finally:
        cluster.down_connections()


def test_unknown_keys_are_refused_unless_accept_new_records_them(
    inventory: Path, tmp_path: Path
) -> None:
    known = tmp_path / "known_hosts"
    shared = re.sub(r"(?m)^(known_hosts|host_keys) = .*\n", "", inventory.read_text())
    strict = f'known_hosts = "{known}"\n{shared}'
    with pytest.raises(UserError, match=r"is not in .*known_hosts; add it"):
        _reach_host(strict, tmp_path)
    assert not known.exists() or known.read_text() == ""
    _reach_host(f'host_keys = "accept-new"\n{strict}', tmp_path)
    [recorded] = known.read_text().splitlines()
    host = read_inventory(tmp_path / "inventory.toml")[0].host
    assert recorded.startswith(f"{host} ")
    _reach_host(strict, tmp_path)  # recorded: now strict checking lets it in
    kind = recorded.split()[1]
    known.write_text(f"{host} {another_key(kind)}\n")  # as if the host had been replaced
    with pytest.raises(UserError, match="is not the one recorded"):
        _reach_host(f'host_keys = "accept-new"\n{strict}', tmp_path)
    with pytest.raises(UserError, match="is not the one recorded"):
        _reach_host(strict, tmp_path, accept_new=True)


def test_the_ssh_accept_new_flag_records_an_unknown_key_of_a_strict_inventory(
    inventory: Path, tmp_path: Path
) -> None:
    known = tmp_path / "known_hosts"
    shared = re.sub(r"(?m)^(known_hosts|host_keys) = .*\n", "", inventory.read_text())
    strict = f'known_hosts = "{known}"\nhost_keys = "strict"\n{shared}'
    with pytest.raises(UserError, match=r"is not in .*known_hosts; add it"):
        _reach_host(strict, tmp_path)
    _reach_host(strict, tmp_path, accept_new=True)
    [recorded] = known.read_text().splitlines()
    assert recorded.startswith(f"{read_inventory(tmp_path / 'inventory.toml')[0].host} ")
