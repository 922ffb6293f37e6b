"""Column names that need quoting (issue 30 item 0): every operation that takes a SQL filter reads
a quoted name as the column, as DataFusion does, never as a string literal.

The namespace: ``id``, a partition source column and a value column, both named from the list
below (mixed case, a space, a digit first, a reserved word, non-ASCII, a quote inside), the
source partitioned by identity (spec partitioning.md "Partition Transforms"). Each filter is
written the way a DataFusion (or Spark) user writes it, names in double quotes, and every
answer is checked against DataFusion over all the rows written, unpruned. Names Lance cannot
store or filter (``a.b``, a backtick) are refused at ``create`` and ``update_schema``, naming the
column."""

from __future__ import annotations

import datafusion
import numpy as np
import pyarrow as pa
import pytest

from lancepart import PartitionedNamespace
from lancepart.errors import SchemaMismatchError

NAMES = ["Status", "my col", "1st", "select", "ünï", 'we"ird', "it's", "Region"]


def quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def rows(src: str, val: str, n: int = 60, start: int = 0) -> pa.Table:
    ids = np.arange(start, start + n, dtype=np.int64)
    return pa.table({"id": ids, src: np.array(["EU", "US", "APAC"])[ids % 3],
                     val: np.array(["old", "new", "old", "mid"])[ids % 4]})


def oracle(data: pa.Table, where: str) -> pa.Table:
    ctx = datafusion.SessionContext()
    ctx.register_record_batches("t", [data.to_batches()])
    return ctx.sql(f"SELECT * FROM t WHERE {where}").to_arrow_table()


def ids(t: pa.Table) -> list[int]:
    return sorted(t.column("id").to_pylist())


def make(tmp_path, src: str, val: str) -> tuple[PartitionedNamespace, pa.Table]:
    data = rows(src, val)
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), (src, pa.utf8()), (val, pa.utf8())])
    spec = {"id": 1, "fields": [{"field_id": "p", "source_ids": [1], "transform": {"type": "identity"},
                                 "result_type": {"type": "utf8"}}]}
    ns = PartitionedNamespace.create(str(tmp_path / "ns"), schema, spec)
    ns.write(data)
    return ns, data


PAIRS = [(NAMES[i], NAMES[(i + 3) % len(NAMES)]) for i in range(len(NAMES))]


@pytest.mark.parametrize(("src", "val"), PAIRS)
def test_reads_with_quoted_names_equal_datafusion(tmp_path, src, val):
    ns, data = make(tmp_path, src, val)
    for where in (f"{quote(val)} = 'old'", f"{quote(val)} IN ('old', 'mid')", f"{quote(val)} LIKE 'ol%'",
                  f"{quote(src)} = 'EU'", f"{quote(src)} = 'EU' AND {quote(val)} <> 'new'",
                  f"{quote(src)} IN ('US') OR {quote(val)} = 'mid'"):
        want = ids(oracle(data, where))
        assert want, where
        assert ids(ns.to_table(filter=where)) == want, where
        assert sorted(i for b in ns.to_batches(filter=where) for i in b.column("id").to_pylist()) == want, where
        got = ns.sql(f"SELECT id FROM t WHERE {where}")
        assert ids(got if isinstance(got, pa.Table) else got.to_arrow_table()) == want, where
        ticked = where.replace(quote(val), f"`{val}`").replace(quote(src), f"`{src}`")  # as a Spark user writes it
        assert ids(ns.to_table(filter=ticked, columns=["id"])) == want, ticked
        assert ids(ns.to_table(filter=where, columns=["id"])) == want, where


