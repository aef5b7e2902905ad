"""The Spark pipeline of `bkchaos analyze` (DESIGN §8): many runs' histories as
DataFrames, the per-ledger anomalies recomputed relationally and checked against each
run's results.json, and trends across nights.

Imports only `checkers` and pyspark, so it can be shipped to a cluster on its own.
"""

from checkers.spark.anomalies import FINDERS, RELATIONAL, find_anomalies
from checkers.spark.pipeline import AnalysisError, analyze, require_store, session

__all__ = [
    "FINDERS",
    "RELATIONAL",
    "AnalysisError",
    "analyze",
    "find_anomalies",
    "require_store",
    "session",
]
