"""Pruned search across partitions (issue 15 item 3; spec/partitioning.md motivation: "vector
search ... only against a specific partition, but sometimes ... across all business units";
"Partition Pruning"; "Transaction / Read Behavior": each table at its published version).

Everything is real: Lance tables on disk, indexes built with pylance on the partition tables and
published through one ``__manifest`` commit, results checked against numpy brute force.
"""

from __future__ import annotations

import lance
import numpy as np
import pyarrow as pa
import pytest

from lancepart import PartitionedNamespace
from lancepart.errors import InvalidArgumentError
from lancepart.storage.manifest import join_uri
from tests.conftest import copy_ns

DIM = 16
TENANTS = [f"t{i}" for i in range(10)]
ROWS_PER_TENANT = 300
SPEC = {"id": 1, "fields": [{"field_id": "tenant", "source_ids": [1], "transform": {"type": "identity"},
                              "result_type": {"type": "utf8"}}]}
WORDS = np.array(["lance", "table", "vector", "spark", "arrow", "river", "mountain", "apple", "kiwi", "delta"])


def make_data(seed: int = 7) -> pa.Table:
    rng = np.random.default_rng(seed)
    n = len(TENANTS) * ROWS_PER_TENANT
    vec = rng.standard_normal((n, DIM)).astype(np.float32)
    words = WORDS[rng.integers(0, len(WORDS), size=(n, 3))]
    body = [" ".join(w) for w in words.tolist()]
    return pa.table({
        "id": pa.array(np.arange(n, dtype=np.int64)),
        "tenant": pa.array(np.repeat(TENANTS, ROWS_PER_TENANT)),
        "g": pa.array((np.arange(n) % 7).astype(np.int32)),
        "v": pa.FixedSizeListArray.from_arrays(pa.array(vec.ravel()), DIM),
        "body": pa.array(body),
    })


@pytest.fixture(scope="module")
def data() -> pa.Table:
    return make_data()


@pytest.fixture(scope="module")
def template(tmp_path_factory, data) -> str:
    root = str(tmp_path_factory.mktemp("search") / "ns")
    ns = PartitionedNamespace.create(root, data.schema, SPEC)
    ns.write(data.slice(0, 1500))
    ns.write(data.slice(1500))  # two fragments per table
    return root


@pytest.fixture
def ns(template, tmp_path):
    return copy_ns(template, tmp_path / "ns")


def vectors(t: pa.Table, column: str = "v") -> np.ndarray:
    col = t.column(column).combine_chunks()
    return col.flatten().to_numpy(zero_copy_only=False).reshape(len(col), -1)


def brute_force(data: pa.Table, q: np.ndarray, k: int, mask: np.ndarray | None = None,
                metric: str = "l2") -> tuple[np.ndarray, np.ndarray]:
    """ids and distances of the exact top k (Lance's definitions: squared l2, 1 - cosine, 1 - dot)."""
    v = vectors(data).astype(np.float64)
    q64 = q.astype(np.float64)
    if metric == "l2":
        d = ((v - q64) ** 2).sum(axis=1)
    elif metric == "cosine":
        d = 1 - (v @ q64) / np.linalg.norm(v, axis=1) / np.linalg.norm(q64)
    else:
        d = 1 - v @ q64
    ids = data.column("id").to_numpy()
    if mask is not None:
        d, ids = d[mask], ids[mask]
    order = np.argsort(d, kind="stable")[:k]
    return ids[order], d[order]


def publish_versions(ns: PartitionedNamespace, build) -> None:
    """Run ``build(ds)`` (e.g. create an index) on every published table and publish the new
    versions in one ``__manifest`` commit, as an index build does."""
    versions = {}
    for info in ns.partitions():
        ds = lance.dataset(join_uri(ns.root, info.location), version=info.read_version)
        if build(info, ds) is not False:
            versions[info.object_id] = lance.dataset(join_uri(ns.root, info.location)).version

    def mutate(snap):
        return snap.read_version_changes(versions), None

    ns.manifest.update(mutate, what="test index publish")
    ns.refresh()


