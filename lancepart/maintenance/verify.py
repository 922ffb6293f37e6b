"""Verify a partitioned namespace: what is published can be read, and is what it claims to be.

Checks, in this order (docs/verify-and-repair.md):

1. ``__manifest`` has its columns: the five standard ones, ``read_version`` / ``read_branch`` /
   ``read_tag``, and one ``partition_field_<field_id>`` of the ``result_type`` of every field of
   every spec version (kinds ``missing_column``, ``column_type``; ``namespace_unreadable`` when
   the namespace cannot be opened at all);
2. every table row opens at its pinned version (``read_tag``, ``read_branch`` + ``read_version``,
   or ``read_version``; kind ``table_unreadable``) and every file that version references exists:
   data files, deletion files and index files (``missing_file``). A row whose ``read_version``
   is NULL and whose directory does not exist is a *declared* table (a ``declare_table`` of the
   directory namespace): it reads as empty, nothing to check;
3. each partition table's columns are the namespace schema's, same names, same types, and the
   same ``lance:field_id`` where the table's Arrow schema carries one (``schema_mismatch``);
4. every index declared (``lancepart.index.<name>``, docs/indexes.md) exists on every table with
   at least its ``min_rows`` rows (``index_missing``; tables pinned to a tag or branch, which
   index builds leave alone, are not checked);
5. with ``deep=True``, every row of every fragment is read (``corrupt_data`` names the table and
   the data file when that fails) and its partition values are recomputed with the spec's
   transforms: they must equal the partition's ``partition_field_*`` values, NULL-aware
   (``wrong_partition``). This catches flipped bits in a partition source column that decode
   without any error.

Tables are checked on the driver's bounded thread pool (Lance does the I/O in Rust without the
GIL); a progress line is logged every ``progress_every`` tables.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import lance
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lancepart.errors import LancepartError, NamespaceNotFoundError, UnsafeLocationError
from lancepart.evolution.schema_evolution import MAX_FIELD_ID_KEY, conform, is_current, source_columns, table_field_ids
from lancepart.index import IndexDeclaration, declarations, index_state
from lancepart.model.ids import SPEC_KEY_PREFIX, check_location
from lancepart.model.spec import FIELD_ID_KEY_BYTES, PartitionSpec, field_id_of
from lancepart.model.transforms import losslessly_castable
from lancepart.results import PartitionInfo, Problem, VerifyReport
from lancepart.storage.lance_io import open_table
from lancepart.storage.manifest import STANDARD_FIELDS, VERSION_FIELDS, Manifest, is_not_found, join_uri
from lancepart.util.parallel import map_threads

if TYPE_CHECKING:
    from lancepart.handle import NamespaceHandle

log = logging.getLogger("lancepart.maintenance")

MANIFEST_OBJECT = "__manifest"
TRACKED_TYPES = ("data file", "deletion file", "index file")
MAX_FILES_PER_TABLE = 10  # missing files reported one by one per table; the rest summed up


@dataclass
class _TableCheck:
    problems: list[Problem]
    declared: bool = False
    files: int = 0
    rows: int = 0


def _specs_of(metadata: Mapping[str, str]) -> tuple[dict[int, PartitionSpec], list[Problem]]:
    specs: dict[int, PartitionSpec] = {}
    problems: list[Problem] = []
    for key, value in metadata.items():
        if not key.startswith(SPEC_KEY_PREFIX):
            continue
        try:
            spec = PartitionSpec.from_json(value)
            specs[spec.id] = spec
        except (LancepartError, ValueError, TypeError, KeyError) as e:
            problems.append(Problem(MANIFEST_OBJECT, MANIFEST_OBJECT, "namespace_unreadable",
                                    f"root property {key!r} is not a valid partition spec: {e}"))
    return specs, problems


def check_manifest_columns(schema: pa.Schema, specs: Mapping[int, PartitionSpec]) -> list[Problem]:
    """Problems with the columns of ``__manifest`` (kinds ``missing_column`` and ``column_type``)."""
    wanted: dict[str, tuple[pa.DataType, str]] = {}
    for f in (*STANDARD_FIELDS, *VERSION_FIELDS):
        wanted[f.name] = (f.type, "standard" if f in STANDARD_FIELDS else "version")
    for spec in specs.values():
        for f in spec.fields:
            wanted.setdefault(f.column_name, (f.result_type, f"partition field {f.field_id!r} of spec v{spec.id}"))
    problems = []
    for name, (type_, why) in wanted.items():
        if name not in schema.names:
            problems.append(Problem(MANIFEST_OBJECT, MANIFEST_OBJECT, "missing_column",
                                    f"__manifest has no column {name!r} ({why} column); a writer that knows only "
                                    f"the directory namespace may have rewritten it"))
        elif schema.field(name).type != type_ and name != "base_objects":  # list field names may differ
            problems.append(Problem(MANIFEST_OBJECT, MANIFEST_OBJECT, "column_type",
                                    f"__manifest column {name!r} is {schema.field(name).type}, expected {type_}"))
    return problems


def check_table_schema(info: PartitionInfo, table_schema: pa.Schema, schema: pa.Schema,
                       namespace_md: Mapping[str, str] | None = None) -> list[Problem]:
    """Problems between a partition table's columns and the namespace schema (``schema_mismatch``).
    A table written under an older form of the schema (:mod:`lancepart.evolution.schema_evolution`) is
    fine when each of its columns is a field id the namespace gave and, for a field still in the
    schema, of a type that widens losslessly to the current one."""
    out = []

    def problem(msg: str) -> None:
        out.append(Problem(info.object_id, info.location, "schema_mismatch",
                           f"partition table {info.object_id!r}: {msg}"))

    md = dict(namespace_md or {})
    if md.get(MAX_FIELD_ID_KEY) is not None and not is_current(table_schema, md, schema):
        ids = table_field_ids(table_schema, md, schema)
        current = {field_id_of(f): f for f in schema}
        for name in table_schema.names:
            fid = ids.get(name)
            if fid is None or fid > int(md[MAX_FIELD_ID_KEY]):
                problem(f"column {name!r} has no field id of the namespace schema, past or present")
            elif fid in current and table_schema.field(name).type != current[fid].type and not losslessly_castable(
                    table_schema.field(name).type, current[fid].type):
                problem(f"column {name!r} (field id {fid}) is {table_schema.field(name).type} in the table, which "
                        f"does not widen to {current[fid].type} ({current[fid].name!r} in the namespace schema)")
        return out

    for f in schema:
        if f.name not in table_schema.names:
            problem(f"column {f.name!r} of the namespace schema is missing from the table")
            continue
        tf = table_schema.field(f.name)
        if tf.type != f.type:
            problem(f"column {f.name!r} is {tf.type} in the table but {f.type} in the namespace schema")
        want, have = (f.metadata or {}).get(FIELD_ID_KEY_BYTES), (tf.metadata or {}).get(FIELD_ID_KEY_BYTES)
        if have is not None and want is not None and have != want:
            problem(f"column {f.name!r} has lance:field_id {have.decode()} in the table but {want.decode()} in "
                    f"the namespace schema")
    extra = [n for n in table_schema.names if n not in schema.names]
    if extra:
        problem(f"column(s) {extra} are not in the namespace schema")
    return out


def _mismatches(computed: pa.Array | pa.ChunkedArray, expected: pa.Scalar) -> np.ndarray:
    """Rows whose recomputed partition value differs from ``expected`` (NULL equals NULL, NaN NaN)."""
    if isinstance(computed, pa.ChunkedArray):
        computed = computed.combine_chunks()
    if expected is None or not expected.is_valid:
        return np.asarray(computed.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
    if expected.type != computed.type:
        expected = expected.cast(computed.type)
    if pa.types.is_floating(computed.type) and math.isnan(expected.as_py()):
        same = pc.fill_null(pc.is_nan(computed), False)
    else:
        same = pc.fill_null(pc.equal(computed, expected), False)
    return ~np.asarray(same.to_numpy(zero_copy_only=False), dtype=bool)


def _display(value: Any) -> str:
    return "NULL" if value is None else repr(value)


def _open(root: str, info: PartitionInfo, so: Mapping[str, str] | None) -> lance.LanceDataset | None:
    """The table at its pinned version; None for a declared-only table (no directory, no pin)."""
    from lancepart.read.snapshot import open_partition

    if info.read_version is None and info.read_branch is None and info.read_tag is None:
        try:
            return open_table(join_uri(root, info.location), storage_options=dict(so) if so else None)
        except (OSError, ValueError) as e:
            if is_not_found(e):
                return None
            raise
    return open_partition(root, info, so)


def check_files(info: PartitionInfo, ds: lance.LanceDataset) -> tuple[list[Problem], int]:
    """Every data, deletion and index file of the table's pinned version exists (``missing_file``)."""
    tracked = ds.tracked_files(min_version=ds.version).read_all()
    mask = pc.and_(pc.equal(tracked.column("version"), ds.version),
                   pc.is_in(tracked.column("type").cast(pa.utf8()), pa.array(TRACKED_TYPES)))
    tracked = tracked.filter(mask)
    wanted = {(b, p) for b, p in zip(tracked.column("base_uri").cast(pa.utf8()).to_pylist(),
                                     tracked.column("path").to_pylist(), strict=True)}
    if not wanted:  # a branch's version may not be listed from here: use its fragments' data files
        wanted = {(None, f"data/{df.path}") for frag in ds.get_fragments() for df in frag.metadata.files}
    present = ds.all_files().read_all()
    bases = set(present.column("base_uri").cast(pa.utf8()).to_pylist()) or {None}
    here = set(present.column("path").to_pylist())
    # files of other bases (shallow clones) cannot be listed from this table's directory: not judged here
    missing = sorted(p for b, p in wanted if (b is None or b in bases) and p not in here)
    # tracked_files lists an index's files from its directory: a directory that is gone lists nothing
    index_dirs = {p.split("/")[1] for p in here if p.startswith("_indices/")}
    indices = [(d.name, seg.uuid) for d in ds.describe_indices() for seg in d.segments if seg.base_id is None]
    missing += sorted(f"_indices/{uuid}/ (index {name!r})" for name, uuid in indices if uuid not in index_dirs)
    problems = [Problem(info.object_id, info.location, "missing_file",
                        f"partition table {info.object_id!r} version {ds.version}: {p} is referenced but does not "
                        f"exist") for p in missing[:MAX_FILES_PER_TABLE]]
    if len(missing) > MAX_FILES_PER_TABLE:
        problems.append(Problem(info.object_id, info.location, "missing_file",
                                f"partition table {info.object_id!r}: {len(missing) - MAX_FILES_PER_TABLE} more "
                                f"referenced files are missing"))
    return problems, len(wanted) + len(indices)


