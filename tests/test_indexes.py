"""Declared indexes (issue 15 items 1 and 2): ``ns.create_index`` stores the declaration as a root
property of ``__manifest`` (spec partitioning.md "Metadata Definition") and builds a real Lance
index on every published partition table, published in ONE ``__manifest`` commit; writes and
compactions keep it up to date; ``verify`` reports a declared index missing on a table above the
threshold. Real Lance tables on disk; the oracle queries plain pylance at each published
version and compares with a brute-force answer."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import lance
import numpy as np
import pyarrow as pa
import pytest

from lancepart import PartitionedNamespace
from lancepart.cli import main
from lancepart.errors import InvalidArgumentError, SchemaMismatchError
from lancepart.index import declared_indexes, index_state
from lancepart.storage.manifest import join_uri

HERE = Path(__file__).resolve().parent
DIM = 16
SPEC = {"id": 1, "fields": [{"field_id": "part", "source_ids": [1], "transform": {"type": "identity"},
                             "result_type": {"type": "utf8"}}]}
SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), ("part", pa.utf8()), ("txt", pa.utf8()),
                    ("cat", pa.utf8()), ("vec", pa.list_(pa.float32(), DIM))])
WORDS = np.array(["apple", "banana", "cherry", "delta", "echo", "fox", "golf", "hotel"])


def rows(n: int, start: int = 0, parts: tuple[str, ...] = ("a", "b", "c")) -> pa.Table:
    """``n`` rows with ids [start, start+n), spread over ``parts``."""
    ids = np.arange(start, start + n, dtype=np.int64)
    vec = np.random.default_rng(start).standard_normal((n, DIM)).astype(np.float32)
    part = np.array(parts)[ids % len(parts)]
    txt = np.char.add(np.char.add(WORDS[ids % 8], " "), WORDS[(ids // 8) % 8])
    return pa.table({"id": ids, "part": part, "txt": txt, "cat": np.char.add("c", (ids % 5).astype(str)),
                     "vec": pa.FixedSizeListArray.from_arrays(pa.array(vec.ravel()), DIM)}, schema=SCHEMA)


def published(ns: PartitionedNamespace, version: int | None = None) -> dict[str, lance.LanceDataset]:
    """object_id -> the partition table at its read_version in __manifest ``version`` (latest)."""
    m = lance.dataset(join_uri(ns.root, "__manifest"), version=version)
    out = {}
    for r in m.to_table(filter="object_type = 'table'").to_pylist():
        if r["read_version"] is not None:
            out[r["object_id"]] = lance.dataset(join_uri(ns.root, r["location"]), version=r["read_version"])
    return out


def index_names(ds: lance.LanceDataset) -> set[str]:
    return {i.name for i in ds.describe_indices()}


def manifest_version(ns: PartitionedNamespace) -> int:
    return lance.dataset(join_uri(ns.root, "__manifest")).version


@pytest.fixture(scope="module")
def template(tmp_path_factory) -> str:
    root = str(tmp_path_factory.mktemp("indexes") / "ns")
    ns = PartitionedNamespace.create(root, SCHEMA, SPEC)
    ns.write(rows(4500))
    ns.write(rows(1500, start=4500))  # two fragments per table, 2000 rows each
    return root


@pytest.fixture
def ns(template, tmp_path) -> PartitionedNamespace:
    import shutil

    shutil.copytree(template, tmp_path / "ns")
    return PartitionedNamespace.open(str(tmp_path / "ns"))


def brute_knn(ds: lance.LanceDataset, q: np.ndarray, k: int) -> list[int]:
    t = ds.to_table(columns=["id", "vec"])
    v = t.column("vec").combine_chunks().flatten().to_numpy().reshape(-1, DIM)
    d = ((v - q) ** 2).sum(axis=1)
    return t.column("id").to_numpy()[np.argsort(d, kind="stable")[:k]].tolist()


def ann(ds: lance.LanceDataset, q: np.ndarray, k: int) -> list[int]:
    t = ds.to_table(columns=["id"], nearest={"column": "vec", "q": q, "k": k, "nprobes": 4, "refine_factor": 100})
    return t.column("id").to_pylist()


@pytest.mark.parametrize("index_type,column,params,check", [
    ("IVF_PQ", "vec", {"num_partitions": 4, "num_sub_vectors": 4}, "vector"),
    ("INVERTED", "txt", {}, "fts"),
    ("BTREE", "id", {}, "scalar"),
    ("BITMAP", "cat", {}, "bitmap"),
])
def test_create_index_every_table_one_commit(ns, index_type, column, params, check):
    """Issue 15 item 1: the index is built on every published partition table and all of them
    are published in ONE __manifest commit (the declaration is the commit before it). At the
    version before, no table has it; at the publish, all do; plain pylance uses it and answers
    like a brute-force scan."""
    before = manifest_version(ns)
    r = ns.create_index(column, index_type, min_rows=1000, **params)
    name = f"{column}_{index_type.lower()}"
    after = manifest_version(ns)
    assert r.manifest_version == after == before + 2  # declaration, then the one publish
    assert r.partitions_touched == 3
    assert not any(name in index_names(ds) for ds in published(ns, before + 1).values())
    tables = published(ns, after)
    assert len(tables) == 3 and all(name in index_names(ds) for ds in tables.values())
    assert [d.name for d in declared_indexes(ns)] == [name]
    q = np.random.default_rng(7).standard_normal(DIM).astype(np.float32)
    for ds in tables.values():
        assert index_state(ds, declared_indexes(ns)[0]) == "ok"
        if check == "vector":
            plan = ds.scanner(nearest={"column": "vec", "q": q, "k": 5}).explain_plan()
            assert "ANNSubIndex" in plan and f"name={name}" in plan
            assert ann(ds, q, 5) == brute_knn(ds, q, 5)
        elif check == "fts":
            got = ds.to_table(columns=["id"], full_text_query="cherry").column("id").to_pylist()
            all_rows = ds.to_table(columns=["id", "txt"]).to_pylist()
            assert sorted(got) == sorted(x["id"] for x in all_rows if "cherry" in x["txt"].split())
            assert "MatchQuery" in ds.scanner(full_text_query="cherry", columns=["id"]).explain_plan()
        else:
            f = "id = 77" if check == "scalar" else "cat = 'c3'"
            plan = ds.scanner(filter=f, columns=["id"]).explain_plan()
            assert "ScalarIndexQuery" in plan
            got = ds.to_table(columns=["id"], filter=f).column("id").to_pylist()
            every = ds.to_table(columns=["id", "cat"]).to_pylist()
            want = [x["id"] for x in every if (x["id"] == 77 if check == "scalar" else x["cat"] == "c3")]
            assert sorted(got) == sorted(want)
    # a rerun with the same definition is a no-op
    again = ns.create_index(column, index_type, min_rows=1000, **params)
    assert again.partitions_touched == 0 and manifest_version(ns) == after


def test_typed_errors_and_read_only(ns):
    """Issue 15 item 1: validation names the column and the types; a read-only handle refuses;
    a taken name with another definition needs replace=True. Nothing is declared by a refusal."""
    with pytest.raises(SchemaMismatchError, match="'nope'"):
        ns.create_index("nope", "BTREE")
    with pytest.raises(SchemaMismatchError, match=r"'txt' of type string: IVF_PQ needs fixed_size_list"):
        ns.create_index("txt", "IVF_PQ")
    with pytest.raises(SchemaMismatchError, match=r"'id' of type int64: INVERTED needs string"):
        ns.create_index("id", "INVERTED")
    with pytest.raises(InvalidArgumentError, match="index_type 'HASH'"):
        ns.create_index("id", "HASH")
    assert declared_indexes(ns) == []
    old = PartitionedNamespace.open(ns.root, version=manifest_version(ns))
    with pytest.raises(InvalidArgumentError, match="create_index: this handle reads"):
        old.create_index("id", "BTREE")
    with pytest.raises(InvalidArgumentError, match="drop_index: this handle reads"):
        old.drop_index("id_btree")
    ns.create_index("id", "BTREE", min_rows=0)
    with pytest.raises(InvalidArgumentError, match="declared already with another definition"):
        ns.create_index("id", "BITMAP", name="id_btree")
    r = ns.create_index("cat", "BTREE", name="id_btree", replace=True, min_rows=0)
    assert r.partitions_touched == 3
    for ds in published(ns).values():
        assert [i.field_names for i in ds.describe_indices() if i.name == "id_btree"] == [["cat"]]


def test_list_and_drop_index(ns):
    """Issue 15 item 1: list_indexes reports per-table coverage; min_rows leaves small tables
    unindexed; drop_index removes the declaration and the index from every table in one publish."""
    ns.write(rows(30, start=100_000, parts=("small",)))  # a fourth, small partition
    ns.create_index("id", "BTREE", min_rows=1000)
    [info] = ns.list_indexes()
    assert info["name"] == "id_btree" and info["tables"] == 4 and info["above_min_rows"] == 3
    assert info["indexed"] == 3 and info["missing"] == []
    before = manifest_version(ns)
    r = ns.drop_index("id_btree")
    assert manifest_version(ns) == before + 2 and r.partitions_touched == 3
    assert declared_indexes(ns) == [] and ns.list_indexes() == []
    assert not any("id_btree" in index_names(ds) for ds in published(ns).values())
    with pytest.raises(InvalidArgumentError, match="no index named 'id_btree'"):
        ns.drop_index("id_btree")


def assert_no_stale(ns: PartitionedNamespace, version: int | None = None) -> None:
    """No published index names a fragment its table version does not have (issue 15 item 2)."""
    for oid, ds in published(ns, version).items():
        live = {f.fragment_id for f in ds.get_fragments()}
        for i in ds.describe_indices():
            covered = {f for seg in i.segments for f in seg.fragment_ids}
            assert covered <= live, (oid, ds.version, i.name, covered - live)


def test_write_keeps_declared_index(ns):
    """Issue 15 item 2: an append's new fragments are added to the declared index
    (optimize_indices) before the publish; a new partition above min_rows is indexed by the write
    that creates it, a small one is not; ``index_on_write=False`` leaves the new fragments out."""
    ns.create_index("vec", "IVF_PQ", min_rows=1000, num_partitions=4, num_sub_vectors=4)
    ns.create_index("id", "BTREE", min_rows=1000)
    decls = declared_indexes(ns)
    ns.write(rows(3000, start=10_000, parts=("a", "b", "d")))  # appends to a and b, creates d (1000 rows)
    ns.write(rows(20, start=20_000, parts=("e",)))  # a new partition below min_rows
    tables = published(ns)
    small = [ds for ds in tables.values() if ds.count_rows() < 1000]
    assert len(tables) == 5 and len(small) == 1
    assert index_names(small[0]) == set()
    q = np.random.default_rng(3).standard_normal(DIM).astype(np.float32)
    for ds in tables.values():
        if ds.count_rows() >= 1000:
            assert [index_state(ds, d) for d in decls] == ["ok", "ok"], ds.uri
            assert ann(ds, q, 5) == brute_knn(ds, q, 5)
            assert ds.to_table(filter="id = 10003").num_rows == (1 if 10003 in ds.to_table(
                columns=["id"]).column("id").to_pylist() else 0)
    ns.write(rows(300, start=30_000, parts=("a",)), index_on_write=False)
    state = {ds.to_table(columns=["part"], limit=1).column("part")[0].as_py(): index_state(ds, decls[0])
             for ds in published(ns).values()}
    assert state == {"a": "partial", "b": "ok", "c": "ok", "d": "ok", "e": "missing"}


def test_merge_keeps_declared_index(ns):
    """Issue 15 item 2 for merge (issue 14 item 3): the tables a merge changes (deletions plus new
    fragments) and the partition it creates are published with their declared indexes up to
    date, as a write's are."""
    ns.create_index("vec", "IVF_PQ", min_rows=1000, num_partitions=4, num_sub_vectors=4)
    decls = declared_indexes(ns)
    changes = pa.concat_tables([rows(50, start=0, parts=("a",)), rows(1200, start=40_000, parts=("d",))])
    result = ns.merge(changes, on=["id"])
    assert result.details["rows_updated"] == 50 and result.details["rows_inserted"] == 1200
    q = np.random.default_rng(4).standard_normal(DIM).astype(np.float32)
    for ds in published(ns).values():
        assert index_state(ds, decls[0]) == "ok", ds.uri
        assert ann(ds, q, 5) == brute_knn(ds, q, 5)


