"""Hostile input (issue "Reliability proof", part 3): every case ends in a typed
``lancepart.errors`` error whose message names the column, value, path or field, or in
correct data, and none publishes anything partial. Local writer (``ns.write``) everywhere,
the Spark writer (``lancepart.spark.write``) where the brief marks it [S]."""

from __future__ import annotations

import base64
import datetime as dt
import json
import logging
import os
import re
import resource
import shutil
import threading
import time
from pathlib import Path

import lance
import lance.namespace as lns
import mmh3
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from lancepart import PartitionedNamespace
from lancepart import spark as lps
from lancepart.errors import (
    CorruptNamespaceError,
    ExpressionEvaluationError,
    LancepartError,
    NamespaceNotFoundError,
    PartitionValueError,
    SchemaMismatchError,
    UnsafeLocationError,
)
from lancepart.model.spec import arrow_type_to_json
from lancepart.util.sample import demo_events

ID_RE = re.compile(r"^v1(\$[0-9a-z]{16})+\$dataset$")
LOCATION_RE = re.compile(r"^[0-9a-f]{8}_v1(\$[0-9a-z]{16})+\$dataset$")


# --------------------------------------------------------------------------- helpers
def state(root: str) -> tuple[int, pa.Table]:
    """What a fresh reader sees: the __manifest version and the published rows, sorted by id."""
    ns = PartitionedNamespace.open(root)
    return ns.manifest_version, ns.to_table().sort_by("id")


def assert_unchanged(root: str, before: tuple[int, pa.Table], reservation_allowed: bool = False) -> None:
    version, table = state(root)
    assert version in ((before[0], before[0] + 1) if reservation_allowed else (before[0],))
    assert table.equals(before[1])


def identity_spec(*fields: tuple[str, int, dict]) -> dict:
    return {"id": 1, "fields": [
        {"field_id": name, "source_ids": [sid], "transform": tf, "result_type": rt} for name, sid, tf, rt in fields]}


def arrow_to_spark(spark, table: pa.Table, ddl: str):
    """A DataFrame of ``table``'s rows with the Spark schema ``ddl`` (values via Python objects)."""
    return spark.createDataFrame([tuple(r.values()) for r in table.to_pylist()], ddl)


# --------------------------------------------------------------------------- schema mismatches [S]
TYPED_SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), ("qty", pa.int32()), ("ts", pa.timestamp("us")),
                          ("country", pa.utf8()), ("user_id", pa.int64())])
TYPED_DDL = "id long, qty int, ts timestamp_ntz, country string, user_id long"


def typed_rows(n: int, start: int = 0) -> pa.Table:
    ids = np.arange(start, start + n, dtype=np.int64)
    return pa.table({
        "id": ids, "qty": pa.array(ids % 7, pa.int32()),
        "ts": pa.array(1_764_547_200_000_000 + ids * 3_600_000_000, pa.timestamp("us")),
        "country": pa.array(np.array(["US", "FR", "DE"])[ids % 3]), "user_id": ids * 11,
    }, schema=TYPED_SCHEMA)


@pytest.fixture
def typed_ns(root):
    ns = PartitionedNamespace.create(root, TYPED_SCHEMA, identity_spec(
        ("country", 3, {"type": "identity"}, {"type": "utf8"})))
    ns.write(typed_rows(30))
    return ns


def _dup(t: pa.Table) -> pa.Table:
    return pa.Table.from_arrays([*t.columns, t.column("country")], names=[*t.column_names, "country"])


