"""Maintenance of a partitioned namespace: compaction and cleanup (engine-agnostic; Spark adapts
compaction in :mod:`lancepart.spark.compact`)."""
