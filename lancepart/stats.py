"""How big a namespace is: published rows, bytes on storage and versions kept, per partition
table and in total (what ``lancepart describe`` reports).

Bytes and versions count every file under a table's directory (data, deletion, index and
version manifest files of every version still on storage, not only the published one), so
they say what a cleanup could win back; rows count the published version only.

>>> d = describe(ns)
>>> d["partitions"], d["rows"], d["versions"], d["manifest"]["versions"]
(3, 6, 10, 7)
>>> [(t["values"]["event_date"].isoformat(), t["rows"]) for t in d["tables"]]
[('2025-12-09', 2), ('2025-12-10', 2), ('2025-12-11', 2)]
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from lancepart.handle import NamespaceHandle


def table_sizes(uri: str, storage_options: Mapping[str, str] | None = None) -> tuple[int, int]:
    """``(bytes, versions)`` of one Lance table: every file under it, every version manifest."""
    import pyarrow.compute as pc

    from lancepart.storage.lance_io import open_table

    so = dict(storage_options) if storage_options else None
    files = open_table(uri, storage_options=so).all_files().read_all()
    paths = files.column("path")
    versions = pc.sum(pc.and_(pc.starts_with(paths, "_versions/"), pc.ends_with(paths, ".manifest"))).as_py() or 0
    return int(pc.sum(files.column("size_bytes")).as_py() or 0), int(versions)


def namespace_sizes(ns: NamespaceHandle, progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Rows, bytes and versions of every published partition table of ``ns`` (measured in
    parallel) and of ``__manifest``, with totals: ``{"rows", "bytes", "versions", "manifest":
    {"bytes", "versions"}, "tables": [PartitionInfo.to_dict() + rows, bytes, versions]}``. A
    declared table that no writer created yet counts zero."""
    from lancepart.model.ids import check_location
    from lancepart.read.snapshot import open_published
    from lancepart.storage.manifest import MANIFEST_DIR, join_uri
    from lancepart.util.parallel import map_threads

    so = ns.storage_options
    infos = ns.partitions()
    if progress is not None:
        progress(f"measuring {len(infos)} partition tables")

    def measure(info) -> dict[str, Any]:
        ds = open_published(ns.root, info, so)
        if ds is None:  # declared, not created yet (docs/foreign-writers.md)
            return {**info.to_dict(), "rows": 0, "bytes": 0, "versions": 0}
        rows = ds.count_rows()
        nbytes, versions = table_sizes(join_uri(ns.root, check_location(info.location, info.object_id, ns.root)), so)
        return {**info.to_dict(), "rows": rows, "bytes": nbytes, "versions": versions}

    tables = map_threads(measure, infos)
    m_bytes, m_versions = table_sizes(join_uri(ns.root, MANIFEST_DIR), so)
    return {
        "rows": sum(t["rows"] for t in tables),
        "bytes": sum(t["bytes"] for t in tables) + m_bytes,
        "versions": sum(t["versions"] for t in tables) + m_versions,
        "manifest": {"bytes": m_bytes, "versions": m_versions},
        "tables": tables,
    }


def describe(ns: NamespaceHandle, sizes: bool = True,
             progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """The JSON description of ``ns``: root, manifest version, current spec id, every spec, the
    schema, the number of partition tables, the CHECK constraints (name -> expression) and,
    with ``sizes``, :func:`namespace_sizes` (which opens every table)."""
    from lancepart.model.constraints import constraints
    from lancepart.model.spec import schema_to_json

    out: dict[str, Any] = {
        "root": ns.root,
        "manifest_version": ns.manifest_version,
        "current_spec": ns.current_spec.id,
        "specs": {k: s.to_json() for k, s in ns.specs.items()},
        "schema": schema_to_json(ns.schema),
        "partitions": len(ns.partitions()),
        "constraints": constraints(ns.snapshot().metadata),
    }
    if sizes:
        out.update(namespace_sizes(ns, progress))
    return out


def human_bytes(n: int) -> str:
    """``1536`` -> ``1.5 KiB``: a byte count for people (B, KiB, MiB, GiB, TiB).

    >>> human_bytes(512), human_bytes(3 * 1024 ** 3)
    ('512 B', '3.0 GiB')
    """
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"
