"""The bkchaos bookie: a BookKeeper-protocol storage server in asyncio.

Run it with ``python -m bookie_image.bookie --config FILE.toml`` (or ``bkchaos bookie``);
exit codes and readiness are documented in ``__main__``. Config keys: ``config``.

How a request flows: ``server`` (one asyncio Protocol per connection, sans-IO codec) →
``bookie`` (the protocol rules: master key, fence, terms, LAC, statuses) → ``journal``
(group commit: one fsync per batch, the answer only after it) → ``storage`` (memtables,
then entry logs and a SQLite index at each checkpoint). ``files`` is the only way to the
disk and records fsynced lengths for the power-loss nemesis; ``env`` holds the clock and
offload interfaces; ``cookies`` and ``registry`` guard identity and publish the bookie in
ZooKeeper; ``service`` wires it all; ``events`` writes the JSON log lines.
"""
