"""The Lance file format version of partition tables (docs/file-format.md).

Every partition table is a Lance table, and a Lance table writes all its data files in one
file format version, fixed when the table is created (Lance file format spec, versions). A
namespace chooses the version of the tables it creates from now on with the ``__manifest``
table metadata key :data:`DATA_STORAGE_VERSION_KEY` (``lancepart.data_storage_version``);
without it, :data:`DEFAULT_DATA_STORAGE_VERSION`. The property only ever applies to NEW
partition tables: rows appended to a table (a write, a merge, a compaction's rewrite, a schema
change's new columns) are written in that table's own version, read from its data files. A
namespace whose property changed therefore holds tables of several versions, which every
reader handles (each table is read on its own).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping

import lance
import pyarrow as pa
from lance.fragment import FragmentMetadata

from lancepart.errors import ConfigError, InvalidArgumentError

# __manifest table metadata key: the Lance file format version of the partition tables this
# namespace creates from now on ("2.0", "2.1" or "2.2")
DATA_STORAGE_VERSION_KEY = "lancepart.data_storage_version"
# What new partition tables get without the property: 2.2 (pylance 14's own default, named
# so that a newer pylance does not change it under a namespace). 2.0 writes 1 000 small tables
# about 3.5 times faster (benchmarks/file_format.py) but cannot store a NULL struct value,
# which a namespace of any schema may have to take (a nullable struct column, or one added
# later by a schema change); a namespace that has no struct column and values write speed
# over size sets the property to 2.0 (docs/file-format.md).
DEFAULT_DATA_STORAGE_VERSION = "2.2"
# explicit stable versions only: "stable" / "next" move with pylance, "2.3" and above are
# unstable development formats, and "legacy" (0.x) is deprecated by Lance
DATA_STORAGE_VERSIONS = ("2.0", "2.1", "2.2")

# The string encoding of small tables. Lance 2.1 / 2.2 choose and apply a compression per page
# (FSST, then a general-purpose compressor in 2.2); on the pages of a small table that fixed work
# is most of the write (a string column of a 1 000-row table writes about 4 times slower than
# uncompressed). A Lance table encodes every later append, and the files a compaction rewrites,
# as its own field metadata says, so the choice is made when a table is created: a partition
# table created with fewer rows than SMALL_TABLE_ROWS stores its string and binary columns
# without compression (``lance-encoding:compression=none`` on the field), one created larger
# keeps Lance's choice. Measured on 1 M rows into 1 000 tables (docs/file-format.md): the write
# 1.9 times faster, the strings about a third larger, full scans as fast.
SMALL_TABLE_ROWS = 100_000
COMPRESSION_KEY = "lance-encoding:compression"


def _textual(t: pa.DataType) -> bool:
    return (pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t)
            or pa.types.is_large_binary(t) or pa.types.is_string_view(t) or pa.types.is_binary_view(t))


def small_table_encoding(schema: pa.Schema, rows: int) -> pa.Schema:
    """``schema`` for a new partition table created with ``rows`` rows: fewer than
    :data:`SMALL_TABLE_ROWS`, its top-level string and binary columns stored uncompressed; a
    compression a field already names is kept.

    >>> s = small_table_encoding(pa.schema([("id", pa.int64()), ("s", pa.utf8())]), 1_000)
    >>> s.field("s").metadata, s.field("id").metadata
    ({b'lance-encoding:compression': b'none'}, None)
    >>> small_table_encoding(pa.schema([("s", pa.utf8())]), 1_000_000).field("s").metadata is None
    True
    """
    if rows >= SMALL_TABLE_ROWS:
        return schema
    fields = []
    for f in schema:
        md = dict(f.metadata or {})
        if _textual(f.type) and COMPRESSION_KEY.encode() not in md:
            f = f.with_metadata({**md, COMPRESSION_KEY.encode(): b"none"})
        fields.append(f)
    return pa.schema(fields, metadata=schema.metadata)


def grown_uncompressed(ds: lance.LanceDataset, schema: pa.Schema) -> list[str]:
    """The columns of partition table ``ds`` (a version of it) that :func:`small_table_encoding`
    left uncompressed when the table was created small, now that it holds :data:`SMALL_TABLE_ROWS`
    live rows or more: top-level string and binary columns whose table field says
    ``compression=none`` while the namespace field of that name (in ``schema``) names no
    compression. Lance encodes every later write by those fields, so such a table stores its
    strings uncompressed for good unless the field changes (compaction does it:
    :func:`lancepart.write.upgrade.reencode_grown_tables`). Nothing for a 2.0 table (2.0 does not
    compress strings) nor for a compression the namespace schema itself names.

    >>> from lancepart.storage.lance_io import open_table
    >>> grown_uncompressed(open_table(f"{ns.root}/{ns.partitions()[0].location}"), ns.schema)  # a small table
    []
    """
    if table_data_storage_version(ds) in (None, "2.0", "legacy"):
        return []
    frags = [f.metadata for f in ds.get_fragments()]
    if sum((f.physical_rows or 0) - (f.num_deletions or 0) for f in frags) < SMALL_TABLE_ROWS:
        return []
    key = COMPRESSION_KEY.encode()
    out = []
    for f in ds.schema:
        if not _textual(f.type) or (f.metadata or {}).get(key) != b"none" or f.name not in schema.names:
            continue
        if key not in (schema.field(f.name).metadata or {}):
            out.append(f.name)
    return out


def check_data_storage_version(value: object) -> str:
    """``value`` if it is a file format version new tables may have, else
    :class:`InvalidArgumentError` naming the key and the value.

    >>> check_data_storage_version("2.1")
    '2.1'
    """
    if not isinstance(value, str) or value not in DATA_STORAGE_VERSIONS:
        raise InvalidArgumentError(f"{DATA_STORAGE_VERSION_KEY}: {value!r} is not a Lance file format version new "
                                   f"partition tables can have; use one of {', '.join(DATA_STORAGE_VERSIONS)}")
    return value


def data_storage_version(metadata: Mapping[str, str]) -> str:
    """The file format version of the tables a namespace whose ``__manifest`` table metadata
    is ``metadata`` creates: :data:`DATA_STORAGE_VERSION_KEY`, else the default. A value that
    is not one of :data:`DATA_STORAGE_VERSIONS` raises :class:`ConfigError` naming the key and
    the value (nothing is written).

    >>> data_storage_version({})
    '2.2'
    >>> data_storage_version({"lancepart.data_storage_version": "2.2"})
    '2.2'
    """
    value = metadata.get(DATA_STORAGE_VERSION_KEY)
    if value is None:
        return DEFAULT_DATA_STORAGE_VERSION
    try:
        return check_data_storage_version(value)
    except InvalidArgumentError as e:
        raise ConfigError(f"root property {e}") from None


def namespace_data_storage_version(root: str, storage_options: Mapping[str, str] | None = None) -> str:
    """:func:`data_storage_version` of the latest ``__manifest`` at ``root`` (for a caller that
    does not hold a snapshot of it)."""
    from lancepart.storage.manifest import Manifest

    return data_storage_version(Manifest(root, storage_options).dataset().metadata)


def set_data_storage_version(root: str | os.PathLike[str], version: str,
                             storage_options: Mapping[str, str] | None = None) -> None:
    """Set the file format version of the partition tables the namespace at ``root`` creates
    from now on (``"2.0"``, ``"2.1"`` or ``"2.2"``; a metadata commit that concurrent publishes
    keep). Existing tables keep theirs: rows appended to them are written in their version.

    >>> from lancepart.storage.lance_io import open_table
    >>> set_data_storage_version(ns.root, "2.1")
    >>> _ = ns.write(pa.table({"id": [7], "event_date": [date(2025, 12, 12)]}))    # a new partition table
    >>> [(p.values["event_date"].day, table_data_storage_version(open_table(f"{ns.root}/{p.location}")))
    ...  for p in ns.partitions()]
    [(9, '2.2'), (10, '2.2'), (11, '2.2'), (12, '2.1')]
    """
    from lancepart.storage.manifest import Manifest, ManifestChanges, normalize_root

    value = check_data_storage_version(version)

    def change(snap):
        if value == "2.0":
            from lancepart.model.ids import SCHEMA_KEY
            from lancepart.model.spec import schema_from_json

            raw = snap.metadata.get(SCHEMA_KEY)
            structs = [] if raw is None else [f.name for f in schema_from_json(raw) if _has_struct(f.type)]
            if structs:
                raise InvalidArgumentError(
                    f"{DATA_STORAGE_VERSION_KEY}: '2.0' cannot store a NULL value of the struct column(s) {structs} of "
                    f"this namespace; use 2.1 or 2.2; nothing was changed")
        return ManifestChanges(metadata={DATA_STORAGE_VERSION_KEY: value}), None

    Manifest(normalize_root(root), storage_options).update(change, what="set data storage version")


def _has_struct(t) -> bool:
    import pyarrow as pa

    if pa.types.is_struct(t):
        return True
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return _has_struct(t.value_type)
    if pa.types.is_map(t):
        return _has_struct(t.key_type) or _has_struct(t.item_type)
    return False


def table_data_storage_version(ds: lance.LanceDataset) -> str | None:
    """The file format version of the Lance table ``ds`` as ``"<major>.<minor>"``, read from
    its data files (``"legacy"`` for Lance's 0.x files; None for a table without any): the
    version the rows appended to it are written in.

    >>> from lancepart.storage.lance_io import open_table
    >>> table_data_storage_version(open_table(f"{ns.root}/{ns.partitions()[0].location}"))
    '2.2'
    """
    return fragments_data_storage_version(f.metadata for f in ds.get_fragments())


def fragments_data_storage_version(fragments: Iterable[FragmentMetadata]) -> str | None:
    """The file format version ``"<major>.<minor>"`` of the data files of ``fragments``
    (FragmentMetadata), None when there are none (Lance's default then)."""
    for fragment in fragments:
        for f in fragment.files:
            return "legacy" if f.file_major_version == 0 else f"{f.file_major_version}.{f.file_minor_version}"
    return None
