"""The core below workloads and nemeses: what every layer above shares.

Generators (`core.generator`), the history writer (`core.history`), why a run is valid or
not (`core.verdict`), plugins (`core.plugins`) and signal handling (`core.signals`). It
imports only the standard library; `workloads`, `nemesis` and `harness` build on it, never
the reverse.
"""
