"""The per-process timeline (Jepsen's timeline.html), paginated for huge histories.

`timeline.html` is one small viewer; the calls live in `timeline/pNNNN.js` files of
`CALLS_PER_PAGE` calls each, loaded by a <script> tag (which works from file://, unlike
fetch), so a million-op history is hundreds of small pages, never one 100 MB page.
An op is addressed as `timeline.html#op-N`, N being its history index.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec

from harness.report.run import NEMESIS, Call

CALLS_PER_PAGE = 2000
_MAX_LABEL = 90


def _short(value: Any) -> str:
    text = json.dumps(value, separators=(",", ":"), default=str)
    return text if len(text) <= _MAX_LABEL else text[: _MAX_LABEL - 1] + "…"


def _entries(entries: list[list[Any]]) -> str:
    if not entries:
        return "no entries"
    return f"{len(entries)} entries {entries[0][0]}‥{entries[-1][0]}"


def label(call: Call) -> str:
    """One line saying what a call did, for timeline boxes and anomaly op tables."""
    inv, done = call.inv, call.done
    raw = inv.decoded()
    v = raw if isinstance(raw, dict) else {}
    out = done.decoded() if done is not None and done.type == "ok" else None
    out = out if isinstance(out, dict) else {}
    f = inv.f
    if inv.process == NEMESIS:
        targets = v.get("nodes")
        return f"{f} {' '.join(map(str, targets))}" if targets else _with_value(f, raw)
    if f == "append":
        if "entry" in out:
            where = f"L{out['ledger']}:e{out['entry']}"
        else:  # not acked: the ledger it was for, or its stream (log workload)
            where = (
                f"L{v['ledger']}" if v.get("ledger") is not None else f"stream {v.get('stream')}"
            )
        return f"append {v.get('payload')!r} → {where}"
    if f == "read":
        text = f"read {v.get('mode')} L{v.get('ledger')}"
        if "lac" in out:
            text += f" → lac {out['lac']}, {_entries(out.get('entries') or [])}"
        return text
    if f == "read-lac":
        return f"read-lac L{v.get('ledger')}" + (f" → {out['lac']}" if "lac" in out else "")
    if f == "create":
        return "create" + (f" → L{out['ledger']}" if "ledger" in out else "")
    if f in ("recover", "close"):
        last = f" → last {out['last_entry']}" if "last_entry" in out else ""
        return f"{f} L{v.get('ledger')}{last}"
    return _with_value(f, raw)


def _with_value(f: str, value: Any) -> str:
    return f if value is None else f"{f} {_short(value)}"


def detail(call: Call) -> str:
    """What the tooltip adds to the label: error, node, the nemesis proof."""
    done = call.done
    parts = []
    if done is not None and done.error:
        parts.append(f"error {done.error}")
    node = (done or call.inv).node
    if node:
        parts.append(f"node {node}")
    value = done.decoded() if done is not None and call.inv.process == NEMESIS else None
    if isinstance(value, dict) and "proof" in value:
        parts.append(f"proof {_short(value['proof'])}")
    return "; ".join(parts)


def _row(call: Call) -> list[Any]:
    """[invoke index, completion index or -1, process, type, label, t s, latency ms, detail]."""
    inv, done = call.inv, call.done
    latency = round((done.time - inv.time) / 1e6, 3) if done is not None else None
    return [
        inv.index,
        done.index if done is not None else -1,
        str(inv.process),
        call.type,
        label(call),
        round(inv.time / 1e9, 4),
        latency,
        detail(call),
    ]


def write_pages(calls: list[Call], out_dir: Path) -> list[int]:
    """Write `out_dir/pNNNN.js` for calls in invocation order; return each page's first
    invoke index, which the viewer bisects to find the page of an op."""
    out_dir.mkdir(parents=True, exist_ok=True)
    for stale in out_dir.glob("p*.js"):
        stale.unlink()
    firsts = []
    for n, start in enumerate(range(0, len(calls), CALLS_PER_PAGE)):
        page = calls[start : start + CALLS_PER_PAGE]
        firsts.append(page[0].inv.index)
        rows = msgspec.json.encode([_row(c) for c in page])
        (out_dir / f"p{n:04d}.js").write_bytes(b"bkTimelinePage(%d,%s);\n" % (n, rows))
    return firsts