SCHEMA_CASES = [  # id, Arrow input, Spark input, message fragment (a regex)
    ("missing_required", lambda t: t.drop_columns(["id"]), lambda d: d.drop("id"),
     r"required \(non-nullable\) column\(s\) \['id'\] are missing"),
    ("extra", lambda t: t.append_column("zzz", pa.array([1] * t.num_rows)), lambda d: d.withColumn("zzz", d.id + 1),
     r"input column\(s\) \['zzz'\] are not in the namespace schema"),
    ("renamed", lambda t: t.rename_columns([c if c != "country" else "nation" for c in t.column_names]),
     lambda d: d.withColumnRenamed("country", "nation"), r"input column\(s\) \['nation'\] are not in the namespace"),
    ("string_into_int64", lambda t: t.set_column(4, "user_id", pc.cast(t["user_id"], pa.utf8())),
     lambda d: d.withColumn("user_id", d.user_id.cast("string")),
     r"column 'user_id' is string in the input but int64 in the namespace schema"),
    ("float_into_int64", lambda t: t.set_column(4, "user_id", pc.cast(t["user_id"], pa.float64())),
     lambda d: d.withColumn("user_id", d.user_id.cast("double")),
     r"column 'user_id' is double in the input but int64 in the namespace schema"),
    ("int64_into_int32", lambda t: t.set_column(1, "qty", pc.cast(t["qty"], pa.int64())),
     lambda d: d.withColumn("qty", d.qty.cast("long")),
     r"column 'qty' is int64 in the input but int32 in the namespace schema"),
    ("zoned_into_naive", lambda t: t.set_column(2, "ts", pc.cast(t["ts"], pa.timestamp("us", tz="UTC"))),
     lambda d: d.withColumn("ts", d.ts.cast("timestamp")),
     r"column 'ts' is timestamp\[us, tz=[^]]+\] in the input but timestamp\[us\].*cast it to timestamp_ntz first"),
    ("duplicate_names", _dup, lambda d: d.toDF("id", "qty", "ts", "country", "country"),
     r"input has duplicate column\(s\) \['country'\]"),
]


@pytest.mark.parametrize(("arrow_case", "fragment"), [pytest.param(c[1], c[3], id=c[0]) for c in SCHEMA_CASES])
def test_schema_mismatch_local(typed_ns, arrow_case, fragment):
    before = state(typed_ns.root)
    with pytest.raises(SchemaMismatchError, match=fragment):
        typed_ns.write(arrow_case(typed_rows(10, start=100)))
    assert_unchanged(typed_ns.root, before)


def test_nanosecond_timestamps_get_a_hint_to_cast(typed_ns):
    """Issue 13 item 5: pandas/numpy input carries ``timestamp[ns]``; the refusal says which type
    to cast to and how, and the cast it names makes the same rows writable."""
    rows = typed_rows(10, start=100)
    nanos = rows.set_column(2, "ts", pc.cast(rows["ts"], pa.timestamp("ns")))
    before = state(typed_ns.root)
    with pytest.raises(SchemaMismatchError, match=r"column 'ts' is timestamp\[ns\] in the input but timestamp\[us\]"
                                                  r".*cast the column to timestamp\[us\] first.*"
                                                  r"pyarrow\.compute\.cast\(column, pa\.timestamp\('us'\)\)"):
        typed_ns.write(nanos)
    assert_unchanged(typed_ns.root, before)
    fixed = nanos.set_column(2, "ts", pc.cast(nanos["ts"], pa.timestamp("us")))
    assert typed_ns.write(fixed).rows_written == 10


@pytest.mark.spark
@pytest.mark.parametrize(("spark_case", "fragment"), [pytest.param(c[2], c[3], id=c[0]) for c in SCHEMA_CASES])
def test_schema_mismatch_spark(spark, typed_ns, spark_case, fragment):
    before = state(typed_ns.root)
    df = arrow_to_spark(spark, typed_rows(10, start=100), TYPED_DDL)
    with pytest.raises(SchemaMismatchError, match=fragment):
        lps.write(spark_case(df), typed_ns.root)
    assert_unchanged(typed_ns.root, before)
    assert len(os.listdir(typed_ns.root)) == 1 + len(typed_ns.refresh().partitions())  # no table directory made


