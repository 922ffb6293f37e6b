"""The incremental ``__manifest`` commit (issue "Performance", goal 2; docs/design.md "The
``__manifest`` commit"; spec directory-namespace.md "V2: Manifest").

A commit no longer reads and rewrites the whole table: it looks its rows up through the
``object_id`` index, deletes them where they are and rewrites only the previous commit's
fragment (the tail). What must still hold, checked here on real Lance tables:

* the register stays linearizable: two commits from one snapshot, or a commit from an older
  snapshot, conflict (the rebase-and-retry of every publish depends on it);
* the rows are exactly those of an oracle dict after long random sequences of upserts and
  deletes, through tail splits and whole-table rewrites, read with plain pylance and with
  Lance's own ``DirectoryNamespace``;
* what a commit writes does not grow with the table.
"""

from __future__ import annotations

import random

import lance
import pytest

from lancepart.storage import manifest as m
from lancepart.storage.manifest import Manifest, ManifestChanges, ManifestConflict, manifest_schema, rows_from_records

SCHEMA = manifest_schema()


def record(oid: str, version: int | None = None) -> dict:
    return {"object_id": oid, "object_type": "table", "location": f"loc_{oid}", "read_version": version}


def create(tmp_path, n: int) -> Manifest:
    man = Manifest(str(tmp_path / "ns"))
    rows = rows_from_records(SCHEMA, [{"object_id": "root", "object_type": "namespace", "metadata": "{}"},
                                      *(record(f"t{i}", 1) for i in range(n))])
    man.create(rows, {"k": "v"})
    return man


def upsert(*records: dict) -> ManifestChanges:
    return ManifestChanges(upserts=rows_from_records(SCHEMA, list(records)))


def contents(man: Manifest, version: int | None = None) -> dict[str, int | None]:
    t = lance.dataset(man.uri, version=version).to_table(columns=["object_id", "read_version"])
    oids = t.column("object_id").to_pylist()
    assert len(oids) == len(set(oids)), "an object_id appears twice"
    return dict(zip(oids, t.column("read_version").to_pylist(), strict=True))


def test_two_commits_from_one_snapshot_conflict(tmp_path):
    """Linearizable: of two commits computed from one snapshot only the first lands, even when
    they change different rows; a commit from a snapshot older than the latest conflicts too."""
    man = create(tmp_path, 50)
    base = man.snapshot()
    man.commit_changes(base, upsert(record("t1", 2)))
    with pytest.raises(ManifestConflict):
        man.commit_changes(base, upsert(record("t40", 2)))  # another row, same snapshot
    newer = man.snapshot()
    man.commit_changes(newer, ManifestChanges(deletes=("t3",)))
    with pytest.raises(ManifestConflict):
        man.commit_changes(newer, upsert(record("new", 1)))
    with pytest.raises(ManifestConflict):
        man.commit(base, base.rows)  # the whole-table commit conflicts with the incremental ones
    got = contents(man)
    assert got["t1"] == 2 and got["t40"] == 1 and "t3" not in got and "new" not in got


def test_update_rebases_incremental_commits(tmp_path):
    """Manifest.update with ManifestChanges: a mutate that loses to a concurrent commit is re-run
    on the newer snapshot and sees its rows."""
    man = create(tmp_path, 10)
    calls = []

    def mutate(snap):
        calls.append(snap.version)
        if len(calls) == 1:  # a concurrent writer commits between our read and our commit
            man.commit_changes(man.snapshot(), upsert(record("t5", 7)))
        current = snap.lookup(["t5"]).column("read_version")[0].as_py()
        return upsert(record("t5", current + 1)), current

    snap, seen, retries = man.update(mutate, base_delay=0)
    assert retries == 1 and seen == 7 and contents(man)["t5"] == 8
    assert snap.lookup(["t5"]).column("read_version")[0].as_py() == 8


