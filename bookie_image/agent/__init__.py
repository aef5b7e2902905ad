"""The client agent: runs workload ops through the ledger client for a remote controller."""
