"""The Lance file format version of partition tables (issue 23; docs/file-format.md).

Lance file format spec, versions: every data file of a Lance table carries its file format
version (``DataFile.file_major_version`` / ``file_minor_version``), fixed for the table when it
is created. spec partitioning.md "Runtime Namespace Properties": a namespace property lives in
the ``__manifest`` table metadata; ``lancepart.data_storage_version`` chooses the version of the
partition tables the namespace creates from now on, and never that of a table that exists.
Real Lance tables on disk, read back with plain pylance.
"""

from __future__ import annotations

import datetime as dt
import os

import lance
import pyarrow as pa
import pytest

from lancepart import PartitionedNamespace
from lancepart.errors import ConfigError, InvalidArgumentError
from lancepart.evolution.file_format import (
    DATA_STORAGE_VERSION_KEY,
    DEFAULT_DATA_STORAGE_VERSION,
    set_data_storage_version,
)
from lancepart.storage.manifest import ManifestChanges, join_uri
from lancepart.util.sample import DEMO_START, demo_events
from tests.conftest import create_events_ns, expected_keys, manifest_version


def table_versions(root: str) -> dict[str, set[str]]:
    """object_id -> the file format versions of the data files of each table the latest
    ``__manifest`` publishes, read with plain pylance at its ``read_version``."""
    out = {}
    for r in lance.dataset(join_uri(root, "__manifest")).to_table().to_pylist():
        if r["object_type"] == "table":
            ds = lance.dataset(join_uri(root, r["location"]), version=r["read_version"])
            out[r["object_id"]] = {f"{f.file_major_version}.{f.file_minor_version}"
                                   for fr in ds.get_fragments() for f in fr.metadata.files}
    return out


def published_rows(root: str) -> pa.Table:
    """Every row the latest ``__manifest`` publishes, read with plain pylance, sorted by id."""
    parts = []
    for r in lance.dataset(join_uri(root, "__manifest")).to_table().to_pylist():
        if r["object_type"] == "table":
            parts.append(lance.dataset(join_uri(root, r["location"]), version=r["read_version"])
                         .to_table(columns=["id", "amount"]))
    return pa.concat_tables(parts).sort_by("id")


def rows_of(table: pa.Table) -> list[dict]:
    return table.sort_by("id").to_pylist()


def test_new_tables_get_the_default_version(ns):
    """No property: every new partition table is written in lancepart's default, 2.2 named
    explicitly (what pylance 14 writes by default; a newer pylance does not change it)."""
    assert DEFAULT_DATA_STORAGE_VERSION == "2.2"
    ns.write(demo_events(400, days=3))
    versions = table_versions(ns.root)
    assert len(versions) == 12
    assert all(v == {"2.2"} for v in versions.values()), versions


def test_2_0_is_refused_for_a_namespace_with_a_struct_column(tmp_path):
    """Lance file format 2.0 cannot store a NULL struct value ("does not encode struct
    validity"): a namespace with a struct column refuses the property 2.0 with a typed error
    naming the key and the column, and nothing changes; 2.1 is accepted and a NULL struct
    then writes and reads back (tests/test_spark_read.py's all-types table was refused by a
    2.0 default)."""
    from lancepart import PartitionedNamespace
    from lancepart.errors import InvalidArgumentError

    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), ("day", pa.date32()),
                        ("point", pa.struct([("x", pa.float64()), ("y", pa.float64())]))])
    spec = {"id": 1, "fields": [{"field_id": "day", "source_ids": [1], "transform": {"type": "identity"},
                                 "result_type": {"type": "date32"}}]}
    ns = PartitionedNamespace.create(str(tmp_path / "ns"), schema, spec)
    before = ns.manifest_version
    with pytest.raises(InvalidArgumentError, match=r"lancepart.data_storage_version.*'point'"):
        set_data_storage_version(ns.root, "2.0")
    assert ns.refresh().manifest_version == before
    set_data_storage_version(ns.root, "2.1")
    rows = pa.table({"id": pa.array([1, 2], pa.int64()), "day": pa.array([0, 0], pa.int32()).cast(pa.date32()),
                     "point": pa.array([{"x": 1.0, "y": 2.0}, None], schema.field("point").type)})
    ns.refresh().write(rows)
    assert ns.to_table().sort_by("id").column("point").to_pylist() == [{"x": 1.0, "y": 2.0}, None]


