"""Exactly-once batch ids for every Unicode id (issue item 1) and their bookkeeping: exact and
cheap lookups, explicit time-based retention, clean namespace properties (issue item 2).

Spec "Transaction": a write is published by ONE ``__manifest`` commit; the batch id travels in
that commit's Lance transaction properties (docs/exactly-once.md). What is published is always
checked with plain pylance: every table row of the latest ``__manifest`` at its
``read_version``.
"""

from __future__ import annotations

import inspect
import json
import logging
import os
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import lance
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from lancepart import PartitionedNamespace
from lancepart.errors import InvalidArgumentError
from lancepart.maintenance.cleanup import cleanup as cleanup_fn
from lancepart.util.sample import demo_events
from lancepart.write import batches

REPO = Path(__file__).resolve().parents[1]
WRITER = Path(__file__).with_name("writer_proc.py")

UNICODE_IDS = [
    "ventes-été-2025-12-01",
    "批次-7",
    "🚀",
    'quote"inside',
    "back\\slash",
    "new\nline",
    "tab\there",
    "ctrl\x00\x01\x1f\x7f-chars",
    'all: é 批 🚀 " \\ \n \t \x00 \u200b \ufeff',
]


def published_rows(root: str) -> int:
    """Rows published at the latest ``__manifest`` version, with plain pylance only."""
    rows = lance.dataset(f"{root}/__manifest").to_table(columns=["object_type", "location", "read_version"])
    rows = rows.filter(pc.equal(rows.column("object_type"), "table")).to_pylist()
    return sum(lance.dataset(f"{root}/{r['location']}", version=r["read_version"]).count_rows() for r in rows)


def short_cleanup(root: str, older_than: timedelta = timedelta(0)):
    """cleanup with a retention below any floor, however the cleanup API allows it today."""
    extra = {"allow_short_retention": True} if "allow_short_retention" in inspect.signature(cleanup_fn).parameters \
        else {}
    return cleanup_fn(root, older_than, **extra)


@pytest.mark.parametrize("batch_id", UNICODE_IDS)
def test_rerun_of_any_unicode_batch_id_is_skipped(ns, batch_id):
    """Issue item 1; spec "Transaction": a rerun of a published batch id publishes nothing,
    whatever characters the id holds (non-ASCII, quotes, backslash, newline, tab, control
    characters, emoji)."""
    data = demo_events(200, seed=3)
    first = ns.write(data, batch_id=batch_id)
    assert not first.skipped and published_rows(ns.root) == 200
    again = ns.write(data, batch_id=batch_id)
    assert again.skipped and again.rows_written == 0
    assert again.details["batch_id_published_in"] == first.manifest_version
    assert published_rows(ns.root) == 200
    # the record is the publishing commit's transaction, exactly as given
    tx = lance.dataset(f"{ns.root}/__manifest").read_transaction(first.manifest_version)
    assert tx.transaction_properties[batches.BATCH_ID_PROPERTY] == batch_id


def test_ids_differing_only_by_escaping_are_distinct(ns):
    """Issue item 1: an id and the JSON-escaped spelling of it are two ids; each publishes once."""
    pairs = [('a"b', 'a\\"b'), ("é", "\\u00e9"), ("x\ny", "x\\ny"), ("批", "\\u6279")]
    total = 0
    for plain, escaped in pairs:
        for bid in (plain, escaped):
            r = ns.write(demo_events(10, seed=total, start_id=total), batch_id=bid)
            assert not r.skipped, bid
            total += 10
    assert published_rows(ns.root) == total
    for plain, escaped in pairs:
        assert ns.write(demo_events(10), batch_id=plain).skipped
        assert ns.write(demo_events(10), batch_id=escaped).skipped
    assert published_rows(ns.root) == total