# --------------------------------------------------------------------------- NULL partition values
def test_null_partition_values_at_every_level(root):
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), ("country", pa.utf8()), ("day", pa.date32()),
                        ("user_id", pa.int64())])
    ns = PartitionedNamespace.create(root, schema, identity_spec(
        ("country", 1, {"type": "identity"}, {"type": "utf8"}),
        ("day", 2, {"type": "identity"}, {"type": "date32"}),
        ("user_bucket", 3, {"type": "bucket", "num_buckets": 4}, {"type": "int32"})))
    d = dt.date(2025, 12, 10)
    # NULL in level 1, 2, 3, all levels, none; "" and "None" are values, not NULL
    data = pa.table({"id": pa.array(range(7), pa.int64()), "country": ["US", None, "US", "US", None, "", "None"],
                     "day": [d, d, None, d, None, d, d], "user_id": pa.array([7, 7, 7, None, None, 7, 7], pa.int64())},
                    schema=ns.schema)
    r = ns.write(data)
    assert (r.rows_written, r.partitions_created, r.partitions_touched) == (7, 7, 7)
    assert ns.to_table().sort_by("id").equals(data)
    got = [(p.values["country"], p.values["day"], p.values["user_bucket"]) for p in ns.partitions()]
    b7 = abs(mmh3.hash((7).to_bytes(8, "little", signed=True), 0, signed=True)) % 4  # Iceberg bucket of 7
    assert len(got) == 7 and set(got) == {("US", d, b7), (None, d, b7), ("US", None, b7), ("US", d, None),
                                          (None, None, None), ("", d, b7), ("None", d, b7)}
    for p in ns.partitions():  # every NULL combination is a partition of its own, holding only its rows
        rows = lance.dataset(os.path.join(root, p.location), version=p.read_version).to_table()
        assert rows.num_rows == 1
        assert (rows["country"][0].as_py(), rows["day"][0].as_py()) == (p.values["country"], p.values["day"])
        # describe_namespace reports None for a NULL value at each level (spec Appendix E)
        levels = p.object_id.split("$")[:-1]
        reported = [ns.describe_namespace(levels[: k + 1]) for k in range(1, 4)]
        assert reported[0]["partition.country"] == p.values["country"]
        assert reported[1]["partition.day"] == (None if p.values["day"] is None else "2025-12-10")
        assert reported[2]["partition.user_bucket"] == (None if p.values["user_bucket"] is None else str(b7))
    # NULL ids are deterministic: the same rows again create nothing new
    again = ns.write(data.set_column(0, "id", pa.array(range(100, 107), pa.int64())))
    assert (again.partitions_created, again.partitions_touched) == (0, 7)
    assert ns.to_table().num_rows == 14


# --------------------------------------------------------------------------- hostile partition values
HOSTILE = ["$", "a$b", "/", "a/b", "a=b", "..", "../..", "\0", "a\0b", "😀", "x" * 10_240, "", " ", "\\", ".",
           "v1$dataset", "%2F", None]


def test_hostile_string_partition_values(root):
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), ("k", pa.utf8())])
    ns = PartitionedNamespace.create(root, schema, identity_spec(("k", 1, {"type": "identity"}, {"type": "utf8"})))
    data = pa.table({"id": pa.array(range(len(HOSTILE)), pa.int64()), "k": HOSTILE}, schema=ns.schema)
    r = ns.write(data)
    assert (r.rows_written, r.partitions_created) == (len(HOSTILE), len(HOSTILE))
    assert ns.to_table().sort_by("id").equals(data)
    parts = ns.partitions()
    assert sorted(p.values["k"] or "<null>" for p in parts) == sorted(v or "<null>" for v in HOSTILE)
    for p in parts:  # ids are hashes: neither the id nor the directory carries the value
        assert ID_RE.match(p.object_id) and LOCATION_RE.match(p.location), (p.object_id, p.location)
        assert p.location.endswith(p.object_id)
    assert sorted(os.listdir(root)) == sorted(["__manifest", *(p.location for p in parts)])
    # Lance's own DirectoryNamespace lists and reads them
    d = lns.DirectoryNamespace(root=root)
    listed = d.list_namespaces(lns.ListNamespacesRequest(id=["v1"])).namespaces
    assert sorted(listed) == sorted(p.object_id.split("$")[1] for p in parts)
    for p in parts:
        oid = p.object_id.split("$")
        desc = d.describe_table(lns.DescribeTableRequest(id=oid))
        assert lance.dataset(desc.location).to_table().column("k").to_pylist() == [p.values["k"]]
        assert ns.describe_namespace(oid[:-1]) == {"partition.k": p.values["k"]}


# --------------------------------------------------------------------------- timestamps at the int64 limits
LIMITS = [-(2**63), -(2**63) + 1, 2**63 - 1, 0, None]
# date_part of each LIMITS value, as DataFusion computes it (docs/design.md §3). timestamp[ns] spans
# 1677-09-21 00:12:43 .. 2262-04-11 23:47:16; timestamp[us] at +-2^63 is ~ +-292 000 years, beyond
# chrono's range, where DataFusion's date_part is NULL.
EXPECTED_PARTS = {
    ("ns", "year"): [1677, 1677, 2262, 1970, None], ("ns", "month"): [9, 9, 4, 1, None],
    ("ns", "day"): [21, 21, 11, 1, None], ("ns", "hour"): [0, 0, 23, 0, None],
    ("us", "year"): [None, None, None, 1970, None], ("us", "month"): [None, None, None, 1, None],
    ("us", "day"): [None, None, None, 1, None], ("us", "hour"): [None, None, None, 0, None],
}