@pytest.mark.parametrize("version", ["2.1", "2.2"])
def test_the_namespace_property_chooses_the_version_of_new_tables(ns, version):
    """``lancepart.data_storage_version`` in the ``__manifest`` table metadata (spec
    "Runtime Namespace Properties": shown by describe_namespace([])) decides new tables."""
    set_data_storage_version(ns.root, version)
    assert ns.refresh().describe_namespace([])[DATA_STORAGE_VERSION_KEY] == version
    data = demo_events(400, days=3)
    ns.write(data)
    versions = table_versions(ns.root)
    assert len(versions) == 12 and all(v == {version} for v in versions.values()), versions
    assert rows_of(ns.to_table()) == rows_of(data)


def test_a_stream_write_creates_tables_in_the_namespace_version(ns):
    """A stream (its partitions' fragments written first, the table committed at publish:
    write_new_fragments + create_table) makes tables of the namespace's version too."""
    set_data_storage_version(ns.root, "2.1")
    data = demo_events(600, days=3)
    ns.refresh().write(data.to_reader(max_chunksize=150), chunk_rows=150)
    versions = table_versions(ns.root)
    assert all(v == {"2.1"} for v in versions.values()), versions
    assert published_rows(ns.root).column("id").to_pylist() == sorted(data.column("id").to_pylist())


def test_a_property_change_during_a_stream_write_does_not_split_a_new_table(ns):
    """The property is read once per write: a new table built from the fragments of several
    chunks has one version even when the property changes between them (Lance file format
    spec, versions: one version per table)."""
    first = demo_events(200, days=1)
    second = demo_events(200, seed=5, start_id=200, days=2)  # the same partitions, and new ones
    data = pa.concat_tables([first, second])

    def batches():
        yield from first.to_batches()
        set_data_storage_version(ns.root, "2.1")  # between the first chunk and the second
        yield from second.to_batches()

    ns.write(pa.RecordBatchReader.from_batches(data.schema, batches()), chunk_rows=200)
    versions = table_versions(ns.root)
    assert versions and all(v == {DEFAULT_DATA_STORAGE_VERSION} for v in versions.values()), versions
    assert rows_of(ns.to_table()) == rows_of(data)


@pytest.mark.parametrize("bad", ["2.3", "next", "stable", "legacy", "3", "", 2.1])
def test_setting_a_bad_version_names_the_key_and_the_value(ns, bad):
    before = manifest_version(ns.root)
    with pytest.raises(InvalidArgumentError) as e:
        set_data_storage_version(ns.root, bad)
    assert DATA_STORAGE_VERSION_KEY in str(e.value) and repr(bad) in str(e.value)
    assert manifest_version(ns.root) == before


def test_a_bad_stored_value_fails_the_write_before_anything_is_published(ns):
    """A value another tool put into the metadata: ConfigError naming key and value; the write
    publishes nothing and no table directory is left behind."""
    ns.manifest.update(lambda snap: (ManifestChanges(metadata={DATA_STORAGE_VERSION_KEY: "9.9"}), None))
    before = manifest_version(ns.root)
    with pytest.raises(ConfigError) as e:
        ns.refresh().write(demo_events(100, days=1))
    assert DATA_STORAGE_VERSION_KEY in str(e.value) and "'9.9'" in str(e.value)
    assert manifest_version(ns.root) == before
    assert [d for d in os.listdir(ns.root) if d != "__manifest"] == []


def test_a_reserved_partition_gets_an_empty_table_of_the_namespace_version(ns):
    """A partition reserved before it has rows gets an empty table in the namespace's version;
    rows written into it later, after the property changed, are written in the table's own."""
    from lancepart.write.reserve import reserve_partitions

    set_data_storage_version(ns.root, "2.1")
    rows = demo_events(1, days=1)
    (day, bucket), = expected_keys(rows)
    res = reserve_partitions(ns.refresh().manifest, ns.current_spec,
                             [pa.array([day], pa.date32()), pa.array([bucket], pa.int32())], ns.schema)
    ref = res.tables[0]
    empty = lance.dataset(join_uri(ns.root, ref.location), version=ref.read_version)
    assert empty.count_rows() == 0 and empty.data_storage_version == "2.1"

    set_data_storage_version(ns.root, "2.0")
    ns.refresh().write(rows)
    assert table_versions(ns.root) == {ref.object_id: {"2.1"}}
    assert rows_of(ns.to_table()) == rows_of(rows)