def check_rows(info: PartitionInfo, ds: lance.LanceDataset, spec: PartitionSpec | None, schema: pa.Schema,
               expected: Mapping[str, pa.Scalar], namespace_md: Mapping[str, str] | None = None
               ) -> tuple[list[Problem], int]:
    """Read every row, fragment by fragment, and recompute its partition values (deep check)."""
    from lancepart.write.plan import partition_values

    problems: list[Problem] = []
    rows = 0
    for frag in ds.get_fragments():
        files = ", ".join(f"data/{df.path}" for df in frag.metadata.files)
        try:
            data = frag.to_table()
        except (OSError, ValueError) as e:  # pyarrow's ArrowInvalid is a ValueError
            problems.append(Problem(info.object_id, info.location, "corrupt_data",
                                    f"partition table {info.object_id!r}: fragment {frag.fragment_id} ({files}) "
                                    f"cannot be read: {' '.join(str(e).split())[:300]}"))
            continue
        rows += data.num_rows
        if namespace_md and not is_current(data.schema, namespace_md, schema):  # an older form of the schema
            data = conform(data, source_columns(ds.schema, namespace_md, schema, schema.names), schema)
        if spec is None or not data.num_rows or any(n not in data.column_names for n in schema.names):
            continue
        try:
            values = partition_values(data.select(schema.names), spec, schema)
        except LancepartError as e:
            problems.append(Problem(info.object_id, info.location, "wrong_partition",
                                    f"partition table {info.object_id!r}: fragment {frag.fragment_id} ({files}): "
                                    f"partition values cannot be computed: {e}"))
            continue
        for f in spec.fields:
            bad = _mismatches(values.column(f.column_name), expected.get(f.column_name))
            if bad.any():
                row = int(np.flatnonzero(bad)[0])
                got = values.column(f.column_name)[row].as_py()
                want = expected.get(f.column_name)
                problems.append(Problem(
                    info.object_id, info.location, "wrong_partition",
                    f"partition table {info.object_id!r}: {int(bad.sum())} of {data.num_rows} rows of fragment "
                    f"{frag.fragment_id} ({files}) belong to another partition: field {f.field_id!r} is "
                    f"{_display(got)} for row {row} but the partition's value is "
                    f"{_display(want.as_py() if want is not None and want.is_valid else None)}"))
    return problems, rows