@pytest.mark.parametrize(("src", "val"), PAIRS[:4])
def test_writes_with_quoted_names_equal_datafusion(tmp_path, src, val):
    ns, data = make(tmp_path, src, val)
    where = f"{quote(val)} = 'old'"
    # delete
    r = ns.delete(where)
    left = oracle(data, f"NOT ({where})")
    assert r.details["rows_deleted"] == data.num_rows - left.num_rows
    assert ids(ns.to_table()) == ids(left)
    # replace-where: the rows it matches are replaced, never published twice
    ns.write(data.filter(pa.compute.equal(data.column(val), "old")))
    before = ns.to_table()
    new = rows(src, val, n=12, start=1000).filter(pa.compute.equal(rows(src, val, n=12, start=1000).column(val), "mid"))
    ns.write(new, mode="overwrite", where=f"{quote(val)} = 'mid'")
    want = sorted(ids(oracle(before, f"NOT ({quote(val)} = 'mid')")) + ids(new))
    assert ids(ns.to_table()) == want
    # drop_partitions by the partition source
    before = ns.to_table()
    ns.drop_partitions(f"{quote(src)} = 'EU'")
    assert ids(ns.to_table()) == ids(oracle(before, f"NOT ({quote(src)} = 'EU')"))


@pytest.mark.parametrize("bad", ["a.b", "back`tick"])
def test_names_lance_cannot_filter_are_refused_at_create(tmp_path, bad):
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), (bad, pa.utf8())])
    spec = {"id": 1, "fields": [{"field_id": "p", "source_ids": [0], "transform": {"type": "identity"},
                                 "result_type": {"type": "int64"}}]}
    named = repr(bad).replace(".", r"\.")
    with pytest.raises(SchemaMismatchError, match=named):
        PartitionedNamespace.create(str(tmp_path / "ns"), schema, spec)
    ns, _ = make(tmp_path / "ok", "Region", "Status")
    with pytest.raises(SchemaMismatchError, match=named):
        ns.update_schema(add=[pa.field(bad, pa.utf8())])
    with pytest.raises(SchemaMismatchError, match=named):
        ns.update_schema(rename={"Status": bad})
    assert ns.refresh().schema.names == ["id", "Region", "Status"]


@pytest.mark.parametrize(("src", "val"), PAIRS[:4])
def test_merge_on_quoted_keys_after_a_rename_equals_the_oracle(tmp_path, src, val):
    """Merge keyed on a renamed, quoted key and the partition source (its keys prune partitions):
    the matched rows are replaced once, the others inserted, as a dict keyed the same way says."""
    ns, data = make(tmp_path, src, val)
    key = "Order ID"
    ns.update_schema(rename={"id": key})
    data = data.rename_columns([key, src, val])
    upd = data.slice(0, 10).set_column(2, val, pa.array(["upd"] * 10))
    new = rows(src, val, n=5, start=1000).rename_columns([key, src, val])
    changes = pa.concat_tables([upd, new])
    r = ns.merge(changes, on=[key, src])
    assert (r.details["rows_updated"], r.details["rows_inserted"]) == (10, 5)
    want = {(k, s): v for k, s, v in zip(*[data.column(i).to_pylist() for i in range(3)], strict=True)}
    want.update({(k, s): v for k, s, v in zip(*[changes.column(i).to_pylist() for i in range(3)], strict=True)})
    got = ns.to_table()
    assert got.schema.names == [key, src, val]
    assert sorted(zip(*[got.column(i).to_pylist() for i in range(3)], strict=True)) == sorted(
        (k, s, v) for (k, s), v in want.items())


@pytest.mark.spark
@pytest.mark.parametrize(("src", "val"), PAIRS[:3])
def test_spark_filters_with_quoted_names_equal_datafusion(spark, tmp_path, src, val):
    """The Spark ``filter`` option and ``lps.read`` take the names as a DataFusion (double quotes) or
    Spark (backticks) user writes them; each answer equals DataFusion over the unpruned rows."""
    from lancepart import spark as lps

    ns, data = make(tmp_path, src, val)
    lps.register(spark)

    def tick(name: str) -> str:
        return "`" + name + "`"

    wheres = (lambda q: f"{q(val)} = 'old'", lambda q: f"{q(src)} = 'EU' AND {q(val)} <> 'new'",
              lambda q: f"{q(src)} IN ('US', 'APAC')")
    for q in (quote, tick):
        for make_where in wheres:
            where, want = make_where(q), ids(oracle(data, make_where(quote)))
            assert want, where
            df = spark.read.format("lancepart").option("filter", where).load(ns.root)
            assert sorted(r[0] for r in df.select("id").collect()) == want, where
            assert sorted(r[0] for r in lps.read(spark, ns.root, filter=where, columns=["id"]).collect()) == want, where