def test_a_namespace_whose_property_changes_holds_and_reads_a_mix(tmp_path):
    """Write under 2.1, set the property to 2.0, then write new partitions and append into the
    old ones: old tables stay 2.1 (appends in the table's own version, Lance file format spec:
    one version per table), new ones are 2.0. Reads, compaction, delete, merge and a schema
    change all work across the mix, and each table keeps its version through them."""
    root = str(tmp_path / "ns")
    ns = create_events_ns(root)
    set_data_storage_version(root, "2.1")
    first = demo_events(600, seed=1, days=3)
    ns.refresh().write(first)
    old = table_versions(root)
    assert all(v == {"2.1"} for v in old.values())

    set_data_storage_version(root, "2.0")
    second = demo_events(600, seed=2, start_id=600, days=6)  # days 0-2: appends, days 3-5: new tables
    ns.refresh().write(second)
    mixed = table_versions(root)
    new = set(mixed) - set(old)
    assert new and all(mixed[oid] == {"2.1"} for oid in old), mixed
    assert all(mixed[oid] == {"2.0"} for oid in new), mixed

    everything = pa.concat_tables([first, second]).sort_by("id")
    assert rows_of(ns.refresh().to_table()) == rows_of(everything)
    cutoff = DEMO_START.date() + dt.timedelta(days=3)
    late = ns.to_table(f"event_date >= date '{cutoff.isoformat()}'")  # the new tables only (pruned)
    assert late.num_rows == sum(d >= cutoff for d in everything.column("event_date").to_pylist()) > 0

    ns.compact()
    assert table_versions(root) == mixed  # a rewrite keeps each table's version
    assert rows_of(ns.refresh().to_table()) == rows_of(everything)

    ns.delete("id % 5 = 0")
    kept = everything.filter(pa.array(everything.column("id").to_numpy() % 5 != 0))
    assert published_rows(root).column("id").to_pylist() == kept.column("id").to_pylist()

    # merge: update rows in old and new tables, insert rows into old, new and brand-new partitions
    changes = demo_events(300, seed=3, start_id=1, days=8)
    changes = changes.set_column(changes.schema.get_field_index("id"), "id",
                                 pa.array([i * 4 + 1 for i in range(300)], pa.int64()))
    changes = changes.set_column(changes.schema.get_field_index("amount"), "amount",
                                 pa.array([-1.0] * 300))
    ns.merge(changes, on=["id"])
    after = table_versions(root)
    assert all(after[oid] == {"2.1"} for oid in old), after
    assert all(after[oid] == {"2.0"} for oid in set(after) - set(old)), after
    assert len(after) > len(mixed)  # days 6-7: tables the merge created, in the namespace's 2.0
    got = published_rows(root)
    expect = {i: a for i, a in zip(kept.column("id").to_pylist(), kept.column("amount").to_pylist(), strict=True)}
    expect.update({i: -1.0 for i in changes.column("id").to_pylist()})
    assert dict(zip(got.column("id").to_pylist(), got.column("amount").to_pylist(), strict=True)) == expect

    # a schema change rewrites old tables' columns on their next write: still their own version
    ns.update_schema(add=[pa.field("note", pa.string())])
    extra = demo_events(200, seed=4, start_id=10_000, days=6)
    ns.refresh().write(extra.append_column("note", pa.array(["x"] * 200)))
    final = table_versions(root)
    assert all(final[oid] == {"2.1"} for oid in old), final
    assert all(final[oid] == {"2.0"} for oid in set(final) - set(old)), final
    assert ns.refresh().to_table().num_rows == got.num_rows + 200
    assert PartitionedNamespace.open(root).verify().ok