@pytest.mark.parametrize("tail_rows,max_fragments", [(4096, 32), (3, 6)])
def test_random_changes_match_an_oracle(tmp_path, monkeypatch, tail_rows, max_fragments):
    """300 random commits (upserts of existing and new rows, deletes, mixes, rows in old
    fragments and in the tail); after each, the table equals the oracle, at every version
    (time travel reads each one back). Small limits force tail splits, whole rewrites and
    index updates."""
    monkeypatch.setattr(m, "TAIL_ROWS", tail_rows)
    monkeypatch.setattr(m, "MAX_FRAGMENTS", max_fragments)
    monkeypatch.setattr(m, "UNINDEXED_ROWS", 50)
    man = create(tmp_path, 200)
    oracle = contents(man)
    history = {man.snapshot().version: dict(oracle)}
    rng = random.Random(7)
    fresh = 0
    for step in range(300):
        snap = man.snapshot()
        ups, dels = [], set()
        for _ in range(rng.choice([1, 1, 2, 5, 40])):
            if rng.random() < 0.2 and len(oracle) > 50:
                dels.add(rng.choice(sorted(oracle)))
            elif rng.random() < 0.3:
                fresh += 1
                ups.append(record(f"n{fresh}", step))
            else:
                ups.append(record(rng.choice(sorted(oracle)), step))
        ups = [u for u in {u["object_id"]: u for u in ups}.values() if u["object_id"] not in dels]
        changes = ManifestChanges(upserts=rows_from_records(SCHEMA, ups) if ups else None, deletes=tuple(dels))
        new = man.commit_changes(snap, changes)
        man.maintain_indexes(new)  # what Manifest.update does after each commit
        for oid in dels:
            oracle.pop(oid, None)
        oracle.update({u["object_id"]: u["read_version"] for u in ups})
        assert contents(man) == oracle, f"step {step}"
        history[new.version] = dict(oracle)
        assert len(new.fragment_ids) <= max_fragments + 1
    for version, want in list(history.items())[::37]:
        assert contents(man, version) == want
    ds = lance.dataset(man.uri)  # the object_id index was kept up to date along the way
    idx = next(i for i in ds.describe_indices() if i.name == "object_id_idx")
    covered = {f for seg in idx.segments for f in seg.fragment_ids}
    assert sum(f.metadata.physical_rows for f in ds.get_fragments() if f.fragment_id not in covered) <= 50 + 40


def test_a_commit_writes_the_tail_not_the_table(tmp_path):
    """What a one-row commit writes does not grow with the table: on a 20 000-row manifest it
    writes at most the tail plus the row (the whole-table rewrite wrote 20 001 rows)."""
    man = create(tmp_path, 20_000)
    for i in range(5):
        base = man.snapshot()
        before = set(base.fragment_ids)
        man.commit_changes(base, upsert(record(f"t{i * 997}", 9)))
        ds = lance.dataset(man.uri)
        written = sum(f.metadata.physical_rows for f in ds.get_fragments() if f.fragment_id not in before)
        assert written <= 1 + i, (i, written)
    assert contents(man)["t997"] == 9 and len(contents(man)) == 20_001


def test_lookup_finds_rows_in_indexed_and_unindexed_fragments(tmp_path):
    """Rows written after the index was built (the tail, settled fragments, a foreign append)
    are found by lookup like indexed ones."""
    man = create(tmp_path, 100)
    man.commit_changes(man.snapshot(), upsert(record("late", 3)))
    lance.write_dataset(rows_from_records(SCHEMA, [record("foreign", 4)]), man.uri, mode="append")
    snap = man.snapshot()
    got = snap.lookup(["t7", "late", "foreign", "absent"]).to_pydict()
    assert sorted(got["object_id"]) == ["foreign", "late", "t7"]
    assert snap.row("late")["read_version"] == 3 and snap.row("absent") is None


def test_directory_namespace_reads_after_incremental_commits(tmp_path, monkeypatch):
    """Lance's own DirectoryNamespace describes every partition table of a namespace whose
    ``__manifest`` was changed by incremental commits (deletion files, a rewritten tail), at
    the location lancepart published; plain pylance reads each table at its read_version."""
    import lance.namespace as lns
    import pyarrow as pa

    from lancepart import PartitionedNamespace

    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), ("shop", pa.int32())])
    spec = {"id": 1, "fields": [{"field_id": "shop", "source_ids": [1], "transform": {"type": "identity"},
                                 "result_type": {"type": "int32"}}]}
    monkeypatch.setattr(m, "TAIL_ROWS", 3)  # settled fragments with deletion files, as at scale
    ns = PartitionedNamespace.create(str(tmp_path / "ns"), schema, spec)
    for i in range(12):
        ns.write(pa.table({"id": [i, 100 + i], "shop": [i % 5, 7]}, schema=schema))
    fragments = lance.dataset(ns.manifest.uri).get_fragments()
    assert len(fragments) > 2 and any(f.deletion_file() for f in fragments)
    d = lns.DirectoryNamespace(root=ns.root)
    total = 0
    for p in ns.partitions():
        desc = d.describe_table(lns.DescribeTableRequest(id=p.object_id.split("$")))
        assert desc.location.rstrip("/").endswith(p.location)
        total += lance.dataset(f"{ns.root}/{p.location}", version=p.read_version).count_rows()
    assert len(ns.partitions()) == 6 and total == 24


