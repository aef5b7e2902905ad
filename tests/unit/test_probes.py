"""Protocol coverage probes: the table cites the reference, reach() costs nothing unheard,
every probe is placed in the product, and coverage always lists every declared probe."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pytest

import bookie_image
from bookie_image.bookie.events import EventLog
from bookie_image.probes import (
    PROBES,
    UnknownProbeError,
    coverage,
    listening,
    logged,
    reach,
)
from harness.coverage import count_logs, reached, unreached

REFERENCE_DIR = Path("/work/shared/reference")
REFERENCES = {"000", "001", "002", "003", "004"}
PRODUCT = Path(bookie_image.__file__).parent


def _words(text: str) -> str:
    return " ".join(text.split())


def test_every_probe_names_a_reference_and_a_passage() -> None:
    assert len(PROBES) >= 40
    for name, probe in PROBES.items():
        assert re.fullmatch(r"[a-z]+(-[a-z]+)+", name), name
        assert probe.reference in REFERENCES, name
        assert probe.corner and len(probe.passage) >= 20, name


@pytest.mark.skipif(not REFERENCE_DIR.is_dir(), reason="the reference material is not here")
def test_every_passage_is_quoted_verbatim_from_its_reference() -> None:
    texts = {
        path.name[:3]: _words(path.read_text(encoding="utf-8"))
        for path in REFERENCE_DIR.glob("00*_*.txt")
    }
    for name, probe in PROBES.items():
        assert _words(probe.passage) in texts[probe.reference], (name, probe.passage)


def test_every_declared_probe_is_placed_in_the_product_and_every_placed_one_declared() -> None:
    sources = {
        path: path.read_text(encoding="utf-8")
        for path in PRODUCT.rglob("*.py")
        if path.name != "probes.py"
    }
    text = "\n".join(sources.values())
    for name in PROBES:
        assert f'"{name}"' in text, f"probe {name} is declared but never reached anywhere"
    for source in sources.values():
        for name in re.findall(r'reach\(\s*"([a-z-]+)"', source):
            assert name in PROBES, name


def test_each_probe_is_reached_on_the_side_it_declares() -> None:
    """`side` is what aims a triggered fault's `@self`: a probe declared a bookie's is
    reached in the bookie's code only, a client's in the client library only."""
    placed: dict[str, set[str]] = {}
    for path in PRODUCT.rglob("*.py"):
        for name in re.findall(r'reach\(\s*"([a-z-]+)"', path.read_text(encoding="utf-8")):
            placed.setdefault(name, set()).add(path.relative_to(PRODUCT).parts[0])
    # `"a" if … else "b"` places two probes in one call
    for path in PRODUCT.rglob("*.py"):
        for pair in re.findall(r'reach\(\s*"([a-z-]+)" if .*? else "([a-z-]+)"', path.read_text()):
            for name in pair:
                placed.setdefault(name, set()).add(path.relative_to(PRODUCT).parts[0])
    assert {p.side for p in PROBES.values()} == {"bookie", "client"}
    for name, probe in PROBES.items():
        if name in placed:
            assert placed[name] == {probe.side}, (name, placed[name])
    assert {n for n, p in PROBES.items() if p.side == "bookie"} >= {
        "bookie-fenced",
        "unbounded-term-raised",
        "journal-replay-torn-tail",
    }


def test_reach_is_free_without_a_listener_and_strict_with_one() -> None:
    reach("no-such-probe", ledger=1)  # nobody listens: not even the name is looked up
    heard: list[tuple[str, dict[str, object]]] = []
    with listening(lambda name, fields: heard.append((name, fields))):
        reach("bookie-fenced", ledger=7)
        with pytest.raises(UnknownProbeError):
            reach("no-such-probe")
    reach("bookie-fenced", ledger=8)  # no longer heard
    assert heard == [("bookie-fenced", {"ledger": 7})]


def test_coverage_lists_every_probe_with_zeros_and_refuses_unknown_names() -> None:
    cov = coverage({"recovery-started": 2})
    assert list(cov) == sorted(PROBES)
    assert cov["recovery-started"] == 2
    assert sum(cov.values()) == 2
    assert reached(cov) == ["recovery-started"]
    assert "recovery-started" not in unreached(cov) and len(unreached(cov)) == len(PROBES) - 1
    with pytest.raises(UnknownProbeError):
        coverage({"no-such-probe": 1})


def test_a_real_process_logs_probes_and_the_harness_counts_them_from_node_logs(
    tmp_path: Path,
) -> None:
    stream = io.StringIO()
    events = EventLog(stream, bookie="b1:3181")
    with listening(logged(events.emit)):
        reach("bookie-fenced", ledger=3)
        reach("bookie-fenced", ledger=4)
        reach("journal-replay-intact", records=10)
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert lines[0]["event"] == "probe" and lines[0]["probe"] == "bookie-fenced"
    assert lines[0]["ledger"] == 3 and lines[0]["bookie"] == "b1:3181"

    (tmp_path / "b1").mkdir()
    (tmp_path / "c1").mkdir()
    (tmp_path / "b1" / "bookie.log").write_text(
        stream.getvalue() + "Traceback (most recent call last): probe\n"
    )
    (tmp_path / "c1" / "agent.log").write_text(
        '{"event": "ready", "port": 1}\n'
        '{"ts": 1.0, "event": "probe", "probe": "recovery-started", "ledger": 3}\n'
        '{"ts": 1.0, "event": "probe", "probe": "from-a-newer-image"}\n'
    )
    cov = count_logs(tmp_path)
    assert list(cov) == sorted(PROBES)
    assert cov["bookie-fenced"] == 2
    assert cov["journal-replay-intact"] == 1
    assert cov["recovery-started"] == 1
    assert sum(cov.values()) == 4


def test_a_real_process_logs_a_per_add_probe_once() -> None:
    """`client-add-sent` is reached on every add: its log lines would grow with the adds."""
    assert [name for name, probe in PROBES.items() if probe.per_add] == ["client-add-sent"]
    stream = io.StringIO()
    with listening(logged(EventLog(stream).emit)):
        for entry in range(3):
            reach("client-add-sent", ledger=1, entry=entry, bookies=["b1", "b2"])
        reach("bookie-fenced", ledger=1)
        reach("bookie-fenced", ledger=1)
    probes = [json.loads(line)["probe"] for line in stream.getvalue().splitlines()]
    assert probes == ["client-add-sent", "bookie-fenced", "bookie-fenced"]


def test_the_user_docs_list_every_probe() -> None:
    docs = (PRODUCT.parent / "docs" / "coverage.md").read_text(encoding="utf-8")
    for name in PROBES:
        assert f"| `{name}` |" in docs, name