@pytest.mark.spark
def test_spark_writes_new_tables_in_the_namespace_version_and_appends_in_their_own(spark, ns):
    """lps.write: the executors write new tables' fragments in the namespace's version (the
    driver reads the property once and passes it to every task); appends keep the table's."""
    from lancepart import spark as lps
    from tests.test_spark_write import to_df

    set_data_storage_version(ns.root, "2.1")
    first = demo_events(400, seed=1, days=2)
    lps.write(to_df(spark, first), ns.root)
    old = table_versions(ns.root)
    assert old and all(v == {"2.1"} for v in old.values()), old

    set_data_storage_version(ns.root, "2.2")
    second = demo_events(400, seed=2, start_id=400, days=4)
    lps.write(to_df(spark, second), ns.root)
    after = table_versions(ns.root)
    assert all(after[oid] == {"2.1"} for oid in old), after
    assert set(after) > set(old) and all(after[oid] == {"2.2"} for oid in set(after) - set(old)), after
    assert published_rows(ns.root).column("id").to_pylist() == list(range(800))
    # the mix read back through Spark (lps.read and the `lancepart` data source)
    assert sorted(r.id for r in lps.read(spark, ns.root).select("id").collect()) == list(range(800))

    # the data source's write (same task function, no version passed: the task reads the property)
    third = demo_events(200, seed=3, start_id=800, days=6)
    to_df(spark, third).write.format("lancepart").mode("append").save(ns.root)
    final = table_versions(ns.root)
    assert all(final[oid] == after[oid] for oid in after), final
    assert set(final) > set(after) and all(final[oid] == {"2.2"} for oid in set(final) - set(after)), final
    assert spark.read.format("lancepart").load(ns.root).count() == 1000


# --------------------------------------------------------------------------- small-table encoding
def string_encodings(root: str) -> dict[str, tuple[dict, set[str]]]:
    """object_id -> (the ``country`` field's metadata in the table's schema, the compressions its
    data files used for it: ``Fsst`` / ``General`` as Lance's page encodings name them)."""
    import re

    from lance.file import LanceFileReader

    out = {}
    for r in lance.dataset(join_uri(root, "__manifest")).to_table().to_pylist():
        if r["object_type"] != "table":
            continue
        ds = lance.dataset(join_uri(root, r["location"]), version=r["read_version"])
        col = ds.schema.get_field_index("country")
        used = set()
        for fr in ds.get_fragments():
            for f in fr.metadata.files:
                md = LanceFileReader(os.path.join(ds.uri, "data", f.path)).metadata()
                for page in md.columns[col].pages:
                    used |= set(re.findall(r"\b(Fsst|General|Zstd|Lz4)\b", str(page.encoding)))
        out[r["object_id"]] = (dict(ds.schema.field("country").metadata or {}), used)
    return out


def _countries(rows: pa.Table) -> pa.Table:
    """``rows`` with random 40-character countries: strings FSST compresses when it may."""
    import numpy as np

    hexs = pa.array([os.urandom(20).hex() for _ in range(500)])
    pick = pa.array(np.random.default_rng(3).integers(0, 500, rows.num_rows))
    return rows.set_column(rows.schema.get_field_index("country"), "country", hexs.take(pick))


def test_small_new_tables_store_strings_uncompressed_and_so_do_their_appends(ns, monkeypatch):
    """A partition table created with fewer than SMALL_TABLE_ROWS rows stores its string
    columns without compression (the field says ``lance-encoding:compression=none``), and Lance
    writes the rows appended to it the same way; one created larger keeps Lance's choice. What
    readers see does not change: the namespace schema and its field metadata, nothing more."""
    from lancepart.evolution import file_format

    monkeypatch.setattr(file_format, "SMALL_TABLE_ROWS", 500)
    big = _countries(demo_events(4_000, seed=1, days=1))  # 4 tables of about 1 000 rows
    small = _countries(demo_events(200, seed=2, start_id=5_000, days=2).filter(
        pa.compute.not_equal(demo_events(200, seed=2, start_id=5_000, days=2)["event_date"], DEMO_START)))
    ns.write(big)
    ns.write(small)
    enc = string_encodings(ns.root)
    none = {b"lance-encoding:compression": b"none"}
    created_small = {o for o, (md, _) in enc.items() if md == none}
    assert created_small and len(created_small) < len(enc), enc
    for oid, (md, used) in enc.items():
        if oid in created_small:
            assert not used, (oid, used)
        else:  # created with 500 rows or more: Lance compresses the strings
            assert md == {} and used & {"Fsst", "General"}, (oid, md, used)
    ns.write(_countries(demo_events(200, seed=4, start_id=9_000, days=2)))  # appends to both kinds
    after = string_encodings(ns.root)
    assert all(not after[o][1] for o in created_small), after
    got = ns.to_table()
    assert got.schema.equals(ns.schema, check_metadata=True), got.schema
    assert got.num_rows == 4_000 + small.num_rows + 200


@pytest.mark.spark
def test_spark_creates_small_tables_with_uncompressed_strings(spark, ns):
    from lancepart import spark as lps
    from tests.test_spark_write import to_df

    lps.write(to_df(spark, _countries(demo_events(400, seed=1, days=2))), ns.root)
    enc = string_encodings(ns.root)
    assert enc and all(md == {b"lance-encoding:compression": b"none"} and not used for md, used in enc.values()), enc
    assert lps.read(spark, ns.root).count() == 400