def test_empty_manifest_falls_back_to_a_whole_commit(tmp_path):
    """A manifest with no fragment (no tail to remove) commits the whole table, as before."""
    man = Manifest(str(tmp_path / "ns"))
    man.create(SCHEMA.empty_table(), {})
    base = man.snapshot()
    assert base.fragment_ids == ()
    man.commit_changes(base, upsert(record("a", 1)))
    assert contents(man) == {"a": 1}


def test_stale_handle_whose_version_was_cleaned_up_raises_typed(tmp_path):
    """A handle reads its partition table rows at open and the others when first needed. When
    a cleanup (short retention) removed its ``__manifest`` version before that, the read raises
    SnapshotExpiredError naming the version and what to do; refresh() reads the latest."""
    from datetime import timedelta

    import pyarrow as pa

    from lancepart import PartitionedNamespace
    from lancepart.errors import SnapshotExpiredError

    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), ("shop", pa.int32())])
    spec = {"id": 1, "fields": [{"field_id": "shop", "source_ids": [1], "transform": {"type": "identity"},
                                 "result_type": {"type": "int32"}}]}
    ns = PartitionedNamespace.create(str(tmp_path / "ns"), schema, spec)
    ns.write(pa.table({"id": [1], "shop": [1]}, schema=schema))
    stale = PartitionedNamespace.open(ns.root)
    ns.write(pa.table({"id": [2], "shop": [2]}, schema=schema))
    ns.cleanup(timedelta(0), allow_short_retention=True)
    stale.partitions()  # the partition table rows are read at open: a handle keeps what it opened
    with pytest.raises(SnapshotExpiredError, match=r"version \d+ .* refresh"):
        stale.describe_namespace(["v1", "1"])  # the other rows are read when first needed
    assert len(stale.refresh().partitions()) == 2 and stale.describe_namespace(["v1"])


def test_a_commit_of_many_rows_rewrites_the_table(tmp_path, monkeypatch):
    """Past LOOKUP_LIMIT changed rows a commit reads the snapshot once and rewrites the table
    (one fragment after it) instead of looking every row up; the rows are the oracle's."""
    monkeypatch.setattr(m, "LOOKUP_LIMIT", 10)
    monkeypatch.setattr(m, "TAIL_ROWS", 3)
    man = create(tmp_path, 100)
    man.commit_changes(man.snapshot(), upsert(record("t1", 2)))  # incremental: a second fragment
    assert len(man.snapshot().fragment_ids) == 2
    new = man.commit_changes(man.snapshot(), ManifestChanges(
        upserts=rows_from_records(SCHEMA, [record(f"t{i}", 3) for i in range(20, 40)]), deletes=("t5",)))
    assert len(new.fragment_ids) == 1
    want = {"root": None, **{f"t{i}": 1 for i in range(100)}, "t1": 2, **{f"t{i}": 3 for i in range(20, 40)}}
    del want["t5"]
    assert contents(man) == want


def test_the_pins_are_exactly_the_table_rows(tmp_path):
    """table_pins() builds the pins column by column (a column with no value and object_type are
    made, not filtered): the same table, schema included, as filtering every column by
    ``object_type = 'table'``, over rows of every kind: namespace rows, a branch pin on one
    table, a single row, no row, no table, a NULL object_type."""
    import pyarrow as pa
    import pyarrow.compute as pc

    man = create(tmp_path, 40)
    man.commit_changes(man.snapshot(), upsert({"object_id": "ns1", "object_type": "namespace", "metadata": "{}"},
                                              {**record("t3", 7), "read_branch": "dev"}, record("t41", 2)))

    def plain(rows):
        return rows.filter(pc.fill_null(pc.equal(rows.column("object_type"), "table"), False))

    snap = man.snapshot()
    full = snap.rows
    assert full.num_rows == 43
    namespaces = full.filter(pc.not_equal(full.column("object_type"), "table"))
    loose = full.schema.set(1, full.schema.field("object_type").with_nullable(True))
    foreign = full.cast(loose).set_column(1, loose.field("object_type"),
                                          pa.array([None, *full.column("object_type").to_pylist()[1:]], pa.utf8()))
    for rows in (full, full.slice(0, 1), full.slice(0, 0), namespaces, foreign):
        assert m._table_rows(rows).equals(plain(rows), check_metadata=True), rows.num_rows
    pins = snap.table_pins()
    assert sorted(pins.column("object_id").to_pylist()) == sorted(plain(full).column("object_id").to_pylist())
    assert pins.column("read_branch").to_pylist().count("dev") == 1


