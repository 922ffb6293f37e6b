"""Spark adapter: executors evaluate partition transforms on Arrow batches and write Lance
fragments; the driver plans and commits through the engine-agnostic ``lancepart.write`` path.

>>> from lancepart import spark as lps
>>> # lps.write(df, "/data/events", mode="append", batch_id="2025-12-10")
"""

from lancepart.spark.write import write

__all__ = ["write"]
