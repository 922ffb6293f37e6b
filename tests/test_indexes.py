"""Declared indexes (issue 15 items 1 and 2): ``ns.create_index`` stores the declaration as a root
property of ``__manifest`` (spec partitioning.md "Metadata Definition") and builds a real Lance
index on every published partition table, published in ONE ``__manifest`` commit; writes and
compactions keep it up to date; ``verify`` reports a declared index missing on a table above the
threshold. Real Lance tables on disk; the oracle queries plain pylance at each published
version and compares with a brute-force answer."""

from __future__ import annotations

from pathlib import Path

import lance
import numpy as np
import pyarrow as pa
import pytest

from lancepart import PartitionedNamespace
from lancepart.errors import InvalidArgumentError, SchemaMismatchError
from lancepart.index import declared_indexes, index_state
from lancepart.manifest import join_uri

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
