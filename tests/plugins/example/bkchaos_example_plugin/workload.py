"""`append-only`: a workload (entry point `bkchaos.workloads`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from core.generator import Context
from workloads.common import BaseWorkload, Op


@dataclass
class AppendOnlyWorkload(BaseWorkload):
    """Writers that only ever append: each creates a ledger, appends `per_ledger` entries
    and closes it. The final phase reads every ledger back, closed."""

    per_ledger: int = 20

    def next_op(self, ctx: Context) -> Op | Any:
        p: int = ctx.process  # type: ignore[assignment]
        ledger = self.writing.get(p)
        if ledger is None:
            return self.create()
        if self.acked.get(ledger, -1) + 1 >= self.per_ledger:
            return {"f": "close", "value": {"ledger": ledger}}
        return self.append(ctx, ledger)

    def learn(self, process: int, op: Op, kind: str, value: Any, error: str | None) -> None:
        if op["f"] == "create" and kind == "ok":
            self.writing[process] = value["ledger"]
        elif op["f"] == "close" or (op["f"] == "append" and kind != "ok"):
            self.writing.pop(process, None)
