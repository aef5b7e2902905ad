"""Which mechanism a packet fault uses: netem where a parameter needs it, iptables'
statistic match and tbf for loss and rate alone (kernels without netem have them), and
the proof that reads the loss rules back as the kernel reports them."""

from __future__ import annotations

import pytest

from nemesis.base import FaultNotProven
from nemesis.net import (
    LOSS_CHAIN,
    check_loss_rules,
    loss_rules,
    netem_params,
    packet_plan,
)


@pytest.mark.parametrize(
    ("value", "qdisc_kind", "loss", "mechanism"),
    [
        ({"loss_pct": 5}, None, 0.05, "iptables statistic"),
        ({"rate": "1mbit"}, "tbf", None, "tc tbf"),
        ({"loss_pct": 10, "rate": "1mbit"}, "tbf", 0.1, "iptables statistic + tc tbf"),
        ({"delay_ms": 100, "loss_pct": 5}, "netem", None, "tc netem"),
        ({"corrupt_pct": 1}, "netem", None, "tc netem"),
        ({}, "netem", None, "tc netem"),  # the default: a 50±10 ms delay
    ],
)
def test_netem_only_where_a_parameter_needs_it(
    value: dict, qdisc_kind: str | None, loss: float | None, mechanism: str
) -> None:
    plan = packet_plan(netem_params(value))
    assert (plan.qdisc.split()[0] if plan.qdisc else None) == qdisc_kind
    assert plan.loss_probability == loss
    assert plan.mechanism == mechanism


def test_netem_does_everything_once_it_is_needed() -> None:
    """Loss with a delay stays netem's (one mechanism, as before), rate included."""
    plan = packet_plan(netem_params({"delay_ms": 20, "loss_pct": 5, "rate": "1mbit"}))
    assert plan.qdisc == "netem delay 20ms 0ms loss 5% rate 1mbit"


def test_loss_drops_what_the_interface_sends_or_only_what_goes_to_a_link() -> None:
    whole = loss_rules(0.05, [])
    assert f"iptables -I OUTPUT -j {LOSS_CHAIN}" in whole
    assert whole.endswith(
        f"iptables -A {LOSS_CHAIN} -o $dev -m statistic --mode random "
        "--probability 0.0500000000 -j DROP"
    )
    link = loss_rules(0.25, ["10.0.0.3", "10.0.0.4"]).split(" && ")
    assert [rule.split()[6] for rule in link[-2:]] == ["10.0.0.3/32", "10.0.0.4/32"]


SHOWN = (
    f"-N {LOSS_CHAIN}\n-A {LOSS_CHAIN} -d 10.0.0.3/32 -o eth0 -m statistic --mode random "
    "--probability 0.25000000000 -j DROP\n"
)


def test_the_proof_is_the_rule_as_the_kernel_lists_it() -> None:
    check_loss_rules(SHOWN, 0.25, ["10.0.0.3"])
    with pytest.raises(FaultNotProven, match=r"to 10\.0\.0\.4 at probability 0\.25"):
        check_loss_rules(SHOWN, 0.25, ["10.0.0.3", "10.0.0.4"])
    with pytest.raises(FaultNotProven, match=r"at probability 0\.5 "):
        check_loss_rules(SHOWN, 0.5, ["10.0.0.3"])
    with pytest.raises(FaultNotProven, match="on the interface"):
        check_loss_rules(f"-N {LOSS_CHAIN}\n", 0.25, [])