def check_unpublished(root: str, info: PartitionInfo, so: Mapping[str, str] | None) -> list[Problem]:
    """Rows another writer (Lance's directory namespace, plain pylance) appended to the table
    beyond its ``read_version`` (``unpublished_rows``): lancepart does not read them, its next
    commit on the table leaves them out, and cleanup deletes their files (docs/foreign-writers.md).
    lancepart's own unpublished versions (a job that died, one still running) are not reported:
    its commits to an existing table are updates, never appends
    (:func:`~lancepart.storage.table_commit.foreign_versions`)."""
    from lancepart.storage.table_commit import foreign_versions

    latest = open_table(join_uri(root, info.location), storage_options=dict(so) if so else None)
    if latest.version <= (info.read_version or 0):
        return []
    versions, rows = foreign_versions(latest, info.read_version or 0)
    if not versions:
        return []
    return [Problem(info.object_id, info.location, "unpublished_rows",
                    f"partition table {info.object_id!r}: {rows} row(s) in version(s) {versions} were written by "
                    f"another writer beyond read_version {info.read_version} and are not published: lancepart "
                    f"does not read them, its next commit on this table leaves them out and cleanup deletes "
                    f"their files; to keep them, write them through lancepart (docs/foreign-writers.md)")]


def check_indexes(info: PartitionInfo, ds: lance.LanceDataset, decls: Sequence[IndexDeclaration]) -> list[Problem]:
    """A declared index absent from a table with at least its ``min_rows`` rows (kind
    ``index_missing``; docs/indexes.md)."""
    out: list[Problem] = []
    rows = None
    for d in decls:
        if index_state(ds, d) != "missing":
            continue
        rows = ds.count_rows() if rows is None else rows
        if rows >= d.min_rows:
            out.append(Problem(info.object_id, info.location, "index_missing",
                               f"partition table {info.object_id!r} (version {ds.version}, {rows} rows) lacks the "
                               f"declared {d.index_type} index {d.name!r} on {d.column!r} (min_rows {d.min_rows}); "
                               f"`lancepart index ROOT create {d.column} {d.index_type} --name {d.name}` or the "
                               f"next compaction builds it"))
    return out