def _limits_ns(root: str, unit: str, transform: str, tz: str | None = None) -> tuple[PartitionedNamespace, pa.Table]:
    t = pa.timestamp(unit, tz=tz)
    rt = arrow_type_to_json(t).to_dict() if transform == "identity" else {"type": "int32"}
    ns = PartitionedNamespace.create(root, pa.schema([pa.field("id", pa.int64(), nullable=False), ("ts", t)]),
                                     identity_spec(("p", 1, {"type": transform}, rt)))
    data = pa.table({"id": pa.array(range(len(LIMITS)), pa.int64()), "ts": pa.array(LIMITS, pa.int64()).cast(t)},
                    schema=ns.schema)
    return ns, data


@pytest.mark.parametrize("transform", ["year", "month", "day", "hour"])
@pytest.mark.parametrize("unit", ["ns", "us"])
def test_time_transforms_at_int64_limits(root, unit, transform):
    ns, data = _limits_ns(root, unit, transform)
    ns.write(data)
    assert ns.to_table().sort_by("id").equals(data)  # no value wrapped or clipped
    want = dict(enumerate(EXPECTED_PARTS[(unit, transform)]))
    for p in ns.partitions():  # every row sits in the partition of its own value
        ids = lance.dataset(os.path.join(root, p.location), version=p.read_version).to_table()["id"].to_pylist()
        assert ids and all(want[i] == p.values["p"] for i in ids), (p.values, ids)
    assert sum(1 for _ in ns.partitions()) == len(set(want.values()))


@pytest.mark.parametrize(("unit", "tz"), [("ns", None), ("us", None), ("us", "+05:30")])
def test_identity_timestamps_at_int64_limits(root, unit, tz):
    """Values Python cannot represent as what they are (pyarrow reads ns -2^63 as pandas' NaT;
    us +-2^63 are ~292 000 years away) are refused naming the column and the value; the rest
    of the range round-trips exactly, in the data and in __manifest."""
    ns, data = _limits_ns(root, unit, "identity", tz)
    before = state(root)
    bad = -(2**63)
    with pytest.raises(PartitionValueError, match=rf"partition field 'p' \(source column\(s\) \['ts'\]\): value {bad}"):
        ns.write(data)
    assert_unchanged(root, before)
    t = data.schema.field("ts").type
    if unit == "ns":  # everything but -2^63 is representable
        ok = data.filter(pc.invert(pc.equal(data["id"], 0)))
    else:  # the years 1 .. 9999, in the zone's wall-clock time
        first = int((dt.datetime(1, 1, 1, 5, 30) - dt.datetime(1970, 1, 1)).total_seconds()) * 1_000_000
        last = int((dt.datetime(9999, 12, 31, 18) - dt.datetime(1970, 1, 1)).total_seconds()) * 1_000_000
        ok = pa.table({"id": pa.array([10, 11, 12, 13], pa.int64()),
                       "ts": pa.array([first, last, 0, None], pa.int64()).cast(t)}, schema=ns.schema)
        with pytest.raises(PartitionValueError, match=r"value 9223372036854775807 .*outside the years 1-9999"):
            ns.write(data.filter(pc.equal(data["id"], 2)))
    ns.write(ok)
    assert ns.to_table().sort_by("id").equals(ok)
    manifest = lance.dataset(os.path.join(root, "__manifest")).to_table()
    tables = manifest.filter(pc.equal(manifest["object_type"], "table"))
    assert sorted(tables["partition_field_p"].cast(pa.int64()).to_pylist(), key=str) == sorted(
        ok["ts"].cast(pa.int64()).to_pylist(), key=str)
    for p in ns.partitions():
        rows = lance.dataset(os.path.join(root, p.location), version=p.read_version).to_table()
        assert rows.num_rows == 1 and rows["ts"][0].as_py() == p.values["p"]


# --------------------------------------------------------------------------- empty input [S]
def test_empty_input_publishes_nothing(ns):
    ns.write(demo_events(100))
    before = state(ns.root)
    empty = demo_events(0).cast(ns.schema)
    for data in (empty, pa.RecordBatchReader.from_batches(empty.schema, [])):
        r = ns.write(data)
        assert (r.rows_written, r.partitions_touched, r.partitions_created, r.skipped) == (0, 0, 0, False)
        assert_unchanged(ns.root, before)
    r = ns.write(empty, batch_id="empty-1")  # a batch id is recorded, so a retry is a no-op
    assert (r.rows_written, r.manifest_version, r.skipped) == (0, before[0] + 1, False)
    assert ns.write(demo_events(5), batch_id="empty-1").skipped
    assert state(ns.root)[1].equals(before[1])


