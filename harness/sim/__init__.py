"""The deterministic simulation behind the `sim` runtime (harness/runtime/sim.py).

`loop` (virtual time, tasks per node), `net` (TCP-like connections, partitions), `disk`
(fsync boundaries, power loss, corruption), `zk` (ZooKeeper semantics behind kazoo's
API), `cluster` (real bookies and clients wired onto those), `nemesis` (faults as
history ops) and `search` (Hypothesis search and shrinking of fault schedules).
"""
