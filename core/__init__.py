"""The core below workloads and nemeses: what every layer above shares.

Generators (`core.generator`), the history writer (`core.history`), the verdict of a run
(`core.verdict`) and signal handling (`core.signals`). It imports only the standard library
and `checkers`; `workloads`, `nemesis` and `harness` build on it, never the reverse.
"""