@pytest.mark.spark
def test_empty_input_publishes_nothing_spark(spark, ns):
    ns.write(demo_events(100))
    before = state(ns.root)
    df = spark.createDataFrame([], "id long, event_date date, event_ts timestamp_ntz, country string, "
                                    "user_id long, amount double")
    r = lps.write(df, ns.root)
    assert (r.rows_written, r.partitions_touched, r.partitions_created, r.skipped) == (0, 0, 0, False)
    assert_unchanged(ns.root, before)
    r = lps.write(df, ns.root, batch_id="empty-spark")
    assert (r.rows_written, r.manifest_version, r.skipped) == (0, before[0] + 1, False)
    assert lps.write(df, ns.root, batch_id="empty-spark").skipped
    assert state(ns.root)[1].equals(before[1])


# --------------------------------------------------------------------------- many partitions in one batch
class Watcher:
    """Samples this process's open file descriptors while a write runs."""

    def __init__(self) -> None:
        self.max_fds = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.max_fds = max(self.max_fds, len(os.listdir("/proc/self/fd")))
            time.sleep(0.01)

    def __enter__(self) -> Watcher:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="counts open files through /proc")
# 2 000 partitions show what 10 000 do (one publish; open files and memory do not grow with the
# partition count); 10 000 and 100 000 with --stress.
@pytest.mark.parametrize("n", [2_000, *(pytest.param(n, marks=pytest.mark.stress) for n in (10_000, 100_000))])
def test_many_distinct_partitions_in_one_batch(root, n, record_property):
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), ("k", pa.int64()), ("v", pa.utf8())])
    ns = PartitionedNamespace.create(root, schema, identity_spec(("k", 1, {"type": "identity"}, {"type": "int64"})))
    rows = 2 * n
    ids = np.arange(rows, dtype=np.int64)
    data = pa.table({"id": ids, "k": ids % n, "v": pa.array(np.char.add("r", ids.astype(str)))}, schema=ns.schema)
    version = ns.manifest_version
    fds_before = len(os.listdir("/proc/self/fd"))
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    started = time.monotonic()
    with Watcher() as w:
        r = ns.write(data)
    seconds = time.monotonic() - started
    rss_peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    figures = {"partitions": n, "rows": rows, "seconds": round(seconds, 1), "peak_rss_mib": rss_peak // 1024,
               "rss_growth_mib": (rss_peak - rss_before) // 1024, "fds_before": fds_before, "max_fds": w.max_fds}
    record_property("figures", figures)
    print(json.dumps(figures))
    assert (r.rows_written, r.partitions_created, r.partitions_touched) == (rows, n, n)
    assert r.manifest_version == version + 1  # ONE publish commit adds the partitions, born with their rows
    # bounded: open files do not grow with the number of partitions, memory stays well below 1 KiB x rows x n
    assert w.max_fds - fds_before < 64, figures
    assert rss_peak - rss_before < 1024 * 1024, figures  # < 1 GiB growth
    parts = ns.partitions()
    assert len(parts) == n and sorted(p.values["k"] for p in parts) == list(range(n))
    manifest = lance.dataset(os.path.join(root, "__manifest"))
    assert manifest.count_rows() == 1 + 2 * n  # v1, and one namespace + one table row per partition
    got = ns.to_table(columns=["id", "k"]).sort_by("id") if n <= 10_000 else None
    if got is not None:
        assert got.equals(data.select(["id", "k"]))
    for p in parts[:: max(1, n // 50)]:  # a sample read directly at read_version: only the partition's rows
        t = lance.dataset(os.path.join(root, p.location), version=p.read_version).to_table()
        assert t["k"].to_pylist() == [p.values["k"]] * 2


# --------------------------------------------------------------------------- corrupt __manifest
def _overwrite(path: Path, keep: int | None = None) -> None:
    """Garble a file deterministically: keep its first ``keep`` bytes (truncate) or overwrite
    its middle and its last 64 bytes (footer/magic)."""
    data = path.read_bytes()
    if keep is not None:
        path.write_bytes(data[:keep])
        return
    b = bytearray(data)
    mid = len(b) // 3
    b[mid: mid + 64] = b"\xa5" * len(b[mid: mid + 64])
    b[-64:] = b"\x5a" * len(b[-64:])
    path.write_bytes(bytes(b))


def _corrupt(manifest: Path, how: str) -> None:
    data_files = sorted((manifest / "data").glob("*.lance"))
    versions = sorted((manifest / "_versions").glob("*.manifest"))
    if how == "truncate_data":
        for f in data_files:
            _overwrite(f, keep=10)
    elif how == "garble_data":
        for f in data_files:
            _overwrite(f)
    elif how == "delete_data":
        for f in data_files:
            f.unlink()
    elif how == "truncate_versions":
        for f in versions:
            _overwrite(f, keep=7)
    elif how == "garble_versions":
        for f in versions:
            _overwrite(f)
    elif how == "delete_versions":
        shutil.rmtree(manifest / "_versions")
    elif how == "delete_manifest":
        shutil.rmtree(manifest)
    elif how == "empty_manifest_dir":
        shutil.rmtree(manifest)
        manifest.mkdir()
    elif how == "schema_of_wrong_shape":
        lance.dataset(str(manifest)).update_metadata({"schema": '{"fields": 3}'})
    elif how == "spec_not_json":
        lance.dataset(str(manifest)).update_metadata({"partition_spec_v1": "{bad"})
    else:  # pragma: no cover
        raise AssertionError(how)


CORRUPTIONS = {
    "truncate_data": CorruptNamespaceError, "garble_data": CorruptNamespaceError,
    "delete_data": CorruptNamespaceError, "truncate_versions": CorruptNamespaceError,
    "garble_versions": CorruptNamespaceError, "delete_versions": NamespaceNotFoundError,
    "delete_manifest": NamespaceNotFoundError, "empty_manifest_dir": NamespaceNotFoundError,
    "schema_of_wrong_shape": CorruptNamespaceError, "spec_not_json": CorruptNamespaceError,
}


@pytest.mark.parametrize("how", list(CORRUPTIONS))
def test_corrupt_manifest_gives_typed_errors_naming_the_path(ns, how):
    ns.write(demo_events(200))
    published = ns.to_table().sort_by("id")
    held = PartitionedNamespace.open(ns.root)
    _corrupt(Path(ns.root) / "__manifest", how)
    error = CORRUPTIONS[how]
    where = re.escape(os.path.join(ns.root, "__manifest"))
    with pytest.raises(error, match=where):
        PartitionedNamespace.open(ns.root)
    with pytest.raises(error, match=where):
        held.write(demo_events(10, start_id=10_000))
    with pytest.raises(error, match=where):
        held.refresh()
    # a handle keeps the snapshot it loaded: its partition tables are intact, so it still reads it
    assert held.to_table().sort_by("id").equals(published)


def test_corrupt_partition_table_names_the_table(ns):
    ns.write(demo_events(200))
    p = ns.partitions()[0]
    shutil.rmtree(os.path.join(ns.root, p.location, "_versions"))
    with pytest.raises(CorruptNamespaceError, match=re.escape(f"partition table {p.object_id!r} at "
                                                              f"{os.path.join(ns.root, p.location)}")):
        PartitionedNamespace.open(ns.root).to_table()


# --------------------------------------------------------------------------- expressions failing at run time [S]
CAST_SPEC = {"id": 1, "fields": [{"field_id": "code_int", "source_ids": [1], "expression": "CAST(col0 AS INT)",
                                  "result_type": {"type": "int32"}}]}
CAST_MESSAGE = (r"partition field 'code_int': expression 'CAST\(col0 AS INT\)' failed at run time: .*"
                r"Cannot cast string 'abc' to value of Int32 type .*'col0': 'abc'")


@pytest.fixture
def cast_ns(root):
    ns = PartitionedNamespace.create(root, pa.schema([pa.field("id", pa.int64(), nullable=False),
                                                      ("code", pa.utf8())]), CAST_SPEC)
    ns.write(pa.table({"id": pa.array([1, 2], pa.int64()), "code": ["10", "20"]}, schema=ns.schema))
    assert sorted(p.values["code_int"] for p in ns.partitions()) == [10, 20]
    return ns


def test_expression_error_at_run_time(cast_ns):
    before = state(cast_ns.root)
    bad = pa.table({"id": pa.array(range(100, 110), pa.int64()), "code": [*map(str, range(9)), "abc"]},
                   schema=cast_ns.schema)
    with pytest.raises(ExpressionEvaluationError, match=CAST_MESSAGE):
        cast_ns.write(bad)
    assert_unchanged(cast_ns.root, before)
    assert len(os.listdir(cast_ns.root)) == 3  # __manifest and the two published tables: nothing was created


@pytest.mark.spark
def test_expression_error_at_run_time_spark(spark, cast_ns):
    before = state(cast_ns.root)
    df = spark.createDataFrame([(100 + i, c) for i, c in enumerate([*map(str, range(9)), "abc"])],
                               "id long, code string")
    with pytest.raises(ExpressionEvaluationError, match=CAST_MESSAGE):
        lps.write(df, cast_ns.root)
    assert_unchanged(cast_ns.root, before)


# --------------------------------------------------------------------------- locations that leave the root
def _set_location(root: str, object_id: str, location: str | None) -> None:
    """Edit a __manifest row by hand, with Lance itself (no lancepart code involved)."""
    value = "NULL" if location is None else "'" + location.replace("'", "''") + "'"
    lance.dataset(os.path.join(root, "__manifest")).update({"location": value}, where=f"object_id = '{object_id}'")


def _tree(path: Path) -> list[str]:
    return sorted(str(p.relative_to(path)) for p in path.rglob("*")) if path.exists() else []


@pytest.fixture
def escaped(ns, tmp_path):
    """A namespace one of whose __manifest rows points at ``<tmp>/outside``: a copy of the
    partition table with other rows, so that following the location would "work"."""
    data = demo_events(300)
    ns.write(data)
    victim = ns.partitions()[0]
    outside = tmp_path / "outside"
    shutil.copytree(os.path.join(ns.root, victim.location), outside)
    return ns, victim, outside, data


@pytest.mark.parametrize("bad", ["../outside", "<abs>", "sub/dir", "..", ".", "", None])
def test_location_leaving_the_root_is_refused(escaped, bad):
    ns, victim, outside, data = escaped
    bad = str(outside) if bad == "<abs>" else bad
    _set_location(ns.root, victim.object_id, bad)
    before_outside = _tree(outside)
    version = PartitionedNamespace.open(ns.root).manifest_version
    message = re.escape(f"__manifest row {victim.object_id!r} has location {bad!r}")
    with pytest.raises(UnsafeLocationError, match=message):
        PartitionedNamespace.open(ns.root).to_table()
    # writing rows of that partition (and others) is refused before anything is committed or written
    with pytest.raises(UnsafeLocationError, match=message):
        ns.refresh().write(data)
    assert PartitionedNamespace.open(ns.root).manifest_version == version
    assert _tree(outside) == before_outside
    assert not (Path(ns.root) / "sub").exists() and not (Path(ns.root).parent / "data").exists()
    assert not (Path(ns.root) / "data").exists() and not (Path(ns.root) / "_versions").exists()


def test_unsafe_row_does_not_block_other_partitions(escaped):
    ns, victim, _, _ = escaped
    _set_location(ns.root, victim.object_id, "../outside")
    elsewhere = demo_events(50, start_id=5_000).cast(ns.schema)
    keep = pc.invert(pc.equal(elsewhere["event_date"], victim.values["event_date"]))
    elsewhere = elsewhere.filter(keep)  # no row of the victim's day, so not of its partition
    assert elsewhere.num_rows
    r = ns.refresh().write(elsewhere)
    assert r.rows_written == elsewhere.num_rows
    read = PartitionedNamespace.open(ns.root).to_table  # reading everything still refuses
    with pytest.raises(UnsafeLocationError, match=re.escape("'../outside'")):
        read()


@pytest.mark.spark
def test_location_leaving_the_root_is_refused_spark(spark, escaped):
    ns, victim, outside, data = escaped
    _set_location(ns.root, victim.object_id, "../outside")
    before_outside = _tree(outside)
    version = PartitionedNamespace.open(ns.root).manifest_version
    df = spark.createDataFrame(data.to_pandas(types_mapper={pa.int64(): pd.Int64Dtype()}.get))
    df = df.withColumn("event_ts", df["event_ts"].cast("timestamp_ntz"))
    with pytest.raises(UnsafeLocationError, match=re.escape(f"row {victim.object_id!r} has location '../outside'")):
        lps.write(df, ns.root)
    assert PartitionedNamespace.open(ns.root).manifest_version == version
    assert _tree(outside) == before_outside


def test_root_with_dot_dot_is_normalised(tmp_path, events_schema, appendix_a):
    spec = appendix_a["partition_spec_v1"]
    ns = PartitionedNamespace.create(str(tmp_path / "a" / "b" / ".." / ".." / "ns"), events_schema, spec)
    assert ns.root == str(tmp_path / "ns") and (tmp_path / "ns" / "__manifest").is_dir()
    assert PartitionedNamespace.open(f"file://{tmp_path}/x/../ns").root == f"file://{tmp_path}/ns"
    with pytest.raises(NamespaceNotFoundError, match=r"no __manifest table at /etc/__manifest$") as e:
        PartitionedNamespace.open("/tmp/x/../../etc")
    assert ".." not in str(e.value)
    with pytest.raises(NamespaceNotFoundError, match=re.escape(f"file://{tmp_path}/elsewhere/__manifest")):
        PartitionedNamespace.open(f"file://{tmp_path}/ns/../x/../elsewhere")


# --------------------------------------------------------------------------- secrets
SECRET = "SECRET123"
SECRET_OPTIONS = {"aws_secret_access_key": SECRET, "aws_access_key_id": "AKIAEXAMPLE"}


def _leaks(text: str) -> list[str]:
    """Where the secret shows in ``text``: as is, or base64-encoded at any of the 3 alignments."""
    forms = [SECRET] + [base64.b64encode(b"\0" * k + SECRET.encode()).decode()[4:12] for k in range(3)]
    return [f for f in forms if f in text]


def _everything(caplog, *objects) -> str:
    parts = [caplog.text]
    for rec in caplog.records:
        parts += [rec.getMessage(), repr(rec.args), repr(rec.__dict__)]
    for o in objects:
        parts += [str(o), repr(o)]
        if isinstance(o, BaseException):
            cause = o.__cause__ or o.__context__
            while cause is not None:
                parts += [str(cause), repr(cause)]
                cause = cause.__cause__ or cause.__context__
        if hasattr(o, "to_dict"):
            parts.append(json.dumps(o.to_dict(), default=str))
    return "\n".join(parts)


def test_secrets_never_leak(root, caplog, events_schema, appendix_a):
    caplog.set_level(logging.DEBUG)
    seen: list[object] = []
    ns = PartitionedNamespace.create(root, events_schema, appendix_a["partition_spec_v1"],
                                     storage_options=SECRET_OPTIONS)
    data = pa.table({"id": pa.array([1, 2], pa.int64()), "event_date": pa.array([dt.date(2025, 12, 1)] * 2),
                     "country": ["US", "FR"]}).cast(ns.schema)
    seen += [ns, ns.write(data, batch_id="s-1"), ns.write(data, batch_id="s-1"), ns.partitions(), ns.to_table()]
    ns = PartitionedNamespace.open(root, storage_options=SECRET_OPTIONS)
    seen += [ns, ns.manifest, ns.snapshot(), ns.describe_namespace([])]
    failures = [
        lambda: ns.write(data.append_column("zzz", pa.array([1, 2]))),
        lambda: PartitionedNamespace.open(os.path.join(root, "missing"), storage_options=SECRET_OPTIONS),
        lambda: PartitionedNamespace.create(root, events_schema, appendix_a["partition_spec_v1"],
                                            storage_options=SECRET_OPTIONS),
    ]
    for fail in failures:
        with pytest.raises(LancepartError) as e:
            fail()
        seen.append(e.value)
    _set_location(root, ns.partitions()[0].object_id, "../x")
    with pytest.raises(UnsafeLocationError) as e:
        PartitionedNamespace.open(root, storage_options=SECRET_OPTIONS).to_table()
    seen.append(e.value)
    shutil.rmtree(os.path.join(root, "__manifest", "data"))
    with pytest.raises(CorruptNamespaceError) as e:
        PartitionedNamespace.open(root, storage_options=SECRET_OPTIONS)
    seen.append(e.value)
    assert any(r.name == "lancepart.write" for r in caplog.records)  # the capture works
    assert _leaks(_everything(caplog, *seen)) == []


@pytest.mark.spark
def test_secrets_never_leak_spark(spark, root, caplog, events_schema, appendix_a):
    """py4j logs every command at DEBUG, the pickled task function included: the storage
    options must not travel inside it."""
    ns = PartitionedNamespace.create(root, events_schema, appendix_a["partition_spec_v1"],
                                     storage_options=SECRET_OPTIONS)
    caplog.set_level(logging.DEBUG)
    df = spark.createDataFrame([(1, dt.date(2025, 12, 1), "US"), (2, dt.date(2025, 12, 2), "FR")],
                               "id long, event_date date, country string")
    result = lps.write(df, root, storage_options=SECRET_OPTIONS, batch_id="s-spark")
    assert result.rows_written == 2
    bad = df.withColumn("zzz", df.id)
    with pytest.raises(SchemaMismatchError) as e:
        lps.write(bad, root, storage_options=SECRET_OPTIONS)
    assert any(r.name.startswith("py4j") for r in caplog.records)  # the capture sees py4j's DEBUG log
    assert _leaks(_everything(caplog, result, e.value, ns)) == []