@pytest.mark.parametrize(("bad", "rule"), [
    ("", "must not be empty"),
    (123, "must be a str"),
    ("lone-\ud800-surrogate", "encodable as UTF-8"),
    ("x" * (batches.MAX_BATCH_ID_BYTES + 1), f"at most {batches.MAX_BATCH_ID_BYTES} bytes"),
])
def test_unusable_batch_ids_are_refused_up_front(ns, bad, rule):
    """Issue item 1: an id that cannot be stored exactly is refused before anything is written,
    with a typed error naming the rule."""
    version = ns.manifest_version
    with pytest.raises(InvalidArgumentError, match=rule):
        ns.write(demo_events(10), batch_id=bad)
    assert ns.refresh().manifest_version == version and published_rows(ns.root) == 0


def test_batch_ids_are_not_namespace_properties(ns):
    """Issue item 2: batch ids are bookkeeping, not spec-visible properties: DescribeNamespace
    of ``v1`` shows the partition spec only, and no ``__manifest`` row carries them."""
    for i, bid in enumerate(["b-1", "批次-2", "🚀"]):
        ns.write(demo_events(10, seed=i, start_id=10 * i), batch_id=bid)
    assert ns.describe_namespace(["v1"]) == {"partition_spec": ns.current_spec.to_json_string()}
    assert not any(k.startswith("lancepart.batch") for k in ns.describe_namespace([]))
    md = lance.dataset(f"{ns.root}/__manifest").to_table(columns=["metadata"]).column("metadata").to_pylist()
    assert not any("lancepart.batch" in (m or "") for m in md)
    # a directory namespace listing does not take the index for a table
    import lance.namespace as lns

    d = lns.DirectoryNamespace(root=ns.root)
    assert batches.INDEX_DIR not in d.list_tables(lns.ListTablesRequest(id=[])).tables
    assert os.path.isdir(os.path.join(ns.root, batches.INDEX_DIR))


def _record_legacy(ns: PartitionedNamespace, batch_id: str) -> int:
    """Record ``batch_id`` the way lancepart did before the index (``lancepart.batch.<id>`` in the
    ``v1`` row, JSON with ASCII escapes), in a ``__manifest`` commit of its own."""
    def mutate(snap):
        i = snap.row_index()["v1"]
        md = snap.rows.column("metadata").to_pylist()
        props = json.loads(md[i] or "{}")
        props[batches.LEGACY_PREFIX + batch_id] = json.dumps({"manifest_version": snap.version + 1,
                                                              "committed_at": time.time()})
        md[i] = json.dumps(props, separators=(",", ":"), sort_keys=True)
        j = snap.rows.schema.get_field_index("metadata")
        return snap.rows.set_column(j, snap.rows.schema.field(j), pa.array(md, pa.utf8())), None

    snap, _, _ = ns.manifest.update(mutate)
    return snap.version


def test_legacy_recorded_batch_id_is_still_skipped(ns):
    """Issue item 2: an id recorded the old way (a ``v1`` row property) is still recognised,
    exactly, by the in-process and the publish checks; new writes add no such property."""
    ns.write(demo_events(50), batch_id="before-upgrade")
    version = _record_legacy(ns, "ventes-été \"legacy\"")
    _record_legacy(ns, "plain-legacy")
    ns.refresh()
    r = ns.write(demo_events(50, seed=1, start_id=50), batch_id="ventes-été \"legacy\"")
    assert r.skipped and r.details["batch_id_published_in"] == version
    assert ns.write(demo_events(5, seed=2, start_id=500), batch_id="plain-legacy").skipped
    assert not ns.write(demo_events(5, seed=3, start_id=600), batch_id="ventes-été").skipped  # a prefix, not the id
    assert published_rows(ns.root) == 55
    assert ns.describe_namespace(["v1"]) == {"partition_spec": ns.current_spec.to_json_string()}
    row = lance.dataset(f"{ns.root}/__manifest").to_table(filter=pc.field("object_id") == "v1").to_pylist()[0]
    assert set(json.loads(row["metadata"])) == {batches.LEGACY_PREFIX + "ventes-été \"legacy\"",
                                                batches.LEGACY_PREFIX + "plain-legacy"}


def _writer(root: str, batch_id: str, *, start_at: float = 0.0, fault: str | None = None,
            rows: int = 300) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONUTF8": "1"}
    env.pop("LANCEPART_FAULT", None)
    if fault:
        env["LANCEPART_FAULT"] = fault
    return subprocess.Popen([sys.executable, str(WRITER), root, "--rows", str(rows), "--batch-id", batch_id,
                             "--start-at", str(start_at)], env=env, cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, encoding="utf-8")