# --------------------------------------------------------------------------- grown tables re-encoded
def _grow(ns, monkeypatch) -> tuple[set[str], pa.Table]:
    """A namespace whose tables were created small (strings uncompressed), 8 of which then grew
    past a SMALL_TABLE_ROWS of 500 in three appends (three fragments of about 400 rows each;
    Lance compresses a page of 1 000 such strings, not of 600) while a third day's
    stay small; the object ids of the grown tables and the published (id, amount), sorted by id."""
    from lancepart.evolution import file_format

    monkeypatch.setattr(file_format, "SMALL_TABLE_ROWS", 500)
    rows = _countries(demo_events(9_600, seed=5, days=2))  # 8 tables of about 1 200 rows
    for i in range(3):
        ns.write(rows.slice(i * 3_200, 3_200))
    third = demo_events(300, seed=6, start_id=50_000, days=3)
    ns.write(_countries(third.filter(pa.compute.greater(third["event_date"], pa.scalar(DEMO_START.date()
                                                                                   + dt.timedelta(days=1))))))
    enc = string_encodings(ns.root)
    none = {b"lance-encoding:compression": b"none"}
    assert enc and all(md == none and not used for md, used in enc.values()), enc
    grown = {p.object_id for p in ns.partitions() if p.values["event_date"] < DEMO_START.date() + dt.timedelta(days=2)}
    assert len(grown) == 8 and len(enc) > 8, enc
    held = {p.object_id: lance.dataset(join_uri(ns.root, p.location), version=p.read_version).count_rows()
            for p in ns.partitions()}
    assert all(n >= 500 if o in grown else n < 500 for o, n in held.items()), held
    return grown, published_rows(ns.root)


def test_compaction_gives_a_grown_small_table_its_string_compression_back(ns, monkeypatch):
    """A table created small stores its strings uncompressed, and Lance writes every later append
    and every compaction rewrite of it by that field: without more, a table that grows from small
    appends stays uncompressed for good. Compaction first removes lancepart's
    ``compression=none`` from the tables that now hold SMALL_TABLE_ROWS live rows (one commit per
    table, one ``__manifest`` commit for all), so what it rewrites, and every later append, is
    compressed as in a table created large; the rows do not change."""
    grown, before = _grow(ns, monkeypatch)
    small = set(string_encodings(ns.root)) - grown
    result = ns.compact()
    assert result.details["tables_reencoded"] == len(grown), result.details
    enc = string_encodings(ns.root)
    for oid in grown:
        md, used = enc[oid]
        assert md == {} and used & {"Fsst", "General"}, (oid, md, used)
    for oid in small:
        assert enc[oid][0] == {b"lance-encoding:compression": b"none"}, enc[oid]
    assert result.details["bytes_after"] < result.details["bytes_before"], result.details
    assert published_rows(ns.root).equals(before)
    assert ns.compact().details["tables_reencoded"] == 0  # done once
    ns.write(_countries(demo_events(200, seed=7, start_id=90_000, days=2)))  # appends to the grown tables
    assert all(enc2[1] & {"Fsst", "General"} for o, enc2 in string_encodings(ns.root).items() if o in grown)


@pytest.mark.spark
def test_spark_compaction_gives_a_grown_small_table_its_string_compression_back(spark, ns, monkeypatch):
    """``lps.compact`` re-encodes on the driver before its executors rewrite, as ``ns.compact`` does."""
    from lancepart import spark as lps

    grown, before = _grow(ns, monkeypatch)
    result = lps.compact(spark, ns.root, tables_per_task=1)
    assert result.details["tables_reencoded"] == len(grown) and not result.failures, result.details
    enc = string_encodings(ns.root)
    assert all(enc[o][0] == {} and enc[o][1] & {"Fsst", "General"} for o in grown), enc
    assert published_rows(ns.root).equals(before)