def test_compaction_keeps_valid_index_through_cleanup(ns):
    """Issue 15 item 2: compaction rewrites fragments and the version it publishes carries an
    index covering exactly live fragments (never one naming the rewritten ones); tables it did
    not compact get their new fragments indexed by the same job; the index survives append +
    compaction + cleanup and still answers with the right rows."""
    ns.create_index("vec", "IVF_PQ", min_rows=1000, num_partitions=4, num_sub_vectors=4)
    ns.create_index("id", "BTREE", min_rows=1000)
    decls = declared_indexes(ns)
    for i in range(3):
        ns.write(rows(300, start=40_000 + 1000 * i), index_on_write=False)
    first = manifest_version(ns)
    r = ns.compact(min_small_fragments=2)
    assert r.partitions_touched == 3 and r.details["fragments_after"] < r.details["fragments_before"]
    for v in range(first + 1, manifest_version(ns) + 1):
        assert_no_stale(ns, v)
    tables = published(ns)
    for ds in tables.values():
        assert [index_state(ds, d) for d in decls] == ["ok", "ok"]
    ns.write(rows(600, start=50_000))  # append after the compaction: indexed by the write
    stats = ns.cleanup(timedelta(0), allow_short_retention=True)
    assert stats.versions_removed > 0
    q = np.random.default_rng(5).standard_normal(DIM).astype(np.float32)
    every = ns.to_table()
    assert every.num_rows == 6000 + 900 + 600
    for ds in published(ns).values():
        ds = lance.dataset(ds.uri, version=ds.version)  # reopened after the cleanup
        assert [index_state(ds, d) for d in decls] == ["ok", "ok"]
        assert "ANNSubIndex" in ds.scanner(nearest={"column": "vec", "q": q, "k": 5}).explain_plan()
        assert ann(ds, q, 5) == brute_knn(ds, q, 5)
        ids = ds.to_table(columns=["id"]).column("id").to_numpy()
        probe = int(ids[len(ids) // 2])
        assert ds.to_table(columns=["id"], filter=f"id = {probe}").column("id").to_pylist() == [probe]


def test_verify_index_missing_and_cli(ns, capsys):
    """Issue 15 item 2: ``verify`` reports a declared index absent from a table above the
    threshold (kind ``index_missing``, exit 3); ``lancepart index ROOT create|list|drop --json``."""
    assert main(["--json", "index", ns.root, "create", "id", "BTREE", "--min-rows", "1000"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["partitions_touched"] == 3 and out["details"]["index"]["name"] == "id_btree"
    assert main(["--json", "index", ns.root, "list"]) == 0
    [listed] = json.loads(capsys.readouterr().out)["indexes"]
    assert (listed["indexed"], listed["above_min_rows"], listed["missing"]) == (3, 3, [])
    assert ns.verify().ok
    # a table published without the index (a writer with index_on_write=False creates it)
    ns.write(rows(1500, start=60_000, parts=("z",)), index_on_write=False)
    report = ns.verify()
    assert [p.kind for p in report.problems] == ["index_missing"]
    assert "'id_btree'" in report.problems[0].message and "1500 rows" in report.problems[0].message
    assert main(["--json", "verify", ns.root]) == 3
    capsys.readouterr()
    assert main(["--json", "index", ns.root, "create", "id", "BTREE", "--min-rows", "1000"]) == 0  # finishes it
    assert json.loads(capsys.readouterr().out)["partitions_touched"] == 1
    assert ns.verify().ok
    assert main(["--json", "index", ns.root, "drop", "id_btree"]) == 0
    assert json.loads(capsys.readouterr().out)["partitions_touched"] == 4
    assert main(["--json", "index", ns.root, "drop"]) == 64  # usage: the name is missing


def test_concurrent_writer_during_index_build_loses_nothing(ns):
    """Issue 15 acceptance: a real writer process appends (to indexed tables and to new
    partitions) while the index is built; after both publish every row is there, read_version
    never moved backwards, and every table above the threshold carries the index (the writer
    kept it on the tables it touched, the build's rebase indexed what was published first)."""
    from tests.conftest import assert_read_versions_only_increase

    env = {**os.environ, "PYTHONPATH": str(HERE.parent)}
    v0 = manifest_version(ns)
    stop = Path(ns.root).parent / "stop"
    proc = subprocess.Popen([sys.executable, str(HERE / "index_writer_proc.py"), ns.root, "--start", "100000",
                             "--stop", str(stop)], stdout=subprocess.PIPE, text=True, env=env)
    assert proc.stdout.readline().strip() == "started"  # its first publish landed
    r = ns.create_index("vec", "IVF_PQ", min_rows=1000, num_partitions=4, num_sub_vectors=4)
    # let the writer publish once more after the build (on a loaded machine it may not have yet)
    deadline = time.monotonic() + 120
    while manifest_version(ns) <= r.manifest_version and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.05)
    stop.touch()
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0
    written = json.loads(out.strip().splitlines()[-1])
    ns.refresh()
    got = np.sort(ns.to_table(columns=["id"]).column("id").to_numpy())
    want = np.sort(np.concatenate([np.arange(6000), np.array(written)]))
    assert np.array_equal(got, want)
    assert_read_versions_only_increase(ns)
    # (the build may find every table indexed by the writer: its publishes keep the declared index too)
    # the writer's publishes span the build: some land before the build's publish, some after
    appends = [h.version for h in ns.history() if h.operation == "append" and h.version > v0]
    assert min(appends) < r.manifest_version < max(appends) or r.retries > 0, (r.manifest_version, appends)
    assert ns.verify().ok, ns.verify().problems
    q = np.random.default_rng(11).standard_normal(DIM).astype(np.float32)
    for ds in published(ns).values():
        if ds.count_rows() >= 1000:
            assert index_state(ds, declared_indexes(ns)[0]) == "ok"
            assert ann(ds, q, 5) == brute_knn(ds, q, 5)


def test_unpublished_fragments_never_published_by_index_build(ns):
    """docs/indexes.md: Lance commits an index build on a table's latest version; a version
    beyond read_version (a writer that died before publishing) must not leak into the version
    the build publishes."""
    first = next(iter(published(ns).values()))
    lance.write_dataset(rows(50, start=900_000, parts=("a",)).cast(first.schema), first.uri, mode="append")
    assert lance.dataset(first.uri).count_rows() == 2050
    ns.create_index("id", "BTREE", min_rows=1000)
    after = next(d for d in published(ns).values() if d.uri == first.uri)
    assert after.count_rows() == 2000 and "id_btree" in index_names(after)
    assert ns.to_table(filter="id >= 900000").num_rows == 0


def test_job_config_index_on_write():
    """Issue 15 item 2: ``index.on_write`` in a job config (default true), typed errors."""
    from lancepart.config import JobConfig
    from lancepart.errors import ConfigError

    base = {"namespace": {"root": "/tmp/x"}}
    assert JobConfig.from_dict(base).index_on_write is True
    assert JobConfig.from_dict({**base, "index": {"on_write": False}}).index_on_write is False
    with pytest.raises(ConfigError, match=r"index\.on_write must be true or false"):
        JobConfig.from_dict({**base, "index": {"on_write": "no"}})
    with pytest.raises(ConfigError, match="unknown key 'min_row'"):
        JobConfig.from_dict({**base, "index": {"min_row": 5}})


def test_spark_create_index_on_executors(ns, spark):
    """Issue 15 item 1: ``lps.create_index`` builds on the executors (tables spread over tasks)
    with the same single publish; a later write keeps the index (the publish ``lps.write`` shares);
    ``lps.drop_index`` removes it everywhere in one publish."""
    from lancepart import spark as lps

    before = manifest_version(ns)
    r = lps.create_index(spark, ns.root, "vec", "IVF_PQ", min_rows=1000, num_partitions=4, num_sub_vectors=4)
    assert r.details["spark_jobs"] == 1 and r.details["spark_tasks"] >= 1
    assert r.partitions_touched == 3 and manifest_version(ns) == before + 2
    decl = declared_indexes(ns.refresh())[0]
    assert all(index_state(ds, decl) == "ok" for ds in published(ns).values())
    ns.write(rows(3000, start=70_000, parts=("a", "b", "q")))  # q: a new partition of 1000 rows
    tables = published(ns)
    assert len(tables) == 4
    assert all(index_state(ds, decl) == "ok" for ds in tables.values())
    q = np.random.default_rng(13).standard_normal(DIM).astype(np.float32)
    for ds in tables.values():
        assert ann(ds, q, 5) == brute_knn(ds, q, 5)
    r = lps.drop_index(spark, ns.root, decl.name)
    assert r.partitions_touched == 4 and not any(index_names(ds) for ds in published(ns).values())


def test_index_that_cannot_be_built_never_fails_a_write(ns, caplog):
    """An index is never a reason to lose a write: a declaration Lance cannot build (here
    num_sub_vectors does not divide the dimension) is skipped by the write with a warning, the rows
    are published, and verify reports the table as ``index_missing``."""
    ns.create_index("vec", "IVF_PQ", min_rows=2500, num_partitions=2, num_sub_vectors=5)  # no table has 2500
    with caplog.at_level("WARNING", logger="lancepart.write"):
        r = ns.write(rows(900, start=80_000, parts=("a",)))
    assert r.rows_written == 900 and ns.to_table(filter="id >= 80000").num_rows == 900
    assert "declared indexes not updated" in caplog.text
    assert [p.kind for p in ns.verify().problems] == ["index_missing"]


def test_killed_build_publishes_nothing_and_a_rerun_finishes(ns):
    """kill -9 (os._exit) of create_index after the table builds, before its publish: readers
    see no index anywhere (the declaration is there; verify reports index_missing), no row
    changed; running create_index again publishes every table indexed in one commit."""
    code = ("import sys; from lancepart import PartitionedNamespace; "
            "PartitionedNamespace.open(sys.argv[1]).create_index('id', 'BTREE', min_rows=1000)")
    env = {**os.environ, "PYTHONPATH": str(HERE.parent), "LANCEPART_FAULT": "before_manifest_commit:exit"}
    before = ns.to_table().sort_by("id")
    proc = subprocess.run([sys.executable, "-c", code, ns.root], env=env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 77, proc.stderr
    assert not any(index_names(ds) for ds in published(ns).values())
    assert any(lance.dataset(ds.uri).version > ds.version for ds in published(ns).values())  # built, unpublished
    assert {p.kind for p in ns.verify().problems} == {"index_missing"}
    assert ns.refresh().to_table().sort_by("id").equals(before)
    v = manifest_version(ns)
    r = ns.create_index("id", "BTREE", min_rows=1000)
    assert r.partitions_touched == 3 and manifest_version(ns) == v + 1  # declared already: one publish
    assert ns.verify().ok and ns.to_table().sort_by("id").equals(before)


def test_write_after_delete_extends_index_compaction_rebuilds(ns):
    """Issue 15 item 2 on the ingest hot path: a delete that removed whole fragments leaves the
    index naming them (Lance skips them); a later write only extends that index (the trained
    segments stay, nothing is retrained), answers stay right; an overwrite (no live fragment
    indexed) rebuilds; the compaction job leaves no index naming a fragment that is gone."""
    ns.create_index("vec", "IVF_PQ", min_rows=1000, num_partitions=4, num_sub_vectors=4)
    decl = declared_indexes(ns)[0]
    ns.delete("id >= 4500")  # the second fragment of every table, entirely
    assert {index_state(ds, decl) for ds in published(ns).values()} == {"stale"}
    ns.write(rows(1500, start=90_000))
    q = np.random.default_rng(17).standard_normal(DIM).astype(np.float32)
    for ds in published(ns).values():
        live = {f.fragment_id for f in ds.get_fragments()}
        covered = {f for i in ds.describe_indices() for s in i.segments for f in s.fragment_ids}
        # extended by optimize_indices: every live fragment in it, the deleted one still named (not retrained)
        assert live <= covered and covered - live
        assert ann(ds, q, 5) == brute_knn(ds, q, 5)
    ns.write(rows(3000, start=95_000, parts=("a",)), mode="overwrite")
    a = next(ds for ds in published(ns).values() if ds.to_table(columns=["part"], limit=1)["part"][0].as_py() == "a")
    assert index_state(a, decl) == "ok" and a.count_rows() == 3000
    ns.compact(min_small_fragments=2)
    assert_no_stale(ns)
    for ds in published(ns).values():
        assert index_state(ds, decl) == "ok"
        assert ann(ds, q, 5) == brute_knn(ds, q, 5)


def test_pinned_table_is_left_alone_and_not_reported(ns):
    """A table pinned by read_tag is read at the tag (spec "Transaction / Read Behavior"): an index
    build leaves it alone, says so, and verify does not report it as index_missing."""
    import pyarrow.compute as pc

    pinned = ns.partitions()[0]
    lance.dataset(join_uri(ns.root, pinned.location)).tags.create("keep", pinned.read_version)

    def pin(snap):
        t = snap.rows
        i = t.schema.get_field_index("read_tag")
        hit = pc.equal(t.column("object_id"), pinned.object_id)
        return t.set_column(i, t.schema.field(i), pc.if_else(hit, pa.scalar("keep"), t.column(i))), None

    ns.manifest.update(pin)
    r = ns.create_index("id", "BTREE", min_rows=1000)
    assert r.partitions_touched == 2 and r.details["pinned_skipped"] == [pinned.object_id]
    assert ns.verify().ok, ns.verify().problems