def test_concurrent_processes_with_one_non_ascii_id_publish_once(ns):
    """Issue item 1; spec "Transaction": four real writer processes submit the same non-ASCII
    batch id at the same moment. Their ``__manifest`` commits conflict; each loser rebases,
    finds the winner's id in the version it lost to, and publishes nothing: exactly one
    publishes, and the rows are there once."""
    batch_id = "批次-été-🚀 \"x\"\n"
    start = time.time() + 3.0
    procs = [_writer(ns.root, batch_id, start_at=start) for _ in range(4)]
    results = []
    for p in procs:
        out, err = p.communicate(timeout=180)
        assert p.returncode == 0, err[-3000:]
        results.append(json.loads(out.strip().splitlines()[-1]))
    assert sorted(r["skipped"] for r in results) == [False, True, True, True], results
    assert published_rows(ns.root) == 300
    assert ns.write(demo_events(300), batch_id=batch_id).skipped


def test_index_catches_up_after_a_crash_between_publish_and_index(ns):
    """Issue item 2: a writer killed right after its ``__manifest`` commit (fault point
    ``after_manifest_commit``, ``os._exit``) never appended its id to the index. The id is
    still found (from the transaction of its commit), a rerun publishes nothing, and the next
    publish brings the index up to date."""
    ns.write(demo_events(20, seed=9, start_id=10_000), batch_id="earlier")
    p = _writer(ns.root, "crash-été", fault="after_manifest_commit:exit")
    _, err = p.communicate(timeout=180)
    assert p.returncode == 77, err[-3000:]
    assert published_rows(ns.root) == 320
    index = lance.dataset(f"{ns.root}/{batches.INDEX_DIR}")
    assert "crash-été" not in index.to_table().column("batch_id").to_pylist()
    assert int(index.metadata[batches.WATERMARK_KEY]) < ns.refresh().manifest_version
    again = ns.write(demo_events(300), batch_id="crash-été")
    assert again.skipped and published_rows(ns.root) == 320
    ns.write(demo_events(5, seed=1, start_id=20_000), batch_id="next")
    index = lance.dataset(f"{ns.root}/{batches.INDEX_DIR}")
    assert int(index.metadata[batches.WATERMARK_KEY]) == ns.refresh().manifest_version
    assert index.to_table(filter=pc.field("batch_id") == "crash-été").num_rows >= 1


def test_short_cleanup_does_not_forget_ids_younger_than_the_batch_retention(ns):
    """Issue item 2: cleanup with a retention of 0 removes every superseded ``__manifest``
    version, and with it the transaction that carried the id; the id was indexed first, so a
    rerun is still skipped."""
    ns.write(demo_events(100), batch_id="ventes-été-2025-12-01")
    for i in range(3):
        ns.write(demo_events(10, seed=i, start_id=1_000 + 10 * i))
    first_version = 2
    stats = short_cleanup(ns.root)
    assert stats.manifest_versions_removed > 0
    mds = lance.dataset(f"{ns.root}/__manifest")
    assert min(v["version"] for v in mds.versions()) > first_version + 1  # the publishing version is gone
    again = ns.write(demo_events(100), batch_id="ventes-été-2025-12-01")
    assert again.skipped and published_rows(ns.root) == 130
    assert again.details["batch_id_retention_s"] == int(batches.DEFAULT_RETENTION.total_seconds())


