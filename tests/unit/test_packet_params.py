"""The `packet` fault's parameters: tc's rate units, and bad values refused before any
node is touched (the real nemesis and the simulation share the checks)."""

from __future__ import annotations

import asyncio
import re

import pytest

from nemesis.net import (
    TBF_MIN_BURST_BYTES,
    PacketNemesis,
    _link_shaping,
    _u32_match,
    netem_arguments,
    netem_params,
    packet_destinations,
    parsed_packet,
    rate_bits_per_second,
    shaping_qdisc,
)


@pytest.mark.parametrize(
    ("rate", "bits_per_second"),
    [("1mbit", 1e6), ("200kbps", 1.6e6), ("1.5Gbit", 1.5e9), (5000, 5000.0), ("64bps", 512.0)],
)
def test_rates_read_as_tc_reads_them(rate: object, bits_per_second: float) -> None:
    assert rate_bits_per_second(rate) == pytest.approx(bits_per_second)


@pytest.mark.parametrize("rate", ["fast", "0", "-1mbit", "1xbit", "", "inf", "10%"])
def test_a_rate_tc_would_not_take_is_refused_with_an_example(rate: str) -> None:
    with pytest.raises(ValueError, match=re.escape('e.g. "1mbit"')):
        rate_bits_per_second(rate)


def test_the_defaults_apply_when_an_op_gives_no_shaping() -> None:
    params = netem_params({"nodes": ["b1"]})
    assert netem_arguments(params) == "delay 50ms 10ms"
    assert netem_params({"nodes": ["b1"], "rate": "1mbit"}) == {"rate": "1mbit"}


def test_a_rate_limit_alone_is_a_token_bucket_and_anything_more_is_netem() -> None:
    """tbf is in nearly every kernel, netem is often left out (this machine's has none):
    a fault that only limits the rate should not need netem."""
    assert shaping_qdisc({"rate": "1mbit"}) == (
        f"tbf rate 1mbit burst {TBF_MIN_BURST_BYTES} latency 500ms"
    )
    assert shaping_qdisc({"rate": "1gbit"}).split()[4] == str(10**9 // 8 // 250)  # 4 ms
    assert shaping_qdisc({"rate": "1mbit", "loss_pct": 1}) == "netem loss 1% rate 1mbit"
    assert shaping_qdisc({"delay_ms": 50, "jitter_ms": 10}) == "netem delay 50ms 10ms"


def test_packet_options_read_as_op_parameters() -> None:
    assert parsed_packet("rate=200kbit") == {"rate": "200kbit"}
    assert parsed_packet("delay_ms=100, loss_pct=2.5") == {"delay_ms": 100, "loss_pct": 2.5}
    assert parsed_packet("rate=64kbit,to=b1+b2") == {"rate": "64kbit", "to": ["b1", "b2"]}


def test_a_shaped_link_sends_only_its_destinations_through_the_shaping() -> None:
    """An htb root whose default class passes everything; the shaped class carries the
    qdisc the whole interface would get, and a u32 filter per destination feeds it."""
    script = _link_shaping("tbf rate 64kbit burst 1600 latency 500ms", ["172.29.0.11"])
    commands = script.split(" && ")
    assert commands[1] == "tc qdisc add dev $dev root handle 1: htb default 1"
    assert "parent 1:2 handle 2: tbf rate 64kbit" in commands[4]
    assert commands[5].endswith("match ip dst 172.29.0.11/32 flowid 1:2")
    assert _u32_match("172.29.0.11") == "match ac1d000b/ffffffff at 16"  # as tc shows it


@pytest.mark.parametrize(
    ("to", "message"),
    [("b1", "a list of node names"), (["b9"], r"names \['b9'\], which are not nodes")],
)
def test_a_link_to_a_node_the_cluster_lacks_is_refused(to: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        packet_destinations({"to": to}, ["b1", "b2", "c1"])
    assert packet_destinations({"to": ["c1", "b1", "b1"]}, ["b1", "c1"]) == ["b1", "c1"]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("rate", "key=value"),
        ("delay_ms=x", "must be a number"),
        ("delay_ms=-1", "from 0 to"),
        ("jitter_ms=nan", "from 0 to"),
        ("rate=fast", "rate must be"),
        ("rate=1mbit,to=", "to=b1"),
    ],
)
def test_a_packet_option_that_cannot_apply_says_what_to_give(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parsed_packet(text)


class _Untouchable:
    """A runtime any use of which fails the test."""

    def __getattr__(self, name: str) -> object:
        raise AssertionError(f"the nemesis touched the runtime ({name}) before checking")


@pytest.mark.parametrize(
    ("value", "message"),
    [({"rate": "quick"}, "rate must be"), ({"reorder_pct": 10}, "give delay_ms too")],
)
def test_the_real_nemesis_refuses_bad_shaping_before_touching_a_node(
    value: dict[str, object], message: str
) -> None:
    nemesis = PacketNemesis(_Untouchable())  # type: ignore[arg-type]
    op = {"f": "start-packet", "value": {"nodes": ["b1"], **value}}
    with pytest.raises(ValueError, match=message):
        asyncio.run(nemesis.invoke(op))


@pytest.mark.parametrize("rate", ["1\nkbit", "1_000kbit", "1 kbit", "1e3bit", "1kbit;reboot"])
def test_a_rate_that_is_not_digits_and_a_unit_is_refused_before_any_shell(rate: str) -> None:
    """The rate reaches a root `sh -c` script: float() alone took newlines and underscores."""
    with pytest.raises(ValueError, match="rate must be"):
        shaping_qdisc({"rate": rate})
    with pytest.raises(ValueError, match="rate must be"):
        shaping_qdisc({"rate": rate, "loss_pct": 1})
