"""Bringing partition tables up to the namespace schema (docs/schema-evolution.md): a table
written before a schema change is evolved with Lance schema evolution on top of its published
version and published through the one commit producer (:class:`lancepart.write.publish.CommitProducer`);
rows a writer appends to such a table are converted first (:func:`append_fragments`).

The schema change itself, and how an old table's columns are read, is
:mod:`lancepart.evolution.schema_evolution`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import Any

import lance
import pyarrow as pa
from lance import LanceOperation

from lancepart.errors import CommitConflictError, SchemaChangedError
from lancepart.evolution.file_format import COMPRESSION_KEY, grown_uncompressed, table_data_storage_version
from lancepart.evolution.schema_evolution import (
    MAX_FIELD_ID_KEY,
    SCHEMA_KEY,
    TABLE_FIELD_IDS_KEY,
    is_current,
    rows_as,
    table_field_ids,
    table_schema,
)
from lancepart.model.spec import field_id_of, schema_from_json
from lancepart.storage.lance_io import open_table, unsliced
from lancepart.storage.manifest import LanceCommitConflictError, Manifest, ManifestSnapshot, backoff

log = logging.getLogger("lancepart.schema")


def append_fragments(manifest: Manifest, object_id: str, location: str, rows: pa.Table, schema: pa.Schema, *,
                     published: int | None = None, max_rows_per_file: int = 1_048_576,
                     max_attempts: int = 5) -> list[Any]:
    """Rows of namespace schema ``schema`` written as fragments (not committed) into the existing
    partition table ``object_id``: the one way every writer (a write, a merge, replace-where,
    Spark tasks, the rows of a partition another writer created first) appends to a table.

    The fragments are written against the table version they will be committed on: ``published``
    (its ``read_version`` as the caller's snapshot has it), or the latest version when the caller
    does not know it (Spark tasks). A table in an older form of the namespace schema is brought up
    to date first (:func:`upgrade_table`, published at once), and when the namespace schema changed
    after the caller read it, the rows are converted to the newer one (:func:`rows_as`: every
    change keeps rows of an older form convertible). A concurrent schema change that lands between
    is met again on the next attempt; after ``max_attempts``, a :class:`SchemaChangedError`
    (retryable: nothing was committed).

    >>> p = ns.partitions()[0]
    >>> rows = pa.Table.from_pylist([{"id": 7, "event_date": p.values["event_date"]}], schema=ns.schema)
    >>> frags = append_fragments(ns.manifest, p.object_id, p.location, rows, ns.schema, published=p.read_version)
    >>> [f.physical_rows for f in frags]                    # written, not committed
    [1]
    """
    from lancepart.storage.manifest import join_uri

    so = dict(manifest.storage_options) if manifest.storage_options else None
    uri = join_uri(manifest.root, location)
    last: BaseException | None = None
    for attempt in range(max_attempts):
        ds = open_table(uri, version=published, storage_options=so, reuse=True)
        md: Mapping[str, str] = {}
        if TABLE_FIELD_IDS_KEY not in (ds.schema.metadata or {}):
            md = manifest.dataset().metadata
        target = schema
        if not is_current(ds.schema, md, schema):
            _, target, version = upgrade_table(manifest, object_id, location)
            ds = open_table(uri, version=version, storage_options=so)
        out = rows if target.equals(schema, check_metadata=True) else rows_as(rows, schema, target)
        try:
            # in the table's own file format version (never the namespace's: that is for new tables)
            file_version = table_data_storage_version(ds)
            return lance.fragment.write_fragments(unsliced(out), ds, max_rows_per_file=max_rows_per_file,
                                                  storage_options=so, data_storage_version=file_version)
        except (OSError, ValueError) as e:
            if not _schema_refused(e):
                raise
            last = e  # the table's schema moved under us (an upgrade published meanwhile): look again
            published = None
            backoff(attempt, 0.01, 0.5)
    raise SchemaChangedError(f"partition table {location}: its schema kept changing while rows were written into "
                              f"it ({max_attempts} attempts; last: {last}); nothing was committed: run it again")


def _schema_refused(e: BaseException) -> bool:
    """Whether Lance refused rows because their schema is not the table's."""
    text = str(e)
    return "different schema" in text or "schema mismatch" in text.lower()


def _evolve_on_published(uri: str, so: dict[str, str] | None, published: int,
                         evolve: Callable[[], int]) -> int | None:
    """``evolve()`` (commits that change the latest version of the table at ``uri`` but not its
    rows: a schema change, a field's encoding; the version made) run on top of version
    ``published`` (versions beyond it are nobody's published work: restored past first); the
    version made, or None when a concurrent commit got in the way (go round again)."""
    from lancepart.storage.manifest import is_commit_conflict
    from lancepart.storage.table_commit import DROPS_UNPUBLISHED, rows_held

    held = rows_held(open_table(uri, version=published, storage_options=so))
    try:
        latest = open_table(uri, storage_options=so)
        if latest.version != published:  # versions nobody published: start again from the published one
            lance.LanceDataset.commit(uri, LanceOperation.Restore(published), read_version=latest.version,
                                      storage_options=so, commit_message=DROPS_UNPUBLISHED)
        version = evolve()
    except (LanceCommitConflictError, OSError) as e:
        if isinstance(e, OSError) and not is_commit_conflict(e):
            raise
        return None
    if rows_held(open_table(uri, version=version, storage_options=so)) != held:
        return None  # a concurrent commit's fragments or deletions got in: redo from the published version
    return version


def _publish_upgrades(manifest: Manifest, made: Mapping[str, tuple[int, int]], schema_json: str, *,
                      max_retries: int, what: str = "upgrade table schema") -> set[str]:
    """ONE ``__manifest`` commit moving each table of ``made`` (object_id -> (published version
    it was upgraded from, version made)) whose ``read_version`` is still the one it was upgraded
    from, while the schema is still ``schema_json``; the object ids it moved."""
    from lancepart.write.publish import LeaveOut, TableChange, publish_changes

    def change(oid: str, upgraded_from: int, version: int) -> TableChange:
        def commit(published: int | None, location: str) -> int:
            if published != upgraded_from:  # a write published meanwhile: its own upgrade redoes it
                raise LeaveOut(f"read_version moved from {upgraded_from} to {published}")
            return version

        return TableChange(oid, commit=commit)

    changes = [change(oid, pub, v) for oid, (pub, v) in made.items()]
    published = publish_changes(manifest, lambda s: changes if s.metadata.get(SCHEMA_KEY) == schema_json else [],
                                what=what, unpublishable="leave_out", check_constraints=False,
                                max_retries=max_retries)
    return set(published.made)


def _on_main(manifest: Manifest, snap: ManifestSnapshot,
             tables: Sequence[tuple[str, str]]) -> list[tuple[str, str, int]]:
    """``(object_id, uri, published version)`` of each of ``tables`` (object_id, location) that
    ``snap`` publishes at a version of its main branch (tables pinned to a tag or a branch are
    the owner's, left as they are)."""
    from lancepart.storage.manifest import join_uri

    rows = {r["object_id"]: r for r in snap.lookup([o for o, _ in tables]).to_pylist()}
    out = []
    for oid, location in tables:
        row = rows.get(oid)
        if row is None or row["read_version"] is None or row["read_branch"] is not None or row["read_tag"] is not None:
            continue
        out.append((oid, join_uri(manifest.root, location), row["read_version"]))
    return out


def upgrade_tables(manifest: Manifest, tables: Sequence[tuple[str, str]], *, max_retries: int = 20
                   ) -> dict[str, int]:
    """Bring every table of ``tables`` (object_id, location) that is in an older form of the
    namespace schema up to date, each on its published version, and publish them all in ONE
    ``__manifest`` commit (a write calls it for the tables it is about to append to, so that
    they are not upgraded one commit each). A table another commit got in the way of is left
    as it is: :func:`append_fragments` upgrades it alone. Returns ``{object_id: version
    published}`` of the tables upgraded. Nothing is opened when the schema never changed."""
    from lancepart.util.parallel import map_threads

    if not tables:
        return {}
    snap = manifest.snapshot()
    md = snap.metadata
    if MAX_FIELD_ID_KEY not in md:
        return {}
    schema = schema_from_json(md[SCHEMA_KEY])
    so = dict(manifest.storage_options) if manifest.storage_options else None

    def prepare(item: tuple[str, str, int]) -> tuple[str, int, int] | None:
        oid, uri, published = item
        try:
            if is_current(open_table(uri, version=published, storage_options=so).schema, md, schema):
                return None
        except (OSError, ValueError):  # a table that cannot be opened: left out, its own upgrade names it
            return None
        version = _evolve_on_published(uri, so, published, partial(_evolve_table, uri, so, md, schema))
        return None if version is None else (oid, published, version)

    made = {oid: (pub, v) for oid, pub, v in filter(None, map_threads(prepare, _on_main(manifest, snap, tables)))}
    if not made:
        return {}
    moved = _publish_upgrades(manifest, made, md[SCHEMA_KEY], max_retries=max_retries)
    log.info("%d partition tables brought up to the namespace schema in one commit", len(moved))
    return {oid: made[oid][1] for oid in moved}


def reencode_grown_tables(manifest: Manifest, tables: Sequence[tuple[str, str]], *, max_retries: int = 20
                          ) -> tuple[dict[str, list[str]], dict[str, str]]:
    """Give back Lance's own string compression to every table of ``tables`` (object_id,
    location) that was created small and has grown (:func:`~lancepart.evolution.file_format.grown_uncompressed`):
    on top of its published version, one Lance commit removes ``compression=none`` from those
    fields (rows untouched), and ONE ``__manifest`` commit publishes all of them. The rows written
    into such a table from then on, and the files a compaction rewrites, are compressed as in a
    table created large. Returns ``({object_id: columns re-encoded}, {object_id: why its commit
    failed})``; a table that cannot be opened is left out without a word (the compaction that
    follows names it).

    Beside other writers: a table whose ``read_version`` moved meanwhile (a write published), or a
    schema change meanwhile, is left as it is and met again next time. The commit changes no
    rows, so when it is not published (a kill before the ``__manifest`` commit, or left out) the
    next lancepart commit on the table either restores past it or carries it, and reads are the
    same either way."""
    from lancepart.storage.error_mapping import table_failure
    from lancepart.util.parallel import map_threads

    if not tables:
        return {}, {}
    snap = manifest.snapshot()
    md = snap.metadata
    schema = schema_from_json(md[SCHEMA_KEY])
    so = dict(manifest.storage_options) if manifest.storage_options else None
    failures: dict[str, str] = {}

    def drop_compression(uri: str, columns: Sequence[str]) -> int:
        ds = open_table(uri, storage_options=so)
        ds.update_field_metadata({c: {COMPRESSION_KEY: None} for c in columns})
        return open_table(uri, storage_options=so).version

    def prepare(item: tuple[str, str, int]) -> tuple[str, int, int, list[str]] | None:
        oid, uri, published = item
        try:
            columns = grown_uncompressed(open_table(uri, version=published, storage_options=so, reuse=True), schema)
        except (OSError, ValueError):  # a table that cannot be opened: left out, the compaction's plan names it
            return None
        if not columns:
            return None
        try:
            version = _evolve_on_published(uri, so, published, partial(drop_compression, uri, columns))
        except (OSError, ValueError) as e:  # the commit failed: named, the others go on
            failures[oid] = table_failure(e, uri, oid)
            return None
        return None if version is None else (oid, published, version, columns)

    made = {oid: (pub, v, cols)
            for oid, pub, v, cols in filter(None, map_threads(prepare, _on_main(manifest, snap, tables)))}
    if not made:
        return {}, failures
    moved = _publish_upgrades(manifest, {o: (pub, v) for o, (pub, v, _) in made.items()}, md[SCHEMA_KEY],
                              max_retries=max_retries, what="re-encode grown tables")
    log.info("%d grown partition tables re-encoded with Lance's string compression in one commit", len(moved))
    return {oid: made[oid][2] for oid in sorted(moved)}, failures


def upgrade_table(manifest: Manifest, object_id: str, location: str, *,
                  max_retries: int = 20) -> tuple[int | None, pa.Schema, int | None]:
    """Bring the partition table ``object_id`` up to the newest namespace schema with Lance
    schema evolution (``drop_columns``, ``alter_columns`` for renames and casts, ``add_columns``
    all NULL, then the field-id record), on top of its *published* version, and publish the
    version made in one ``__manifest`` commit (same rows, new schema). Returns that version (None
    when the table was current already), the schema, and the published version of the table in
    that schema. A table whose ``read_version`` moved
    meanwhile (a concurrent write published) is redone on the new published version; a schema
    change meanwhile makes it bring the table to that one."""
    from lancepart.storage.manifest import join_uri

    so = dict(manifest.storage_options) if manifest.storage_options else None
    uri = join_uri(manifest.root, location)
    for attempt in range(max_retries + 1):
        snap = manifest.snapshot()
        row = snap.row(object_id)
        if row is None:
            raise CommitConflictError(f"partition table {object_id} was removed from __manifest while its schema "
                                      f"was being brought up to date")
        published = row["read_version"]
        md = snap.metadata
        schema = schema_from_json(md[SCHEMA_KEY])
        if is_current(open_table(uri, version=published, storage_options=so).schema, md, schema):
            return None, schema, published
        version = _evolve_on_published(uri, so, published, partial(_evolve_table, uri, so, md, schema))
        if version is not None and _publish_upgrades(manifest, {object_id: (published, version)}, md[SCHEMA_KEY],
                                                     max_retries=max_retries):
            log.info("partition table %s brought up to the namespace schema (version %d)", object_id, version)
            return version, schema, version
        backoff(attempt, 0.01, 1.0)
    raise CommitConflictError(f"bringing partition table {object_id} up to the namespace schema: {max_retries + 1} "
                              f"attempts conflicted with concurrent commits")


def _evolve_table(uri: str, so: dict[str, str] | None, namespace_md: Mapping[str, str], schema: pa.Schema) -> int:
    """The Lance schema evolution commits that make the latest version of the table at ``uri``
    match ``schema``; the version made."""
    ds = open_table(uri, storage_options=so)
    ids = table_field_ids(ds.schema, namespace_md, schema)
    by_id = {fid: n for n, fid in ids.items()}
    wanted = {field_id_of(f): f for f in schema}
    gone = [n for n in ds.schema.names if ids.get(n) not in wanted]
    if gone:
        ds.drop_columns(gone)
        ds = open_table(uri, storage_options=so)
    alters = []
    for fid, f in wanted.items():
        name = by_id.get(fid)
        if name is None:
            continue
        alt: dict[str, Any] = {"path": name}
        if name != f.name:
            alt["name"] = f.name
        if ds.schema.field(name).type != f.type:
            alt["data_type"] = f.type
        if len(alt) > 1:
            alters.append(alt)
    if alters:
        # a rename to a name a dropped column had is fine: drops went first
        ds.alter_columns(*alters)
        ds = open_table(uri, storage_options=so)
    missing = [f.with_metadata(None) for fid, f in wanted.items() if fid not in by_id]
    if missing:
        ds.add_columns(missing)
        ds = open_table(uri, storage_options=so)
    md = dict(ds.schema.metadata or {})
    md[TABLE_FIELD_IDS_KEY] = table_schema(schema).metadata[TABLE_FIELD_IDS_KEY]
    ds.update_schema_metadata({k.decode() if isinstance(k, bytes) else k: v.decode() if isinstance(v, bytes) else v
                               for k, v in md.items()}, replace=True)
    ds = open_table(uri, storage_options=so)
    if ds.schema.names != schema.names:  # column order: Lance appends added columns
        log.debug("table %s column order %s differs from the namespace schema's %s", uri, ds.schema.names,
                  schema.names)
    return ds.version
