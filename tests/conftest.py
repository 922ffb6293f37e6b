"""Shared fixtures. Everything runs for real: Lance tables on disk, DataFusion, Spark local[2]."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest

# spec/partitioning.md Appendix A, verbatim.
APPENDIX_A = json.loads("""
{
  "partition_spec_v1": {
    "id": 1,
    "fields": [
      {
        "field_id": "event_date",
        "source_ids": [1],
        "transform": { "type": "identity" },
        "result_type": { "type": "date32" }
      }
    ]
  },
  "partition_spec_v2": {
    "id": 2,
    "fields": [
      {
        "field_id": "event_year",
        "source_ids": [1],
        "transform": { "type": "year" },
        "result_type": { "type": "int32" }
      },
      {
        "field_id": "country",
        "source_ids": [2],
        "transform": { "type": "identity" },
        "result_type": { "type": "utf8" }
      }
    ]
  },
  "schema": {
    "fields": [
      {
        "name": "id",
        "nullable": false,
        "type": { "type": "int64" },
        "metadata": { "lance:field_id": "0" }
      },
      {
        "name": "event_date",
        "nullable": true,
        "type": { "type": "date32" },
        "metadata": { "lance:field_id": "1" }
      },
      {
        "name": "country",
        "nullable": true,
        "type": { "type": "utf8" },
        "metadata": { "lance:field_id": "2" }
      }
    ]
  }
}
""")


@pytest.fixture
def appendix_a() -> dict:
    return json.loads(json.dumps(APPENDIX_A))


@pytest.fixture
def events_schema() -> pa.Schema:
    """The Appendix A schema as Arrow, without field ids (they get assigned)."""
    return pa.schema([pa.field("id", pa.int64(), nullable=False), ("event_date", pa.date32()),
                      ("country", pa.utf8())])


@pytest.fixture
def root(tmp_path: Path) -> str:
    return str(tmp_path / "ns")


@pytest.fixture(scope="session")
def spark():
    """A real Spark session on local[2] (Java 17), shared by the whole run."""
    import os
    import sys

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    session = (
        SparkSession.builder.master("local[2]")
        .appName("lancepart-tests")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()
