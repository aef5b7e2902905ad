"""A node's event log stops growing at its cap: one `log-capped` line, then only the rare
lifecycle events readers wait for (a peer flooding protocol errors cannot fill the disk)."""

from __future__ import annotations

import io
import json

from bookie_image.bookie.events import EventLog


def test_past_the_cap_only_lifecycle_events_are_written() -> None:
    stream = io.StringIO()
    log = EventLog(stream, max_bytes=1000, bookie="b1")
    for i in range(1000):
        log.emit("protocol-error", peer="10.0.0.9:1", error="x" * 50, request_id=i)
    log.emit("stopping")
    assert len(stream.getvalue()) < 1000 + 3 * 200  # the cap plus three short lines
    events = [json.loads(line)["event"] for line in stream.getvalue().splitlines()]
    assert events[-2:] == ["log-capped", "stopping"]
    assert events.count("log-capped") == 1
