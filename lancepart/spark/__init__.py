"""Spark adapter: executors evaluate partition transforms on Arrow batches and write Lance
fragments; the driver plans and commits through the engine-agnostic ``lancepart.write`` path.
Reads and storage-partitioned joins plan on the driver through ``__manifest`` and scan
partition tables with pylance on the executors::

    from lancepart import spark as lps
    lps.write(df, "/data/events", mode="append", batch_id="2025-12-10")
    lps.read(spark, "/data/events", "event_date = DATE '2025-12-10'")
    lps.compact(spark, "/data/events", filter="event_date < DATE '2025-12-01'")
    lps.delete(spark, "/data/events", "user_id = 42")
    lps.update(spark, "/data/events", {"amount": "amount * 2"}, "user_id = 42")
    lps.search(spark, "/data/docs", "embedding", queries_df, k=10, id_column="qid")
    lps.merge(changes_df, "/data/events", on=["id"])
    lps.create_index(spark, "/data/docs", "embedding", "IVF_PQ", num_partitions=256)

Planning a join needs no Spark:

>>> from lancepart import spark as lps
>>> lps.explain_join(orders.root, customers.root, on=[("customer_id", "id")]).spj
True
"""

from lancepart.read.spj import Compatibility, JoinPlan, spj_compatibility
from lancepart.spark import sql_functions as sql_functions  # the SQL table functions lps.register registers
from lancepart.spark.compact import compact
from lancepart.spark.datasource import last_result, register
from lancepart.spark.delete import delete
from lancepart.spark.index import create_index, drop_index
from lancepart.spark.join import explain_join, join
from lancepart.spark.merge import merge
from lancepart.spark.read import read
from lancepart.spark.search import search
from lancepart.spark.update import update
from lancepart.spark.write import write

__all__ = ["Compatibility", "JoinPlan", "compact", "create_index", "delete", "drop_index", "explain_join", "join",
           "last_result", "merge", "read", "register", "search", "spj_compatibility", "update", "write"]