def test_ids_older_than_the_retention_still_skip_with_a_warning_until_cleanup_forgets_them(ns, caplog):
    """Issue item 2: retention is explicit (root property ``lancepart.batch_id_retention``). An
    id found but older than it still skips, with a warning and ``details`` saying so; cleanup
    then removes it from the index, and a rerun after that publishes again (documented)."""
    ns.write(demo_events(40), batch_id="old-batch")
    batches.set_batch_id_retention(ns.manifest, timedelta(seconds=1))
    assert ns.refresh().describe_namespace([])[batches.RETENTION_PROPERTY] == "1"
    time.sleep(1.5)
    with caplog.at_level(logging.WARNING, logger="lancepart.write"):
        r = ns.write(demo_events(40), batch_id="old-batch")
    assert r.skipped and r.details["batch_id_older_than_retention"] is True
    assert r.details["batch_id_retention_s"] == 1
    assert "longer ago than the batch id retention" in caplog.text
    ns.write(demo_events(5, seed=5, start_id=5_000), batch_id="young-batch")
    assert batches.prepare_for_cleanup(ns.manifest) == 1  # old-batch goes, young-batch (just written) stays
    assert ns.write(demo_events(5, seed=5, start_id=5_000), batch_id="young-batch").skipped
    rerun = ns.write(demo_events(40), batch_id="old-batch")
    assert not rerun.skipped and published_rows(ns.root) == 85


def test_lookup_is_exact_among_many_indexed_ids(ns):
    """Issue item 2: with 20 000 ids in the index (filled directly), lookups are exact: the id,
    not a prefix, a suffix or an escaped spelling of it."""
    ns.write(demo_events(10), batch_id="seed")
    n = 20_000
    now = datetime.now(UTC)
    ids = [f"job:été:{i}:end" for i in range(n)]
    rows = pa.table({"batch_id": pa.array(ids), "manifest_version": pa.array([1] * n, pa.uint64()),
                     "committed_at": pa.array([now] * n, pa.timestamp("us", tz="UTC")),
                     "undone": pa.nulls(n, pa.bool_())}, schema=batches.INDEX_SCHEMA)
    lance.write_dataset(rows, f"{ns.root}/{batches.INDEX_DIR}", mode="append")
    snap = ns.manifest.snapshot()
    assert batches.find_batch(ns.manifest, "job:été:12345:end", snap).manifest_version == 1
    for miss in ("job:été:12345", "job:été:12345:en", "job:été:12345:end ", "job:\\u00e9t\\u00e9:12345:end",
                 "job:ete:12345:end", "JOB:été:12345:end"):
        assert batches.find_batch(ns.manifest, miss, snap) is None, miss


def test_first_batch_id_after_a_cleanup_without_index(ns):
    """Issue item 2: a namespace that never used batch ids gets no index from cleanup, and its
    first lookup starts at the oldest ``__manifest`` version cleanup left (older transactions are
    gone and cannot hold ids)."""
    for i in range(3):
        ns.write(demo_events(10, seed=i, start_id=10 * i))
    short_cleanup(ns.root)
    assert not os.path.exists(os.path.join(ns.root, batches.INDEX_DIR))
    assert not ns.write(demo_events(10, seed=7, start_id=100), batch_id="première").skipped
    assert ns.write(demo_events(10, seed=7, start_id=100), batch_id="première").skipped
    assert published_rows(ns.root) == 40


def test_index_watermark_moves_beside_concurrent_indexers(ns):
    """Issue item 2, found by the maintenance race: every publish moves the index watermark, so a
    cleanup's catch-up (``prepare_for_cleanup``) and writers' catch-ups commit metadata at the
    same moment; Lance refuses the later of two such commits. The catch-up retries instead of
    failing the cleanup. Four threads catch up while a writer publishes under batch ids."""
    import threading

    ns.write(demo_events(5, seed=1, start_id=0), batch_id="seed-é")
    stop = threading.Event()
    errors: list[BaseException] = []

    def catch_up() -> None:
        while not stop.is_set():
            try:
                batches.index_batches(ns.manifest)
            except BaseException as e:
                errors.append(e)
                return

    threads = [threading.Thread(target=catch_up) for _ in range(4)]
    for t in threads:
        t.start()
    try:
        for i in range(25):
            ns.write(demo_events(5, seed=i, start_id=10 * (i + 1)), batch_id=f"lot-{i}-é")
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert not errors, errors[0]
    assert batches.index_batches(ns.manifest) == ns.manifest.dataset().version
    assert all(batches.find_batch(ns.manifest, f"lot-{i}-é", ns.manifest.snapshot()) for i in range(25))