def verify(root: str, storage_options: Mapping[str, str] | None = None, deep: bool = False, *,
           open_namespace: Callable[[str, Mapping[str, str] | None], NamespaceHandle],
           progress_every: int = 100) -> VerifyReport:
    """Check the namespace at ``root`` and report every problem found (never raises for one;
    :class:`NamespaceNotFoundError` when ``root`` holds no ``__manifest`` table at all);
    ``open_namespace(root, storage_options)`` opens it (``PartitionedNamespace.open``), after
    ``__manifest`` itself was checked:

    1. ``__manifest`` opens, its root properties are specs and it has its columns; when it does
       not open, the report ends there;
    2. the namespace opens; when it does not, or a column is missing (tables cannot be told apart
       from their pins), the report ends there;
    3. every table is checked on the thread pool (:class:`_TableChecker`);
    4. the report, logged.

    >>> def opener(root, storage_options):
    ...     return PartitionedNamespace.open(root, storage_options=storage_options)
    >>> report = verify(ns.root, deep=True, open_namespace=opener)
    >>> report.ok, report.tables_checked, report.rows_checked
    (True, 3, 6)
    """
    started = time.monotonic()

    def report(problems: Sequence[Problem], **counts: int) -> VerifyReport:
        return VerifyReport(problems=tuple(problems), deep=deep, **counts,
                            seconds=round(time.monotonic() - started, 3))

    manifest = Manifest(root, storage_options)
    try:
        raw = manifest.dataset()
    except NamespaceNotFoundError:  # no namespace there at all: a wrong root, as for every other operation
        raise
    except LancepartError as e:
        return report([Problem(MANIFEST_OBJECT, MANIFEST_OBJECT, "namespace_unreadable", str(e))])
    specs, problems = _specs_of(dict(raw.metadata))
    problems += check_manifest_columns(raw.schema, specs)
    try:
        ns = open_namespace(root, storage_options)
    except (LancepartError, KeyError) as e:
        problems.append(Problem(MANIFEST_OBJECT, MANIFEST_OBJECT, "namespace_unreadable",
                                f"the namespace cannot be opened: {type(e).__name__}: {e}"))
        return report(problems, manifest_version=raw.version)
    if any(p.kind == "missing_column" for p in problems):  # tables cannot be told apart from their pins
        return report(problems, manifest_version=ns.manifest_version)
    results = _TableChecker(root, ns, deep, progress_every).run()
    for r in results:
        problems += r.problems
    out = report(problems, manifest_version=ns.manifest_version,
                 tables_checked=sum(not r.declared for r in results), tables_declared=sum(r.declared for r in results),
                 files_checked=sum(r.files for r in results), rows_checked=sum(r.rows for r in results))
    log.info("verify of %s: %s, %d tables (%d declared), %d files, %d rows read, %d problems, %.1f s", root,
             "ok" if out.ok else "PROBLEMS", out.tables_checked, out.tables_declared, out.files_checked,
             out.rows_checked, len(problems), out.seconds)
    return out


