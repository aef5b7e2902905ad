"""The ssh runtime's inventory file: hosts, defaults, and clear errors for bad ones."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.command_line import replay_command
from harness.errors import UserError
from harness.runtime.ssh import SshHost, read_inventory
from harness.testspec import TestSpec


def test_defaults_apply_to_every_host_and_each_may_override(tmp_path: Path) -> None:
    path = tmp_path / "hosts.toml"
    path.write_text(
        'user = "admin"\nkey = "~/k"\n'
        '[[hosts]]\nhost = "10.0.0.1"\n'
        '[[hosts]]\nhost = "10.0.0.2"\nport = 2222\nuser = "root"\n'
    )
    first, second = read_inventory(path)
    assert first == SshHost("10.0.0.1", 22, "admin", str(Path("~/k").expanduser()))
    assert (second.port, second.user) == (2222, "root")
    assert str(second) == "root@10.0.0.2:2222"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "lists no hosts"),
        ("hosts = 3", "lists no hosts"),
        ("[[hosts]]\nport = 22\n", "needs `host`"),
        ('[[hosts]]\nhost = "a"\npassword = "x"\n', "may have only"),
        ('[[hosts]]\nhost = "a"\nport = 70000\n', "port must be"),
        ("[[hosts]\n", "not valid TOML"),
    ],
)
def test_a_bad_inventory_is_a_user_error_saying_what_is_wrong(
    tmp_path: Path, text: str, message: str
) -> None:
    path = tmp_path / "hosts.toml"
    path.write_text(text)
    with pytest.raises(UserError, match=message):
        read_inventory(path)


def test_a_missing_inventory_is_a_user_error(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="cannot read the inventory"):
        read_inventory(tmp_path / "nope.toml")


def test_ssh_accept_new_overrides_the_inventory_and_is_recorded_in_the_run(
    tmp_path: Path,
) -> None:
    """`--ssh-accept-new` makes every host accept-new, whatever the inventory says; it is
    a setting of the test, so test.json records it and the replay command repeats it; it
    is refused on any other runtime."""
    path = tmp_path / "hosts.toml"
    path.write_text('[[hosts]]\nhost = "10.0.0.1"\n[[hosts]]\nhost = "h2"\nhost_keys = "strict"\n')
    assert {h.host_keys for h in read_inventory(path)} == {"strict"}
    assert {h.host_keys for h in read_inventory(path, accept_new=True)} == {"accept-new"}
    spec = TestSpec(runtime="ssh", inventory=str(path), ssh_accept_new=True)
    assert json.loads(spec.to_json())["ssh_accept_new"] is True
    assert "--ssh-accept-new" in replay_command(spec).split()
    assert "--ssh-accept-new" not in replay_command(TestSpec(runtime="local")).split()
    with pytest.raises(UserError, match="--ssh-accept-new is for --runtime ssh only"):
        TestSpec(runtime="local", ssh_accept_new=True)
