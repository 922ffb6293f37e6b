"""The library behind ``lancepart ingest`` / ``merge`` / ``describe`` / ``alter``, called without
the command line: input files as one Arrow stream (lancepart.inputs), namespace sizes
(lancepart.stats), column types and documents as people write them.
"""

from __future__ import annotations

import datetime
import gzip
import json
from datetime import timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.csv as pcsv
import pyarrow.parquet as pq
import pytest

from lancepart import PartitionedNamespace
from lancepart.errors import InvalidArgumentError, InvalidSpecError, SchemaMismatchError

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), ("event_date", pa.date32()), ("country", pa.utf8())])
BY_COUNTRY = {"id": 1, "fields": [{"field_id": "country", "source_ids": [2], "transform": {"type": "identity"},
                                    "result_type": {"type": "utf8"}}]}
D = datetime.date(2025, 12, 10)


def test_input_format_by_extension_or_forced():
    from lancepart.inputs import FORMATS, input_format

    assert FORMATS == ("parquet", "csv", "json", "ipc")
    assert input_format("a.parquet") == "parquet" and input_format("b.CSV.gz") == "csv"
    assert input_format("c.ndjson") == "json" and input_format("d.feather") == "ipc"
    assert input_format("e.data", "csv") == "csv"
    with pytest.raises(InvalidArgumentError, match=r"cannot tell the format of input file e\.data"):
        input_format("e.data")


def test_input_reader_streams_several_formats_into_a_write(tmp_path: Path):
    """Parquet, gzipped CSV (dates typed by the namespace schema) and JSON lines with their
    columns in another order become one stream that ns.write publishes in one commit."""
    from lancepart.inputs import input_reader

    ns = PartitionedNamespace.create(str(tmp_path / "ns"), SCHEMA, BY_COUNTRY)
    pq.write_table(pa.table({"id": [1, 2], "event_date": [D, D], "country": ["US", "FR"]}, schema=SCHEMA),
                   tmp_path / "a.parquet")
    buf = pa.BufferOutputStream()
    pcsv.write_csv(pa.table({"id": [3], "event_date": ["2025-12-11"], "country": ["US"]}), buf)
    (tmp_path / "b.csv.gz").write_bytes(gzip.compress(buf.getvalue().to_pybytes()))
    (tmp_path / "c.jsonl").write_text(json.dumps({"country": "DE", "id": 4, "event_date": "2025-12-12"}) + "\n")
    seen: list[str] = []
    reader = input_reader([str(tmp_path / n) for n in ("a.parquet", "b.csv.gz", "c.jsonl")], None, ns.schema,
                          seen.append)
    result = ns.write(reader)
    assert result.rows_written == 4 and result.partitions_touched == 3
    got = sorted(ns.to_table().to_pylist(), key=lambda r: r["id"])
    assert [r["event_date"] for r in got] == [D, D, datetime.date(2025, 12, 11), datetime.date(2025, 12, 12)]
    assert any("reading" in m and "b.csv.gz" in m for m in seen) and "4 rows read from 3 file(s)" in seen[-1]

    (tmp_path / "d.jsonl").write_text(json.dumps({"id": 5, "other": 1}) + "\n")
    with pytest.raises(SchemaMismatchError, match="every input file needs the same columns"):
        input_reader([str(tmp_path / "a.parquet"), str(tmp_path / "d.jsonl")], None, ns.schema, seen.append)
    with pytest.raises(InvalidArgumentError, match="does not exist"):
        input_reader([str(tmp_path / "missing.parquet")], None, ns.schema, seen.append)


def test_stats_describe_measures_every_table(tmp_path: Path):
    from lancepart.stats import describe, human_bytes, namespace_sizes

    ns = PartitionedNamespace.create(str(tmp_path / "ns"), SCHEMA, BY_COUNTRY)
    ns.write(pa.table({"id": [1, 2, 3], "event_date": [D] * 3, "country": ["US", "FR", "US"]}, schema=SCHEMA))
    ns.write(pa.table({"id": [4], "event_date": [D], "country": ["US"]}, schema=SCHEMA))
    plain = describe(ns, sizes=False)
    assert plain["partitions"] == 2 and plain["current_spec"] == 1 and "bytes" not in plain
    assert [f["name"] for f in plain["schema"]["fields"]] == ["id", "event_date", "country"]
    messages: list[str] = []
    full = describe(ns, progress=messages.append)
    assert messages == ["measuring 2 partition tables"]
    assert full["rows"] == 4 and sorted(t["rows"] for t in full["tables"]) == [1, 3]
    us = next(t for t in full["tables"] if t["values"] == {"country": "US"})
    assert us["versions"] >= 2 and us["bytes"] > 0  # two commits on that table
    assert full["bytes"] == sum(t["bytes"] for t in full["tables"]) + full["manifest"]["bytes"]
    assert namespace_sizes(ns)["versions"] == full["versions"]
    assert human_bytes(512) == "512 B" and human_bytes(1536) == "1.5 KiB"


def test_column_types_documents_and_durations_as_written(tmp_path: Path):
    from lancepart.config import load_document
    from lancepart.model.spec import arrow_type_from_text
    from lancepart.util.durations import format_duration, parse_duration

    assert arrow_type_from_text("decimal(12, 2)") == pa.decimal128(12, 2)
    assert arrow_type_from_text("decimal256(40,4)") == pa.decimal256(40, 4)
    assert arrow_type_from_text("string") == pa.utf8() and arrow_type_from_text("long") == pa.int64()
    assert arrow_type_from_text('{"type": "large_utf8"}') == pa.large_utf8()
    with pytest.raises(InvalidSpecError, match="'nope' is not a column type"):
        arrow_type_from_text("nope")

    (tmp_path / "spec.yaml").write_text("id: 1\nfields: []\n")
    assert load_document(str(tmp_path / "spec.yaml"), "--spec") == {"id": 1, "fields": []}
    assert load_document("[1, 2]", "--x") == [1, 2]
    with pytest.raises(InvalidArgumentError, match=r"--spec: .* is not valid JSON"):
        load_document("{bad", "--spec")
    with pytest.raises(InvalidArgumentError, match="neither a file nor a JSON object"):
        load_document(str(tmp_path / "none.yaml"), "--spec")

    for d in (timedelta(hours=36), timedelta(0), timedelta(days=14, seconds=5)):
        assert parse_duration(format_duration(d)) == d
    assert format_duration(timedelta(hours=36)) == "1d12h"
