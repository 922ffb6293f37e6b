"""New partitions: each partition table is born with its data, in the write's one publish
(docs/design.md §8).

A partition that has no table when a write plans gets a directory this write names itself
(``<8 random hex>_<object_id>``; Spark: a hash of the job id and the object id). The write puts
the partition's fragments there, then creates the table with exactly those fragments as its
first version (:func:`create_table`: one Lance commit, no empty version before it) and
publishes it by adding the partition's namespace rows and its table row, ``read_version`` =
that version, to the same ``__manifest`` commit that moves ``read_version`` of every other
table the write touched (:class:`NewTables`, called from :func:`lancepart.write.publish.publish`).
Until that commit lands nothing refers to the directory: a write that dies leaves an
unreferenced directory, which no reader sees and cleanup removes once it is older than the
retention floor.

The publishing commit is computed on the latest ``__manifest`` each attempt. If a partition the
write created is found there by its values (a concurrent lancepart writer with the same object
id, a spec-following writer with a random one, or a row only declared), the row that is there
wins: the write moves its rows into that table (:func:`adopt`: read back, written as fragments
of the winner's table, committed on top of its published version like any append), removes its
own directory, and rebases. Exactly one table per partition, no row lost or doubled.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

import lance
import pyarrow as pa
from lance import LanceOperation
from lance.fragment import FragmentMetadata, LanceFragment

from lancepart.errors import LancepartError
from lancepart.evolution.file_format import fragments_data_storage_version, small_table_encoding
from lancepart.model import ids as _ids
from lancepart.model.spec import PartitionSpec
from lancepart.storage import lance_io
from lancepart.storage.manifest import Manifest, ManifestConflict, ManifestSnapshot, commit_lock, join_uri
from lancepart.util.parallel import map_threads
from lancepart.write.publish import TableChange
from lancepart.write.reserve import partition_rows, remove_table_dir, reserve_partitions, resolve_object_ids

log = logging.getLogger("lancepart.write")


def write_new_fragments(data: pa.Table, root: str, location: str, schema: pa.Schema, max_rows_per_file: int,
                        storage_options: Mapping[str, str] | None = None, *,
                        data_storage_version: str | None = None) -> list[FragmentMetadata]:
    """Fragments of ``data`` (at most ``max_rows_per_file`` rows each) in the directory of a
    table that does not exist yet (Lance's ``write_fragments`` would log a warning per call),
    in the file format version ``data_storage_version`` (the namespace's, which the caller read
    from its snapshot: :func:`lancepart.evolution.file_format.data_storage_version`; None: Lance's own)."""
    uri = join_uri(root, location)
    so = dict(storage_options) if storage_options else None
    step = max(1, max_rows_per_file)
    schema = small_table_encoding(schema, data.num_rows)
    data = data.cast(pa.schema(list(schema), metadata=data.schema.metadata))  # the encoding travels with the rows
    return [LanceFragment.create(uri, lance_io.unsliced(data.slice(start, step)), schema=schema, storage_options=so,
                                 data_storage_version=data_storage_version, session=lance_io.session())
            for start in range(0, data.num_rows, step)]


def create_table(root: str, location: str, schema: pa.Schema, fragments: Sequence[FragmentMetadata],
                 storage_options: Mapping[str, str] | None = None) -> int:
    """Create the partition table at ``location`` (a directory only this write uses) whose
    latest version holds exactly ``fragments``; return that version.

    On a local disk the table is born with its fragments (one commit, version 1). On an object
    store it is made in two commits on the process's Lance session: an empty table (in the file
    format version of ``fragments``), then the fragments on top. Lance's one-commit create from
    fragments takes a path, not a session, and builds an object-store client per table: on
    SeaweedFS 200 such creates took 1.8-2.0 s, the two commits 0.7 s. The empty first version
    is never published (the ``__manifest`` row names the second)."""
    uri = join_uri(root, location)
    so = dict(storage_options) if storage_options else None
    from lancepart.evolution.schema_evolution import table_schema

    target = table_schema(schema, sum(f.physical_rows or 0 for f in fragments))
    lock = commit_lock(uri, so)
    if "://" not in uri or uri.startswith("file://"):
        return lance.LanceDataset.commit(uri, LanceOperation.Overwrite(target, list(fragments)), storage_options=so,
                                         commit_lock=lock).version
    empty = lance_io.write_dataset(target.empty_table(), uri, mode="create", storage_options=so, commit_lock=lock,
                                   data_storage_version=fragments_data_storage_version(fragments))
    ds = lance.LanceDataset.commit(empty, LanceOperation.Overwrite(target, list(fragments)),
                                   read_version=empty.version, commit_lock=lock)
    return ds.version


def create_table_with(data: pa.Table, root: str, location: str, schema: pa.Schema, max_rows_per_file: int,
                      storage_options: Mapping[str, str] | None = None, *,
                      data_storage_version: str | None = None) -> tuple[list[FragmentMetadata], int]:
    """:func:`write_new_fragments` and :func:`create_table` in one Lance call, for a partition
    whose rows are all at hand: ``(its fragments, the version created)``."""
    uri = join_uri(root, location)
    so = dict(storage_options) if storage_options else None
    from lancepart.evolution.schema_evolution import table_schema

    target = table_schema(schema, data.num_rows)
    # Lance keeps the schema and field metadata of the data, not of ``schema=``: the field-id record
    # and the encoding must travel with the rows, or the table is read by the names of the oldest
    # schema and written compressed
    ds = lance_io.write_dataset(data.cast(target), uri, schema=target, mode="create",
                                max_rows_per_file=max_rows_per_file, storage_options=so,
                                commit_lock=commit_lock(uri, so), data_storage_version=data_storage_version)
    return [f.metadata for f in ds.get_fragments()], ds.version


def create_tables(root: str, schema: pa.Schema, writes: Sequence[TableChange],
                  storage_options: Mapping[str, str] | None = None) -> None:
    """Create the table of every new partition in ``writes`` (those with ``keys``) with its
    fragments, on the bounded thread pool; sets each one's ``created`` version."""
    new = [w for w in writes if w.keys is not None and w.created is None and w.fragments]
    versions = map_threads(lambda w: create_table(root, w.location, schema, w.fragments, storage_options), new)
    for w, v in zip(new, versions, strict=True):
        w.created = v


class NewTables:
    """Publishes the tables a write created with their data (:func:`create_tables`): the rows
    to add to the publishing ``__manifest`` commit, computed on each attempt's snapshot."""

    def __init__(self, manifest: Manifest, spec: PartitionSpec, schema: pa.Schema) -> None:
        self.manifest, self.spec, self.schema = manifest, spec, schema
        self.adopted = 0  # partitions whose rows moved into a table another writer published first

    def rows(self, snap: ManifestSnapshot, by_oid: dict[str, TableChange]) -> tuple[pa.Table | None, int]:
        """``(rows to append, tables added)`` for the new tables in ``by_oid`` under ``snap``.

        A partition that ``snap`` already has (by its values), or whose table ``snap`` names
        differently (a namespace of another writer above it), is adopted: its rows move into the
        table that stands (:func:`adopt`), ``by_oid`` is updated and :class:`ManifestConflict`
        makes the caller rebase. Nothing is published before that."""
        new = [w for w in by_oid.values() if w.created is not None]
        if not new:
            return None, 0
        keys = pa.concat_tables([w.keys for w in new])
        values = [c.combine_chunks() for c in keys.columns]
        ns_oids, table_oids = resolve_object_ids(snap, self.spec, values, _ids.partition_ids(self.spec.id, values))
        present = set(snap.lookup(table_oids).column("object_id").to_pylist())
        stale = [i for i, (w, oid) in enumerate(zip(new, table_oids, strict=True))
                 if oid in present or oid != w.object_id]
        if stale:
            adopt(self.manifest, self.spec, self.schema, [new[i] for i in stale], by_oid)
            self.adopted += len(stale)
            raise ManifestConflict(f"{len(stale)} partition(s) this write created exist in __manifest version "
                                   f"{snap.version}; their rows moved into the tables there; rebasing")
        made = {w.object_id: (w.location, w.created) for w in new}
        added = partition_rows(snap, self.spec, values, ns_oids, table_oids, range(len(new)), made)
        return added, len(new)


def adopt(manifest: Manifest, spec: PartitionSpec, schema: pa.Schema, writes: Sequence[TableChange],
          by_oid: dict[str, TableChange]) -> None:
    """Move the rows of the new tables ``writes`` into the tables their partitions have in the
    latest ``__manifest`` (reserved if needed: a declared table is created and pinned first), as
    fragments of those tables to commit like any append; remove the tables this write created
    (nothing refers to them). ``by_oid`` is updated: each write now targets the standing table."""
    keys = pa.concat_tables([w.keys for w in writes])
    res = reserve_partitions(manifest, spec, [c.combine_chunks() for c in keys.columns], schema)
    so = manifest.storage_options

    def move(item: tuple[TableChange, object]) -> list[FragmentMetadata]:
        w, ref = item
        from lancepart.write.upgrade import append_fragments

        ours = lance_io.open_table(join_uri(manifest.root, w.location), version=w.created, storage_options=so)
        rows = ours.to_table().select(schema.names).cast(schema)
        return append_fragments(manifest, ref.object_id, ref.location, rows, schema, published=ref.read_version)

    items = list(zip(writes, res.tables, strict=True))
    for (w, ref), frags in zip(items, map_threads(move, items), strict=True):
        remove_table_dir(manifest.root, w.location, so)  # never referenced: only our commit could have
        log.info("partition %s was published by another writer first; %d row(s) moved into its table %s",
                 ref.object_id, w.rows, ref.location)
        del by_oid[w.object_id]
        if ref.object_id in by_oid:  # cannot happen (one write per partition); never drop rows if it does
            raise LancepartError(f"two writes of this job target partition table {ref.object_id}; nothing published")
        by_oid[ref.object_id] = TableChange(ref.object_id, ref.location, frags, w.rows, overwrite=w.overwrite)
