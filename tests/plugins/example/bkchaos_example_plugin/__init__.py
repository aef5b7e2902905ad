"""A bkchaos plugin: a workload, a fault kind and a checker (docs/extending.md).

One module per extension: each entry point loads only what it names, and none of them
imports a registry that is still loading another.
"""