def _tables_to_check(ns: NamespaceHandle) -> list[tuple[PartitionInfo, dict[str, pa.Scalar]]]:
    """Each table row of ``__manifest`` as read at open (the columns that locate and pin each table),
    with its ``partition_field_*`` values."""
    tables = ns.snapshot().table_pins()
    partitions = {p.object_id: p for p in ns._partition_infos(tables)}
    infos: list[tuple[PartitionInfo, dict[str, pa.Scalar]]] = []
    pcols = [c for c in tables.column_names if c.startswith("partition_field_")]
    base = tables.select(["object_id", "location", "read_version", "read_branch", "read_tag"]).to_pylist()
    for i, row in enumerate(base):
        info = partitions.get(row["object_id"]) or PartitionInfo(spec_id=-1, values={}, **row)
        infos.append((info, {c: tables.column(c)[i] for c in pcols}))
    return infos


class _TableChecker:
    """Checks 2 to 5 of the module docstring on every table of a namespace, on the driver's thread
    pool, with a progress line every ``progress_every`` tables."""

    def __init__(self, root: str, ns: NamespaceHandle, deep: bool, progress_every: int) -> None:
        self.root, self.ns, self.deep, self.progress_every = root, ns, deep, progress_every
        self.schema, self.specs = ns.schema, ns.specs
        self.items = _tables_to_check(ns)
        self.decls = declarations(ns.snapshot().metadata)
        self.total, self.done, self.lock = len(self.items), 0, threading.Lock()

    def run(self) -> list[_TableCheck]:
        log.info("verifying %s: %d tables%s", self.root, self.total, " (deep: every row)" if self.deep else "")
        return map_threads(self.check, self.items)

    def check(self, item: tuple[PartitionInfo, dict[str, pa.Scalar]]) -> _TableCheck:
        info, expected = item
        out = _TableCheck([])
        try:
            ds = self._open(info, out)
            if ds is not None:
                self._check_table(info, ds, expected, out)
            return out
        finally:
            with self.lock:
                self.done += 1
                if self.done % self.progress_every == 0 or self.done == self.total:
                    log.info("verified %d/%d tables", self.done, self.total)

    def _open(self, info: PartitionInfo, out: _TableCheck) -> lance.LanceDataset | None:
        """The table at its pinned version; None when there is nothing to check: ``out`` then has
        the problem (``table_unreadable``), or is ``declared``."""
        try:
            check_location(info.location, info.object_id, self.root)
        except UnsafeLocationError as e:
            out.problems.append(Problem(info.object_id, info.location, "table_unreadable", str(e)))
            return None
        try:
            ds = _open(self.root, info, self.ns.storage_options)
        except (LancepartError, OSError, ValueError) as e:
            named = isinstance(e, LancepartError) and info.object_id in str(e)  # it names the table already
            out.problems.append(Problem(info.object_id, info.location, "table_unreadable",
                                        str(e) if named else f"partition table {info.object_id!r}: {e}"))
            return None
        if ds is None:
            out.declared = True
        return ds

    def _check_table(self, info: PartitionInfo, ds: lance.LanceDataset, expected: dict[str, pa.Scalar],
                     out: _TableCheck) -> None:
        """Its files, its schema, its indexes, rows of other writers and, deep, every row."""
        ns = self.ns
        try:
            file_problems, out.files = check_files(info, ds)
            out.problems += file_problems
        except (OSError, ValueError) as e:
            out.problems.append(Problem(info.object_id, info.location, "table_unreadable",
                                        f"partition table {info.object_id!r}: its files cannot be listed: {e}"))
        spec = self.specs.get(info.spec_id)
        if info.spec_id >= 0 and spec is None:
            out.problems.append(Problem(info.object_id, info.location, "schema_mismatch",
                                        f"partition table {info.object_id!r} belongs to spec v{info.spec_id}, "
                                        f"which the namespace does not define"))
        if spec is not None:
            out.problems += check_table_schema(info, ds.schema, self.schema, ns.snapshot().metadata)
        if self.decls and spec is not None and info.read_branch is None and info.read_tag is None:  # pins: as they are
            out.problems += check_indexes(info, ds, self.decls)
        if info.read_branch is None and info.read_tag is None and info.read_version is not None:
            out.problems += check_unpublished(self.root, info, ns.storage_options)
        if self.deep:
            row_problems, out.rows = check_rows(info, ds, spec, self.schema, expected, ns.snapshot().metadata)
            out.problems += row_problems
