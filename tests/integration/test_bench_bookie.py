"""`bkchaos bench bookie --json`: a real bookie (fsync on) and the echo baseline, side by side."""

from __future__ import annotations

import json

import pytest

from harness.cli import main


def test_bench_bookie_prints_every_level_and_the_ratio(capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["bench", "bookie", "--adds", "200", "--json"])
    assert exc.value.code == 0
    figures = json.loads(capsys.readouterr().out)
    for server in ("echo", "bookie"):
        assert [level["in_flight"] for level in figures[server]] == [1, 8, 64]
        assert all(level["adds"] == 200 and level["adds_per_s"] > 0 for level in figures[server])
    # Every add is acknowledged only after a journal fsync, so each level saw some.
    assert all(level["fsyncs_per_s"] > 0 for level in figures["bookie"])
    top = figures["bookie"][-1]["adds_per_s"] / figures["echo"][-1]["adds_per_s"]
    assert figures["ratio_at_max_in_flight"] == pytest.approx(top, abs=1e-3)
