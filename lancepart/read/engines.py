"""The published snapshot in other engines: a streaming Arrow reader, pandas, Polars and DuckDB
(docs/reading.md; DataFusion SQL is :mod:`lancepart.read.sql`).

Every path reads through the same pruned, pinned, exactly filtered stream
(:func:`lancepart.read.snapshot.scan_stream`): what a filter means is what DataFusion says, whichever
engine consumes the rows.

* DuckDB and Polars (``scan_polars``) get a pyarrow Dataset of the snapshot taken at the call
  (:mod:`lancepart.read.pyarrow_dataset`): each scan starts a new stream of it, pruned by the
  filter the engine pushes down as far as that translates to SQL, and filtered by pyarrow.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Iterator
from typing import Any

import pyarrow as pa

from lancepart.arguments import check_instance, check_text
from lancepart.errors import InvalidArgumentError, MissingDependencyError
from lancepart.storage.error_mapping import operation_error


def require(module: str, extra: str) -> Any:
    """``import module``, or :class:`MissingDependencyError` naming the extra that installs it."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise MissingDependencyError(
            f"{module} is not installed; install it with `pip install 'lancepart[{extra}]'` "
            f"(or `pip install {module}`)") from e


def typed_reader(reader: pa.RecordBatchReader, operation: str, root: str) -> pa.RecordBatchReader:
    """``reader`` whose errors (raised while it is read, after the call that made it returned)
    are the typed errors the operation would have raised."""

    def batches() -> Iterator[pa.RecordBatch]:
        it = iter(reader)
        while True:
            try:
                batch = next(it)
            except StopIteration:
                return
            except Exception as e:
                typed = operation_error(e, operation, root, publishes=False)
                if typed is None:
                    raise
                raise typed from e
            yield batch

    return pa.RecordBatchReader.from_batches(reader.schema, batches())


def check_duckdb_target(table_name: Any, connection: Any) -> None:
    """:class:`InvalidArgumentError` unless ``table_name`` is a non-empty string and ``connection``
    a DuckDB connection or None (:class:`MissingDependencyError` without DuckDB)."""
    duckdb = require("duckdb", "duckdb")
    check_text("table_name", table_name)
    check_instance("connection", connection, duckdb.DuckDBPyConnection, "a duckdb.DuckDBPyConnection")


def to_duckdb(dataset: Any, table_name: str, connection: Any = None) -> Any:
    """Register ``dataset`` (a :class:`lancepart.read.pyarrow_dataset.NamespaceDataset`) in DuckDB
    as ``table_name`` (on ``connection``, or DuckDB's default connection, which ``duckdb.sql``
    uses); returns the connection. DuckDB scans it through ``dataset.scanner(columns=...,
    filter=...)`` with each query's projection and the part of its ``WHERE`` it pushes down."""
    duckdb = require("duckdb", "duckdb")
    check_duckdb_target(table_name, connection)
    con = connection if connection is not None else duckdb.default_connection()
    con.register(table_name, dataset)
    return con


_OFFSET_TZ = re.compile(r"^[+-]\d{2}:?\d{2}$")


def polars_schema(schema: pa.Schema) -> pa.Schema:
    """``schema`` in types Polars takes. Polars panics on ``decimal256`` and refuses a fixed-offset
    time zone (``'+05:30'``): a ``decimal256`` of at most 38 digits becomes the same
    ``decimal128`` and a fixed-offset timestamp the same instant in UTC (docs/reading.md); a wider
    decimal is :class:`InvalidArgumentError` naming the column."""
    fields = []
    for f in schema:
        t = f.type
        if pa.types.is_decimal256(t):
            if t.precision > 38:
                raise InvalidArgumentError(
                    f"column {f.name!r} is {t}: Polars holds decimals of at most 38 digits; leave it out "
                    f"(columns=[...]) or read it with to_table / to_pandas")
            t = pa.decimal128(t.precision, t.scale)
        elif pa.types.is_timestamp(t) and t.tz is not None and _OFFSET_TZ.match(t.tz):
            t = pa.timestamp(t.unit, tz="UTC")
        fields.append(f.with_type(t))
    return pa.schema(fields, metadata=schema.metadata)


def polars_ready(table: pa.Table) -> pa.Table:
    """``table`` in the types of :func:`polars_schema`."""
    schema = polars_schema(table.schema)
    return table if schema.equals(table.schema) else table.cast(schema)


def to_polars(table: pa.Table) -> Any:
    pl = require("polars", "polars")
    return pl.from_arrow(polars_ready(table))