def query(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(DIM).astype(np.float32)


FILTERS = {
    None: lambda d: None,
    "tenant = 't3'": lambda d: np.asarray(d.column("tenant").to_pylist()) == "t3",
    "g = 2": lambda d: d.column("g").to_numpy() == 2,
    "tenant IN ('t1', 't8') AND g < 3": lambda d: np.isin(d.column("tenant").to_pylist(), ["t1", "t8"])
    & (d.column("g").to_numpy() < 3),
    # Lance receives only an inclusive form of this one; DataFusion decides the rest
    "tenant = 't5' AND (id % 5 = 1 OR id > 2990)": lambda d: (np.asarray(d.column("tenant").to_pylist()) == "t5")
    & ((d.column("id").to_numpy() % 5 == 1) | (d.column("id").to_numpy() > 2990)),
}


@pytest.mark.parametrize("filter", list(FILTERS))
@pytest.mark.parametrize("metric", ["l2", "cosine", "dot"])
def test_flat_search_equals_brute_force(template, data, filter, metric):
    """No index anywhere: every table is searched flat, so the merged top k is exactly numpy's,
    with a partition filter, a non-partition filter and both (issue 15 item 3 acceptance)."""
    ns = PartitionedNamespace.open(template)
    for seed in range(3):
        q = query(seed)
        got = ns.search("v", q, k=10, filter=filter, metric=metric)
        ids, dist = brute_force(data, q, 10, FILTERS[filter](data), metric)
        assert got.column_names == [*data.column_names, "_distance"]
        assert got.column("id").to_pylist() == ids.tolist()
        np.testing.assert_allclose(got.column("_distance").to_numpy(), dist, rtol=1e-4, atol=1e-4)
        assert (np.diff(got.column("_distance").to_numpy()) >= 0).all()


def test_residual_filter_overfetches_until_k(template, data):
    """A filter Lance only sees an inclusive form of (the `%` term) must still give k rows: the
    table is searched again for more candidates until k rows pass the exact filter."""
    ns = PartitionedNamespace.open(template)
    q = query(11)
    f = "id % 50 = 3"
    got = ns.search("v", q, k=12, filter=f, columns=["id"])
    ids, _ = brute_force(data, q, 12, data.column("id").to_numpy() % 50 == 3)
    assert got.column("id").to_pylist() == ids.tolist()
    assert got.column_names == ["id", "_distance"]


def test_k_larger_than_rows_and_empty(template, data):
    ns = PartitionedNamespace.open(template)
    q = query(5)
    got = ns.search("v", q, k=1000, filter="tenant = 't2' AND g = 0")
    mask = (np.asarray(data.column("tenant").to_pylist()) == "t2") & (data.column("g").to_numpy() == 0)
    ids, _ = brute_force(data, q, 1000, mask)
    assert got.num_rows == mask.sum() < 1000
    assert got.column("id").to_pylist() == ids.tolist()
    # pruned to nothing, and nothing matching inside a kept table
    for f in ["tenant = 'nope'", "tenant = 't1' AND g > 100"]:
        empty = ns.search("v", q, k=5, filter=f)
        assert empty.num_rows == 0
        assert empty.column_names == [*data.column_names, "_distance"]


def test_search_reads_published_version_only(ns, data):
    """Rows a foreign writer appended to a table beyond its read_version are not searched."""
    info = ns.partitions("tenant = 't4'")[0]
    uri = join_uri(ns.root, info.location)
    q = query(3)
    intruder = data.filter(pa.compute.equal(data.column("tenant"), "t4")).slice(0, 1)
    intruder = intruder.set_column(3, "v", pa.FixedSizeListArray.from_arrays(pa.array(q), DIM))
    intruder = intruder.set_column(0, "id", pa.array([999_999], pa.int64()))
    lance.write_dataset(intruder, uri, mode="append")
    got = ns.search("v", q, k=3, filter="tenant = 't4'")
    assert 999_999 not in got.column("id").to_pylist()
    assert got.column("id").to_pylist() == brute_force(
        data, q, 3, np.asarray(data.column("tenant").to_pylist()) == "t4")[0].tolist()


def _ivf(info, ds):
    ds.create_index("v", "IVF_PQ", num_partitions=2, num_sub_vectors=4, metric="l2")


def test_indexed_recall(ns, data):
    """IVF_PQ index (small parameters, built by pylance on every table and published): recall@10
    against numpy brute force >= 0.9, with and without a filter."""
    publish_versions(ns, _ivf)
    assert all(lance.dataset(join_uri(ns.root, i.location), version=i.read_version).describe_indices()
               for i in ns.partitions())
    masks = {None: None, "tenant = 't6'": np.asarray(data.column("tenant").to_pylist()) == "t6",
             "g = 4": data.column("g").to_numpy() == 4}
    for filter, mask in masks.items():
        hits = 0
        for seed in range(20):
            q = query(100 + seed)
            got = ns.search("v", q, k=10, filter=filter, nprobes=2, refine_factor=5)
            ids, _ = brute_force(data, q, 10, mask)
            hits += len(set(got.column("id").to_pylist()) & set(ids.tolist()))
            assert (np.diff(got.column("_distance").to_numpy()) >= 0).all()
        assert hits / 200 >= 0.9, (filter, hits / 200)


def test_indexed_and_flat_tables_mixed(ns, data):
    """Half the tables indexed, half flat: results stay close to brute force and distances
    comparable (the index metric is used for the flat tables too)."""
    publish_versions(ns, lambda info, ds: _ivf(info, ds) if info.values["tenant"] in TENANTS[:5] else False)
    indexed = {i.values["tenant"]: bool(lance.dataset(join_uri(ns.root, i.location), version=i.read_version)
                                        .describe_indices()) for i in ns.partitions()}
    assert sum(indexed.values()) == 5
    hits = 0
    for seed in range(20):
        q = query(200 + seed)
        got = ns.search("v", q, k=10, nprobes=2, refine_factor=5)
        hits += len(set(got.column("id").to_pylist()) & set(brute_force(data, q, 10)[0].tolist()))
    assert hits / 200 >= 0.9
    # a flat table alone is exact
    q = query(9)
    got = ns.search("v", q, k=10, filter="tenant = 't8'")
    t8 = np.asarray(data.column("tenant").to_pylist()) == "t8"
    assert got.column("id").to_pylist() == brute_force(data, q, 10, t8)[0].tolist()


def test_conflicting_index_metrics_refused(ns):
    publish_versions(ns, lambda info, ds: ds.create_index(
        "v", "IVF_FLAT", num_partitions=2, metric="cosine" if info.values["tenant"] == "t0" else "l2"))
    with pytest.raises(InvalidArgumentError, match="different metrics"):
        ns.search("v", query(1), k=5)
    assert ns.search("v", query(1), k=5, metric="l2").num_rows == 5  # explicit metric: comparable


def test_schema_evolution_table_without_column(tmp_path):
    """A table written before the vector column existed holds no candidate rows (schema
    evolution); columns a table lacks read as NULL."""
    schema = pa.schema([("id", pa.int64()), ("tenant", pa.utf8()), ("v", pa.list_(pa.float32(), 4))])
    ns = PartitionedNamespace.create(str(tmp_path / "ns"), schema, SPEC)
    ns.write(pa.table({"id": [1, 2], "tenant": ["a", "b"],
                       "v": pa.array([[0, 0, 0, 1], [0, 0, 1, 0]], pa.list_(pa.float32(), 4))}))
    old = ns.partitions("tenant = 'a'")[0]
    # table 'a' rewritten by an older writer without the vector column, then published
    uri = join_uri(ns.root, old.location)
    lance.write_dataset(pa.table({"id": [3], "tenant": ["a"]}), uri, mode="overwrite")
    ns.manifest.update(lambda snap: (snap.read_version_changes({old.object_id: lance.dataset(uri).version}), None))
    ns.refresh()
    got = ns.search("v", [0, 0, 1, 0], k=5)
    assert got.column("id").to_pylist() == [2]


def test_typed_errors(template):
    ns = PartitionedNamespace.open(template)
    with pytest.raises(InvalidArgumentError, match="'nope'"):
        ns.search("nope", query(0))
    with pytest.raises(InvalidArgumentError, match=r"'body'.*fixed_size_list"):
        ns.search("body", query(0))
    with pytest.raises(InvalidArgumentError, match=r"dimension 16"):
        ns.search("v", np.zeros(3))
    with pytest.raises(InvalidArgumentError, match="k must be"):
        ns.search("v", query(0), k=0)
    with pytest.raises(InvalidArgumentError, match="metric 'manhattan'"):
        ns.search("v", query(0), metric="manhattan")
    with pytest.raises(InvalidArgumentError, match="unknown search parameters"):
        ns.search("v", query(0), nprobe=3)
    with pytest.raises(InvalidArgumentError, match="NaN"):
        ns.search("v", np.full(DIM, np.nan))
    with pytest.raises(InvalidArgumentError, match=r"columns \['zz'\]"):
        ns.search("v", query(0), columns=["zz"])


# ----------------------------------------------------------------------------- full text
def _inverted(info, ds):
    ds.create_scalar_index("body", "INVERTED")


def test_search_text_needs_index(ns):
    with pytest.raises(InvalidArgumentError, match="no INVERTED index on column 'body'") as e:
        ns.search_text("body", "kiwi", k=5)
    assert "v1$" in str(e.value)  # names the table
    with pytest.raises(InvalidArgumentError, match="string column"):
        ns.search_text("g", "kiwi")


@pytest.mark.parametrize("filter", [None, "tenant = 't3'", "g = 1 AND tenant IN ('t0', 't9')"])
def test_search_text_matches_expected_rows(ns, data, filter):
    """Full text on a small corpus: a word's matching rows are computed in the test; search_text
    returns exactly those (k above their count), scores descending."""
    publish_versions(ns, _inverted)
    mask = np.array(["mountain" in b.split() for b in data.column("body").to_pylist()])
    fmask = FILTERS[filter](data) if filter in FILTERS else (
        (data.column("g").to_numpy() == 1) & np.isin(data.column("tenant").to_pylist(), ["t0", "t9"]))
    if fmask is not None:
        mask &= fmask
    got = ns.search_text("body", "mountain", k=5000, filter=filter)
    assert sorted(got.column("id").to_pylist()) == data.column("id").to_numpy()[mask].tolist()
    assert (np.diff(got.column("_score").to_numpy()) <= 0).all()
    top = ns.search_text("body", "mountain", k=7, filter=filter, columns=["id"])
    assert top.column_names == ["id", "_score"] and top.num_rows == min(7, mask.sum())
    assert top.column("_score").to_pylist() == got.column("_score").to_pylist()[:top.num_rows]


# ----------------------------------------------------------------------------- Spark
def test_lps_search_equals_ns_search(spark, ns, data):
    """lps.search on local[2]: one result set per query row, each equal to ns.search for that
    query (rows, order, distances), with a filter and mixed indexed / flat tables."""
    from lancepart import spark as lps

    publish_versions(ns, lambda info, ds: _ivf(info, ds) if info.values["tenant"] in TENANTS[:3] else False)
    qs = {100 + i: query(300 + i) for i in range(4)}
    qdf = spark.createDataFrame([(qid, q.tolist()) for qid, q in qs.items()], "qid long, query array<float>")
    for filter in [None, "g IN (1, 2) AND tenant <> 't9'"]:
        got = lps.search(spark, ns.root, qdf, "v", k=7, filter=filter, id_column="qid", columns=["id", "tenant"],
                         nprobes=2).toArrow()
        assert got.column_names == ["qid", "rank", "id", "tenant", "_distance"]
        for qid, q in qs.items():
            mine = got.filter(pa.compute.equal(got.column("qid"), qid)).sort_by("rank")
            want = ns.search("v", q, k=7, filter=filter, columns=["id", "tenant"], nprobes=2)
            assert mine.column("rank").to_pylist() == list(range(1, 8))
            assert mine.column("id").to_pylist() == want.column("id").to_pylist()
            np.testing.assert_allclose(mine.column("_distance").to_numpy(), want.column("_distance").to_numpy(),
                                       rtol=1e-6)
    # no id column: query_id is added; a filter pruning everything gives no rows
    assert set(lps.search(spark, ns.root, qdf.select("query"), "v", k=2).columns) >= {"query_id", "rank"}
    assert lps.search(spark, ns.root, qdf, "v", k=2, filter="tenant = 'none'").count() == 0


def test_ties_ordered_by_partition_then_row(tmp_path):
    """Equal distances across partitions: the merge is deterministic, by the partition tables'
    __manifest order, then row id (the same snapshot always returns the same rows)."""
    schema = pa.schema([("id", pa.int64()), ("tenant", pa.utf8()), ("v", pa.list_(pa.float32(), 2))])
    ns = PartitionedNamespace.create(str(tmp_path / "ns"), schema, SPEC)
    n = 12
    ns.write(pa.table({"id": np.arange(n), "tenant": [f"t{i % 3}" for i in range(n)],
                       "v": pa.array([[1.0, 0.0]] * n, pa.list_(pa.float32(), 2))}))
    order = [i.values["tenant"] for i in ns.partitions()]
    got = ns.search("v", [0.0, 0.0], k=n)
    want = sorted(range(n), key=lambda i: (order.index(f"t{i % 3}"), i // 3))
    assert got.column("id").to_pylist() == want
    assert ns.search("v", [0.0, 0.0], k=5).column("id").to_pylist() == want[:5]


def test_a_handle_keeps_its_snapshot_and_sees_a_publish_after_refresh(ns, data):
    """A handle keeps partition tables open and scan plans cached between searches (warm index
    caches); both are keyed by the published version, so a handle searches its own snapshot and,
    after ``refresh()``, the new one: a row published meanwhile is found only then."""
    q = query(11)
    flt = "tenant = 't2'"
    before = ns.search("v", q, k=3, filter=flt)
    other = PartitionedNamespace.open(ns.root)
    twin = data.filter(pa.compute.equal(data.column("tenant"), "t2")).slice(0, 1)
    twin = twin.set_column(3, "v", pa.FixedSizeListArray.from_arrays(pa.array(q), DIM))
    twin = twin.set_column(0, "id", pa.array([888_888], pa.int64()))
    other.write(twin)  # an exact match for q, published by another handle
    assert ns.search("v", q, k=3, filter=flt).equals(before)  # the same snapshot, the same rows
    got = ns.refresh().search("v", q, k=3, filter=flt)
    assert got.column("id").to_pylist()[0] == 888_888
    assert ns.search("v", q, k=3).column("id").to_pylist()[0] == 888_888


# ----------------------------------------------------------------------------- command line
def test_search_on_the_command_line(ns, data, capsys):
    """``lancepart search ROOT --column C --query Q``: a vector (a JSON list) or, with
    ``--text``, a full-text query; one JSON line per row, ``--json`` one JSON array; the rows
    are exactly ``ns.search`` / ``ns.search_text``'s."""
    import json

    from lancepart.cli import main

    def run(*args: str) -> tuple[int, str, str]:
        capsys.readouterr()
        code = main(list(args))
        out, err = capsys.readouterr()
        return code, out, err

    q = query(3)
    flt = "tenant IN ('t1', 't8') AND g < 3"
    code, out, err = run("search", ns.root, "--column", "v", "--query", json.dumps(q.tolist()), "--k", "7",
                         "--filter", flt, "--columns", "id,tenant")
    assert code == 0, err
    rows = [json.loads(line) for line in out.splitlines()]
    want = ns.search("v", q, k=7, filter=flt, columns=["id", "tenant"])
    assert [r["id"] for r in rows] == want.column("id").to_pylist()
    assert [r["_distance"] for r in rows] == pytest.approx(want.column("_distance").to_pylist())
    assert set(rows[0]) == {"id", "tenant", "_distance"} and {r["tenant"] for r in rows} <= {"t1", "t8"}
    code, out, _ = run("--json", "search", ns.root, "--column", "v", "--query", json.dumps(q.tolist()),
                       "--metric", "cosine")
    doc = json.loads(out)
    assert code == 0 and len(doc) == 10  # --k defaults to 10, every column
    assert [r["id"] for r in doc] == ns.search("v", q, k=10, metric="cosine").column("id").to_pylist()
    assert len(doc[0]["v"]) == DIM

    code, _, err = run("search", ns.root, "--column", "body", "--query", "mountain", "--text")
    assert code == 2 and "InvalidArgumentError" in err and "INVERTED" in err  # no index yet: named, exit 2
    assert run("index", ns.root, "create", "body", "INVERTED", "--min-rows", "0", "-q")[0] == 0
    code, out, err = run("--json", "search", ns.root, "--column", "body", "--query", "mountain", "--text",
                         "--k", "5", "--filter", "tenant = 't3'", "--columns", "id,body")
    assert code == 0, err
    want = ns.refresh().search_text("body", "mountain", k=5, filter="tenant = 't3'", columns=["id", "body"])
    assert [r["id"] for r in json.loads(out)] == want.column("id").to_pylist()
    assert all("mountain" in r["body"].split() for r in json.loads(out))

    code, _, err = run("search", ns.root, "--column", "v", "--query", "mountain")
    assert code == 2 and "JSON list of numbers" in err and "--text" in err
    assert run("search", ns.root, "--column", "v")[0] == 64  # --query is required