def test_a_compression_the_namespace_schema_names_is_kept(tmp_path, monkeypatch):
    """``compression=none`` that the namespace schema itself puts on a field is the owner's
    choice, not lancepart's small-table default: compaction leaves it."""
    from lancepart.evolution import file_format
    from tests.conftest import EVENTS_SPEC

    monkeypatch.setattr(file_format, "SMALL_TABLE_ROWS", 500)
    schema = demo_events(1).schema
    i = schema.get_field_index("country")
    schema = schema.set(i, schema.field("country").with_metadata({"lance-encoding:compression": "none"}))
    ns = PartitionedNamespace.create(str(tmp_path / "ns"), schema, EVENTS_SPEC)
    for k in range(3):
        ns.write(_countries(demo_events(800, seed=k, start_id=k * 800, days=1)).cast(schema))
    result = ns.compact()
    assert result.details["tables_reencoded"] == 0 and result.partitions_touched > 0, result.details
    assert all(md == {b"lance-encoding:compression": b"none"} and not used
               for md, used in string_encodings(ns.root).values())


def test_a_reencode_interrupted_before_its_publish_is_done_again_and_loses_nothing(ns, monkeypatch):
    """Hazard: the process dies after the tables' field commits, before the ``__manifest`` commit
    that publishes them. Those versions are nobody's published work; the rows read are the
    published ones, and the next compaction restores past them and re-encodes again."""
    from lancepart.util import faults

    grown, before = _grow(ns, monkeypatch)
    monkeypatch.setenv(faults.ENV, "before_manifest_commit:raise")
    with pytest.raises(faults.InjectedFault):
        ns.compact()
    monkeypatch.delenv(faults.ENV)
    reopened = PartitionedNamespace.open(ns.root)
    assert reopened.to_table(columns=["id", "amount"]).sort_by("id").equals(before)
    assert all(md == {b"lance-encoding:compression": b"none"} for md, _ in string_encodings(ns.root).values())
    result = reopened.compact()
    assert result.details["tables_reencoded"] == len(grown), result.details
    assert published_rows(ns.root).equals(before)


def test_a_reencode_never_publishes_a_dead_writers_rows(ns, monkeypatch):
    """Hazard: a writer committed fragments to a grown table and died before publishing them.
    The field commit is made on the published version (restored past the dead writer's), so the
    re-encoded table holds exactly the published rows."""
    from lancepart.storage.table_commit import commit_table
    from lancepart.write.upgrade import append_fragments

    grown, before = _grow(ns, monkeypatch)
    p = next(p for p in ns.partitions() if p.object_id in grown)
    stray = pa.Table.from_pylist([{**{c: None for c in ns.schema.names}, "id": 10**9, **p.values}],
                                 schema=ns.schema)
    frags = append_fragments(ns.manifest, p.object_id, p.location, stray, ns.schema, published=p.read_version)
    commit_table(ns.root, p.location, p.read_version, frags)  # committed to the table, never published
    result = ns.compact()
    assert result.details["tables_reencoded"] == len(grown), result.details
    after = published_rows(ns.root)
    assert 10**9 not in after["id"].to_pylist() and after.equals(before)


def test_a_write_published_while_a_reencode_publishes_keeps_its_rows(ns, monkeypatch, tmp_path):
    """Beside a writer: a write into a grown table publishes between the table's field commit and
    the re-encode's ``__manifest`` commit. The re-encode leaves that table out (its read_version
    moved); the write's version, made on top of the field commit, carries the new encoding; no row
    is lost or doubled."""
    import threading

    from lancepart.util import faults

    grown, before = _grow(ns, monkeypatch)
    gate = str(tmp_path / "gate")
    monkeypatch.setenv(faults.ENV, f"before_manifest_commit:wait:{gate}")
    out: dict = {}
    t = threading.Thread(target=lambda: out.setdefault("r", ns.compact()))
    t.start()
    deadline = dt.datetime.now() + dt.timedelta(seconds=60)
    while not os.path.exists(gate + ".reached") and dt.datetime.now() < deadline:
        t.join(0.02)
    assert os.path.exists(gate + ".reached")
    os.environ.pop(faults.ENV)  # the writer below runs without the fault
    extra = _countries(demo_events(100, seed=8, start_id=70_000, days=2))
    writer = PartitionedNamespace.open(ns.root)
    writer.write(extra)
    open(gate, "w").close()
    t.join(120)
    assert "r" in out
    assert out["r"].details["tables_reencoded"] < len(grown), out["r"].details
    got = published_rows(ns.root)
    assert got.num_rows == before.num_rows + extra.num_rows
    assert sorted(got["id"].to_pylist()) == sorted(before["id"].to_pylist() + extra["id"].to_pylist())
    touched = {p.object_id for p in writer.partitions() if p.object_id in grown}
    assert all(string_encodings(ns.root)[o][0] == {} for o in touched)