def test_a_whole_scan_of_the_manifest_decodes_batches_ahead(tmp_path, monkeypatch):
    """An open reads the pins of every table in one scan; Lance's default read-ahead (the number
    of cores) halves its speed on a 2-core machine (docs/benchmarks.md, "Namespace size"), so
    every whole scan of ``__manifest`` asks for SCAN_READAHEAD batches, never fewer than 16."""
    man = create(tmp_path, 10)
    asked = []
    real = lance.LanceDataset.to_table

    def to_table(self, *args, **kwargs):
        if self.uri.rstrip("/").endswith("__manifest"):
            asked.append(kwargs.get("batch_readahead"))
        return real(self, *args, **kwargs)

    monkeypatch.setattr(lance.LanceDataset, "to_table", to_table)
    man.snapshot().table_pins()
    man.snapshot().rows  # noqa: B018
    assert len(asked) == 2 and all(a is not None and a >= 16 for a in asked), asked


def test_an_open_and_a_pruned_lookup_copy_no_table_rows_out(root, monkeypatch):
    """An open reads the pin columns of every row and a pruned lookup runs the Appendix D query
    over them as they are (its ``object_type = 'table'`` keeps the tables): the table rows are
    not copied out of the namespace rows first, a copy that cost 2.4 ms of each open at 100 000
    partitions (docs/benchmarks.md, "Namespace size"). Only a caller that wants every table row
    (``partitions()`` without a filter) has them filtered, once. Over two spec versions, a
    foreign root-level table and namespace rows, pruning the pin rows keeps and counts exactly
    what pruning the table rows does."""
    from lancepart import PartitionedNamespace
    from lancepart.read.manifest_query import prune
    from lancepart.util.sample import demo_events
    from tests.conftest import create_events_ns

    ns = create_events_ns(root)
    data = demo_events(400, seed=3)
    ns.write(data.slice(0, 200))
    ns.update_spec({"id": 2, "fields": [{"field_id": "country", "source_ids": [3], "transform": {"type": "identity"},
                                         "result_type": {"type": "utf8"}}]})
    ns.write(data.slice(200))
    lance.write_dataset(data.slice(0, 3), f"{root}/clicks.lance")  # a root-level table and a namespace row
    snap = ns.snapshot()
    ns.manifest.commit_changes(snap, ManifestChanges(upserts=rows_from_records(snap.schema, [
        {"object_id": "clicks", "object_type": "table", "location": "clicks.lance", "read_version": 1},
        {"object_id": "team", "object_type": "namespace", "metadata": "{}"}])))

    copies = []
    real = m._table_rows
    monkeypatch.setattr(m, "_table_rows", lambda rows: copies.append(rows.num_rows) or real(rows))
    opened = PartitionedNamespace.open(root)
    snap = opened.snapshot()
    filters = ["event_date = DATE '2025-12-10'", "country = 'US'", "user_id % 4 = 1 OR country IN ('FR', 'DE')",
               "event_date > DATE '2099-01-01'", "TRUE"]
    for flt in filters:
        opened.partitions(flt)
        opened.explain(flt)
    assert copies == []
    pins = snap.table_pins()
    assert copies == [snap.pin_rows().num_rows] and pins.num_rows < snap.pin_rows().num_rows
    for flt in filters:
        over_pins, over_rows = (prune(flt, ns.schema, opened.specs, rows) for rows in (pins, snap.pin_rows()))
        assert over_rows.object_ids == over_pins.object_ids, flt
        assert (over_rows.kept_counts, over_rows.pruned) == (over_pins.kept_counts, over_pins.pruned), flt
        assert over_rows.kept.equals(over_pins.kept), flt
    partition_ids = sorted(o for o in pins.column("object_id").to_pylist() if o != "clicks")
    assert "clicks" in pins.column("object_id").to_pylist() and len(partition_ids) > 10
    assert sorted(p.object_id for p in opened.partitions()) == partition_ids
