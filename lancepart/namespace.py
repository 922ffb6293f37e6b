"""PartitionedNamespace: create / open / describe a partitioned directory namespace.

Spec: spec/partitioning.md "Metadata Definition", "Physical Layout and Naming",
"Runtime Namespace Properties", Appendices A, B, C, E; docs/design.md §4–§7.
"""

from __future__ import annotations

import functools
import json
import os
import posixpath
import threading
import types
import warnings
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from lancepart import handle as _handle
from lancepart.arguments import CommitOptions, commit_settings
from lancepart.deprecation import REMOVED_IN, keyword_only
from lancepart.errors import (
    CorruptNamespaceError,
    InvalidArgumentError,
    InvalidSpecError,
    LancepartError,
    NamespaceExistsError,
    NamespaceNotFoundError,
)
from lancepart.model import ids as _ids
from lancepart.model.spec import PartitionField, PartitionSpec, assign_field_ids, schema_from_json, schema_to_json
from lancepart.ops.history import HistoryEntry
from lancepart.ops.repair import RepairReport
from lancepart.results import CleanupStats, CommitResult, EvolveResult, PartitionInfo, VerifyReport
from lancepart.storage.error_mapping import public_operation
from lancepart.storage.manifest import (
    Manifest,
    ManifestSnapshot,
    SnapshotGone,
    manifest_schema,
    metadata_json,
    normalize_root,
    rows_from_records,
)

if TYPE_CHECKING:  # the types of what the engine methods return (optional dependencies)
    import datafusion
    import duckdb
    import pandas
    import polars
    import pyarrow.dataset

SCHEMA_KEY = _ids.SCHEMA_KEY
SPEC_KEY_PREFIX = _ids.SPEC_KEY_PREFIX
_PLAN_CACHE = 64  # scan plans a handle keeps per snapshot (filter -> kept partitions)
_DATASET_CACHE = 1024  # partition tables a handle keeps open for searches
# what a failed create or cleanup says instead of "nothing was published" (lancepart.storage.error_mapping)
_CREATE_OUTCOME = "no partitioned namespace was created (one exists only once its last commit lands)"
_CLEANUP_OUTCOME = ("cleanup removes only what no retained version needs: what it removed before the error is gone, "
                    "nothing published changed; run it again")


def _partition_columns(specs: Sequence[PartitionSpec]) -> list[pa.Field]:
    cols: dict[str, pa.Field] = {}
    for spec in specs:
        for f in spec.fields:
            cols.setdefault(f.column_name, pa.field(f.column_name, f.result_type, nullable=True))
    return list(cols.values())


def _display(value: pa.Scalar | None, type_: pa.DataType) -> str | None:
    """A partition value as a runtime property string (Appendix E: ``2025-12-10``, ``2025``, ``US``),
    cast by Arrow from the ``__manifest`` cell (never through a Python object)."""
    if value is None or not value.is_valid:
        return None
    return pc.cast(pa.array([value]).cast(type_), pa.utf8())[0].as_py()


def _py_values(column: pa.Array | pa.ChunkedArray) -> list[Any]:
    """The Python values of a partition column; a value Python cannot represent (a date beyond
    year 9999, ``timestamp[ns]`` -2^63, which pyarrow reads as pandas' NaT) stays a ``pa.Scalar``.
    lancepart's writers refuse such values; other writers may not have."""
    try:
        values = column.to_pylist()
    except (OverflowError, ValueError):
        values = [None] * len(column)
        for i, v in enumerate(column):
            try:
                values[i] = v.as_py()
            except (OverflowError, ValueError):
                values[i] = v
    if pa.types.is_timestamp(column.type) and column.type.unit == "ns":
        values = [column[i] if v is not None and v != v else v for i, v in enumerate(values)]  # NaT != NaT
    return values


def _resolve_root(root: str | os.PathLike[str]) -> str:
    """:func:`normalize_root`, and the path of a ``file://`` URI normalised like a local one: Lance
    resolves ``..`` in it, so ``file:///tmp/x/../../etc`` is reported as ``file:///etc``."""
    root_s = normalize_root(root)
    if root_s.startswith("file:///"):
        root_s = "file://" + posixpath.normpath(root_s[len("file://"):])
    return root_s


class _ClassOrInstanceMethod:
    """A method with a form for the class and one for an instance: ``PartitionedNamespace.repair(root)``
    works on a root no handle can be opened on, ``ns.repair()`` on the handle's namespace."""

    def __init__(self, on_class: Any, on_instance: Any) -> None:
        self._on_class, self._on_instance = on_class, on_instance
        functools.update_wrapper(self, on_class)

    def __set_name__(self, owner: type, name: str) -> None:
        for fn in (self._on_class, self._on_instance):
            fn.__name__, fn.__qualname__ = name, f"{owner.__qualname__}.{name}"
        self.__name__, self.__qualname__ = name, f"{owner.__qualname__}.{name}"

    def __get__(self, obj: Any, owner: type | None = None) -> Any:
        if obj is None:
            return types.MethodType(self._on_class, owner)
        return types.MethodType(self._on_instance, obj)


class PartitionedNamespace:
    """A partitioned namespace rooted at a directory or URI. Every public method raises
    lancepart's typed errors only: what Lance, Arrow or the operating system raise becomes a
    :class:`~lancepart.errors.LancepartError` naming the operation and the root and saying
    whether anything was published (:func:`lancepart.storage.error_mapping.public_operation`).

    >>> import tempfile, pyarrow as pa
    >>> schema = pa.schema([("id", pa.int64()), ("country", pa.utf8())])
    >>> spec = {"id": 1, "fields": [{"field_id": "country", "source_ids": [1],
    ...          "transform": {"type": "identity"}, "result_type": {"type": "utf8"}}]}
    >>> ns = PartitionedNamespace.create(tempfile.mkdtemp() + "/ns", schema, spec)
    >>> ns.current_spec.id
    1
    """

    def __init__(self, root: str, manifest: Manifest, snapshot: ManifestSnapshot | None = None) -> None:
        self.root = root
        self.storage_options = manifest.storage_options
        self._manifest = manifest
        self._read_only = False
        self._datasets: OrderedDict[tuple[Any, ...], Any] = OrderedDict()  # see _published_dataset
        self._datasets_lock = threading.Lock()
        if snapshot is None:
            self._load_latest(manifest)
        else:
            self._load(snapshot)

    # ------------------------------------------------------------------ construction
    @classmethod
    @keyword_only("storage_options")
    @public_operation("create", publishes=False, root_arg=1, outcome=_CREATE_OUTCOME)
    def create(
        cls,
        root: str | os.PathLike[str],
        schema: pa.Schema,
        spec: PartitionSpec | Mapping[str, Any] | str,
        *,
        storage_options: Mapping[str, str] | None = None,
    ) -> PartitionedNamespace:
        """Create a partitioned namespace: ``__manifest`` with the ``v<id>`` row, the
        ``schema`` and ``partition_spec_v<id>`` root properties and the manifest indexes.

        Raises :class:`NamespaceExistsError` when ``root`` already has a ``__manifest``.
        """
        from lancepart.model.predicates import check_column_names
        from lancepart.model.transforms import validate_spec  # engine-level checks (types, expressions)

        root_s = _resolve_root(root)
        if isinstance(schema, pa.Schema):
            check_column_names(schema.names, "create")
        schema = assign_field_ids(schema)
        spec = spec if isinstance(spec, PartitionSpec) else PartitionSpec.from_json(spec)
        validate_spec(spec, schema)
        manifest = Manifest(root_s, storage_options)
        if manifest.exists():
            raise NamespaceExistsError(f"a namespace already exists at {root_s} (found {manifest.uri})")
        mschema = manifest_schema(_partition_columns([spec]))
        rows = rows_from_records(mschema, [{"object_id": spec.namespace, "object_type": "namespace",
                                            "metadata": metadata_json({})}])
        try:
            snapshot = manifest.create(rows, {SCHEMA_KEY: json.dumps(schema_to_json(schema), separators=(",", ":")),
                                              spec.key: spec.to_json_string()})
        except LancepartError:
            raise
        except (OSError, ValueError) as e:
            if manifest.exists() and "exist" in str(e).lower():
                raise NamespaceExistsError(f"a namespace already exists at {root_s}") from None
            raise
        return cls(root_s, manifest, snapshot)

    @classmethod
    @keyword_only("storage_options")
    @public_operation("open", publishes=False, root_arg=1)
    def open(cls, root: str | os.PathLike[str], *, version: int | None = None, as_of: datetime | None = None,
             storage_options: Mapping[str, str] | None = None) -> PartitionedNamespace:
        """Open an existing partitioned namespace; :class:`NamespaceNotFoundError` if there is none.

        ``version=N`` or ``as_of=datetime`` (a naive one is UTC) opens a **read-only** handle on
        that ``__manifest`` version, or on the latest one committed at or before ``as_of``: its
        specs, schema and every partition table at the version that snapshot pinned
        (docs/history.md). A version a cleanup removed raises :class:`SnapshotExpiredError`
        saying how far back time travel reaches.

        >>> before = ns.history()[1].version          # the version before the latest write
        >>> old = PartitionedNamespace.open(ns.root, version=before)
        >>> old.to_table("country = 'US'").num_rows, old.read_only
        (2, True)
        """
        root_s = _resolve_root(root)
        manifest = Manifest(root_s, storage_options)
        if version is None and as_of is None:
            return cls(root_s, manifest)
        from lancepart.ops.history import snapshot_at

        ns = cls(root_s, manifest, snapshot_at(manifest, version=version, as_of=as_of))
        ns._read_only = True
        return ns

    @property
    def read_only(self) -> bool:
        """True for a handle opened with ``version=`` / ``as_of=`` (time travel): it reads that
        snapshot only, and every operation that commits raises :class:`InvalidArgumentError`."""
        return self._read_only

    def _writable(self, operation: str) -> None:
        if self._read_only:
            raise InvalidArgumentError(
                f"{operation}: this handle reads __manifest version {self._snapshot.version} of {self.root} "
                f"(opened with version= or as_of=) and cannot commit; open the namespace without them to "
                f"{operation}")

    @keyword_only()
    @public_operation("refresh", publishes=False)
    def refresh(self) -> PartitionedNamespace:
        """Reload ``__manifest`` (specs, schema and partition table rows) at its latest version.
        A read-only handle (``version=`` / ``as_of=``) keeps its snapshot."""
        if not self._read_only:
            self._load_latest(self._manifest)
        return self

    @keyword_only("limit")
    @public_operation("history", publishes=False)
    def history(self, *, limit: int | None = None) -> list[HistoryEntry]:
        """The retained ``__manifest`` versions, newest first, as :class:`lancepart.ops.history.HistoryEntry`
        (version, timestamp, operation, batch_id, rows_written, partitions_touched, properties: a
        commit's ``CommitOptions.custom_metadata`` among them). Each is a snapshot
        ``open(root, version=...)`` can read; cleanup decides how far back they go.

        >>> [(e.operation, e.batch_id, e.rows_written) for e in ns.history(limit=2)]
        [('append', '2025-12-11', 2), ('append', '2025-12-10', 4)]
        """
        from lancepart.ops.history import history

        return history(self._manifest, limit)

    def _load_latest(self, manifest: Manifest) -> None:
        for _ in range(20):
            try:
                self._load(manifest.snapshot())
                return
            except SnapshotGone:
                # the latest version was superseded and removed by a cleanup with a short retention
                # between our open and our read: read the newer one
                continue
        raise CorruptNamespaceError(f"cannot read __manifest at {manifest.uri}: its latest version kept vanishing")

    def _follow(self) -> None:
        """Move to the latest ``__manifest`` version after this handle's own commit: its rows are
        read when needed (a write's cost does not grow with the namespace)."""
        self._load(self._manifest.snapshot(), eager=False)

    def _load(self, snap: ManifestSnapshot, eager: bool = True) -> None:
        md = snap.metadata
        spec_keys = [k for k in md if k.startswith(SPEC_KEY_PREFIX)]
        if not spec_keys:
            raise NamespaceNotFoundError(
                f"{self.root} has a __manifest but no {SPEC_KEY_PREFIX}<N> property: it is a plain "
                f"directory namespace, not a partitioned one"
            )
        if SCHEMA_KEY not in md:
            raise CorruptNamespaceError(f"{self._manifest.uri}: root property 'schema' is missing")
        try:
            self._schema = schema_from_json(md[SCHEMA_KEY])
            specs = {}
            for k in spec_keys:
                spec = PartitionSpec.from_json(md[k])
                if k != spec.key:
                    raise InvalidSpecError(f"root property {k!r} holds a spec with id {spec.id}")
                specs[spec.id] = spec
        except InvalidSpecError as e:
            raise CorruptNamespaceError(f"{self._manifest.uri}: {e}") from e
        except (TypeError, ValueError, KeyError, AttributeError) as e:  # JSON of the wrong shape
            raise CorruptNamespaceError(
                f"{self._manifest.uri}: root properties 'schema' / {SPEC_KEY_PREFIX}<N> cannot be read: "
                f"{type(e).__name__}: {e}") from e
        if eager:  # a handle keeps the snapshot it opened, also when __manifest is damaged later
            snap.pin_rows()
        self._specs = dict(sorted(specs.items()))
        self._snapshot = snap
        self._plans: dict[str, tuple[list[PartitionInfo], str | None, str | None]] = {}  # filter -> scan_plan
        self._filter_facts: dict[tuple[str, str], Any] = {}  # per snapshot too: what a filter proves (search)

    # ------------------------------------------------------------------ properties
    @property
    def schema(self) -> pa.Schema:
        """The namespace schema; every field carries ``lance:field_id``."""
        return self._schema

    @property
    def specs(self) -> dict[int, PartitionSpec]:
        """Every spec version, ``{spec_id: PartitionSpec}``."""
        return dict(self._specs)

    @property
    def current_spec(self) -> PartitionSpec:
        """The spec new writes use: the highest version."""
        return self._specs[max(self._specs)]

    @property
    def manifest(self) -> Manifest:
        return self._manifest

    @property
    def manifest_version(self) -> int:
        return self._snapshot.version

    def snapshot(self) -> ManifestSnapshot:
        return self._snapshot

    # ------------------------------------------------------------------ evolution
    @keyword_only()
    @public_operation("update_spec")
    def update_spec(self, fields: Sequence[PartitionField | Mapping[str, Any]], *, commit: CommitOptions | None = None,
                    max_retries: int | None = None) -> EvolveResult:
        """Add partition spec version ``v<N+1>`` with ``fields`` (spec "Partition Evolution"); new
        writes use it, reads and pruning span every version. Returns an
        :class:`~lancepart.results.EvolveResult`, the :class:`CommitResult` of the evolution with
        the spec in ``result.spec`` and ``details``: ``spec_id``, ``created``,
        ``previous_spec_id``, ``spec``.

        ``fields`` are :class:`PartitionField` or their JSON objects; a field with the
        source_ids and transform of an earlier field reuses its ``field_id`` ("Field ID
        Reuse"), and ``field_id`` may be left out. ``__manifest`` gains the new
        ``partition_field_*`` columns through Lance schema evolution. Defining exactly the
        current spec again is a no-op (``details["created"]`` False, ``result.spec`` the current spec).

        ``evolve`` is its old name (until lancepart 0.2, with a :class:`DeprecationWarning`);
        pyiceberg calls it ``update_spec`` beside ``update_schema``.

        >>> ns.update_spec([{"source_ids": [1], "transform": {"type": "year"}, "result_type": {"type": "int32"}},
        ...                {"field_id": "country", "source_ids": [2], "transform": {"type": "identity"},
        ...                 "result_type": {"type": "utf8"}}]).spec.id
        2
        """
        return self._update_spec("update_spec", fields, commit, max_retries)

    @keyword_only()
    @public_operation("evolve")
    def evolve(self, fields: Sequence[PartitionField | Mapping[str, Any]], *, commit: CommitOptions | None = None,
               max_retries: int | None = None) -> EvolveResult:
        """Deprecated name of :meth:`update_spec` (until lancepart 0.2)."""
        warnings.warn(f"ns.evolve() is deprecated and works until lancepart {REMOVED_IN}: use ns.update_spec() (the "
                      f"same arguments and result)", DeprecationWarning, stacklevel=4)  # the caller's line
        return self._update_spec("evolve", fields, commit, max_retries)

    def _update_spec(self, name: str, fields: Sequence[PartitionField | Mapping[str, Any]],
                     commit: CommitOptions | None, max_retries: int | None) -> EvolveResult:
        self._writable(name)
        from lancepart.evolution.spec_evolution import evolve

        retries, props = commit_settings(commit, max_retries)
        result = evolve(self._manifest, self._schema, fields, max_retries=retries, properties=props)
        self.refresh()
        return result

    @keyword_only()
    @public_operation("update_schema")
    def update_schema(self, add: Sequence[pa.Field] | None = None, rename: Mapping[str, str] | None = None,
                      drop: Sequence[str] | None = None, widen: Mapping[str, pa.DataType] | None = None, *,
                      commit: CommitOptions | None = None, max_retries: int | None = None) -> CommitResult:
        """Change the namespace schema in one ``__manifest`` commit (spec "Schema"): ``add``
        nullable fields (fresh field ids, never reused), ``rename`` columns (ids kept, so
        partition specs on them keep working), ``drop`` columns (a dropped partition source
        reads as NULL) and ``widen`` types losslessly. Partition tables are not rewritten:
        reads present them in the new schema, writes and compaction bring them up to date
        (:mod:`lancepart.evolution.schema_evolution`, docs/schema-evolution.md). Returns the
        :class:`CommitResult`; ``details``: ``added``, ``renamed``, ``dropped``, ``widened`` (what
        changed), ``schema`` (the new schema's JSON) and ``max_field_id``.

        >>> result = ns.update_schema(add=[pa.field("score", pa.float64())], rename={"country": "region"},
        ...                           widen={"user_id": pa.int64()})
        >>> result.details["added"], result.details["renamed"], result.details["widened"]
        (['score'], {'country': 'region'}, {'user_id': 'int64'})
        >>> ns.schema.names
        ['id', 'event_date', 'region', 'user_id', 'amount', 'score']
        """
        self._writable("update_schema")
        from lancepart.evolution.schema_evolution import update_schema

        retries, props = commit_settings(commit, max_retries)
        result = update_schema(self._manifest, add, rename, drop, widen, max_retries=retries, properties=props)
        self.refresh()
        return result

    # ------------------------------------------------------------------ writing
    @keyword_only("mode", "batch_id")
    @public_operation("write")
    def write(
        self,
        data: pa.Table | pa.RecordBatchReader,
        *,
        mode: str = "append",
        where: str | None = None,
        expectations: list[dict] | None = None,
        chunk_rows: int = 1_000_000,
        max_rows_per_file: int = 1_048_576,
        index_on_write: bool = True,
        batch_id: str | None = None,
        commit: CommitOptions | None = None,
        max_retries: int | None = None,
    ) -> CommitResult:
        """Write ``data`` in-process (no Spark) and publish it in one ``__manifest`` commit.

        ``mode="append"`` adds rows. ``mode="overwrite"`` is a **dynamic partition overwrite**:
        only the partitions the input has rows for are replaced, every other partition keeps its
        rows (:meth:`dynamic_partition_overwrite`; to replace the whole namespace use
        :meth:`overwrite`). ``mode="overwrite", where=filter`` replaces exactly the rows matching
        ``filter`` (replace-where, :meth:`overwrite`). A ``batch_id`` that is already published
        makes this a no-op returning ``skipped=True``. ``expectations``: a data-quality gate run
        first; a ``RecordBatchReader`` is read in chunks of ``chunk_rows``; ``index_on_write``
        keeps the declared indexes of the touched tables up to date. ``commit``: a
        :class:`~lancepart.arguments.CommitOptions` (``max_retries``, ``custom_metadata``).

        >>> rows = pa.table({"id": [7], "event_date": [date(2025, 12, 12)], "country": ["US"]})
        >>> ns.write(rows, batch_id="2025-12-12").rows_written
        1
        >>> ns.write(rows, batch_id="2025-12-12").skipped    # published already: nothing written
        True
        """
        self._writable("write")
        retries, props = commit_settings(commit, max_retries)
        if where is not None:  # replace-where: docs/merge.md
            if mode != "overwrite":
                raise InvalidArgumentError(f"where= replaces the rows it matches: it needs mode='overwrite', "
                                           f"got mode={mode!r}")
            given = {"expectations": expectations is not None, "chunk_rows": chunk_rows != 1_000_000,
                     "index_on_write": index_on_write is not True}
            if any(given.values()):
                raise InvalidArgumentError(f"write(mode='overwrite', where=...) does not take "
                                           f"{sorted(k for k, v in given.items() if v)}")
            return self._replace_where(data, where, max_rows_per_file, batch_id, retries, props)
        from lancepart.write.local import write_local

        result = write_local(self, data, mode=mode, batch_id=batch_id, chunk_rows=chunk_rows,
                             max_rows_per_file=max_rows_per_file, max_retries=retries, expectations=expectations,
                             index_on_write=index_on_write, properties=props)
        self._follow()
        return result

    @keyword_only()
    @public_operation("overwrite")
    def overwrite(
        self,
        data: pa.Table | pa.RecordBatchReader,
        *,
        where: str = "TRUE",
        max_rows_per_file: int = 1_048_576,
        batch_id: str | None = None,
        commit: CommitOptions | None = None,
        max_retries: int | None = None,
    ) -> CommitResult:
        """Replace every published row matching ``where`` (default ``"TRUE"``: the whole
        namespace) with ``data``, in ONE ``__manifest`` commit: partitions the input has no rows
        for lose their matching rows too (pyiceberg's ``Table.overwrite(df)``, deltalake's
        ``mode="overwrite"``). Every input row must match ``where``
        (:class:`~lancepart.errors.RowsOutsideFilterError` otherwise, nothing published);
        ``details["rows_deleted"]``. The same commit as ``write(data, mode="overwrite",
        where=...)`` (replace-where, docs/merge.md); to replace only the partitions the input
        touches use :meth:`dynamic_partition_overwrite`.

        >>> # ns.overwrite(day_rows, where="event_date = DATE '2025-12-10'", batch_id="2025-12-10")
        """
        self._writable("overwrite")
        retries, props = commit_settings(commit, max_retries)
        return self._replace_where(data, where, max_rows_per_file, batch_id, retries, props)

    @keyword_only()
    @public_operation("dynamic_partition_overwrite")
    def dynamic_partition_overwrite(
        self,
        data: pa.Table | pa.RecordBatchReader,
        *,
        expectations: list[dict] | None = None,
        chunk_rows: int = 1_000_000,
        max_rows_per_file: int = 1_048_576,
        index_on_write: bool = True,
        batch_id: str | None = None,
        commit: CommitOptions | None = None,
        max_retries: int | None = None,
    ) -> CommitResult:
        """Replace the partitions ``data`` has rows for, and only those: every other partition
        keeps its rows (pyiceberg's name for it; the same as ``write(data, mode="overwrite")``).
        To replace the whole namespace (or every row a filter matches) use :meth:`overwrite`.

        >>> # ns.dynamic_partition_overwrite(day_rows, batch_id="2025-12-10-rerun")
        """
        return self.write(data, mode="overwrite", expectations=expectations, chunk_rows=chunk_rows,
                          max_rows_per_file=max_rows_per_file, index_on_write=index_on_write, batch_id=batch_id,
                          commit=commit, max_retries=max_retries)

    def _replace_where(self, data: Any, where: Any, max_rows_per_file: int, batch_id: str | None, max_retries: int,
                       properties: Mapping[str, str]) -> CommitResult:
        from lancepart.write.merge import replace_where

        result = replace_where(self, data, where, batch_id=batch_id, max_retries=max_retries,
                               max_rows_per_file=max_rows_per_file, properties=properties)
        self._follow()
        return result

    # ------------------------------------------------------------------ reading
    @keyword_only()
    @public_operation("partitions", publishes=False)
    def partitions(self, filter: str | None = None) -> list[PartitionInfo]:
        """Published partition tables that may hold rows matching ``filter`` (a SQL boolean
        expression over source columns, as DataFusion parses it). Pruning projects the filter
        onto every partition field of every spec version and queries ``__manifest``
        (spec "Partition Pruning", Appendix D); a partition is dropped only when it provably
        holds no matching row.

        >>> [p.values for p in ns.partitions("event_date = DATE '2025-12-10' AND country = 'US'")]
        [{'event_date': datetime.date(2025, 12, 10)}]
        """
        from lancepart.arguments import check_filter

        filter = check_filter(filter)
        if filter is None:
            tables = self._snapshot.table_pins()
        else:
            from lancepart.read.manifest_query import prune

            tables = prune(filter, self._schema, self._specs, self._snapshot.pin_rows()).kept
        return self._partition_infos(tables)

    def _partition_infos(self, tables: pa.Table) -> list[PartitionInfo]:
        """:class:`PartitionInfo` of each partition table row of ``tables`` (``__manifest`` rows)."""
        cols = ["object_id", "location", "read_version", "read_branch", "read_tag"]
        partition_values = {c: _py_values(tables.column(c)) for c in tables.column_names
                            if c.startswith("partition_field_")}
        out = []
        for i, row in enumerate(tables.select(cols).to_pylist()):  # one row per partition table
            spec_id = _ids.partition_spec_id(row["object_id"])
            if spec_id is None:
                continue
            spec = self._specs.get(spec_id)
            values = {f.field_id: partition_values[f.column_name][i] if f.column_name in partition_values else None
                      for f in spec.fields} if spec else {}
            out.append(PartitionInfo(
                object_id=row["object_id"], location=row["location"], spec_id=spec_id, values=values,
                read_version=row["read_version"], read_branch=row["read_branch"], read_tag=row["read_tag"],
            ))
        return out

    @keyword_only()
    @public_operation("explain", publishes=False)
    def explain(self, filter: str | None) -> str:
        """For ``filter``: per spec version, the projected partition predicate and how many
        partitions are kept and pruned, then the ``__manifest`` query and the residual filter."""
        from lancepart.arguments import check_filter
        from lancepart.read.manifest_query import prune

        return prune(check_filter(filter), self._schema, self._specs, self._snapshot.pin_rows()).explain()

    @keyword_only()
    @public_operation("to_table", publishes=False)
    def to_table(self, filter: str | None = None, columns: Sequence[str] | None = None) -> pa.Table:
        """The published snapshot (every table at its ``read_version``/branch/tag) as one table:
        only partitions that can match ``filter`` are read, an inclusive form of the filter and
        the ``columns`` projection are pushed into each Lance scan, and the filter is applied
        exactly (DataFusion semantics) to what was read.

        >>> ns.to_table("event_date = DATE '2025-12-10' AND country = 'US'", columns=["id"]).to_pylist()
        [{'id': 3}]
        """
        from lancepart.read.snapshot import scan

        # read whole, with more tables in flight than a stream (to_batches) keeps
        parts, filter, scan_filter = self.scan_plan(filter)
        return scan(self.root, parts, self._schema, filter=filter, columns=columns,
                    storage_options=self.storage_options, scan_filter=scan_filter,
                    namespace_md=self._snapshot.metadata)

    @keyword_only()
    @public_operation("to_batches", publishes=False)
    def to_batches(self, filter: str | None = None, columns: Sequence[str] | None = None, *,
                   batch_size: int | None = None) -> pa.RecordBatchReader:
        """The rows :meth:`to_table` returns, as a stream (a ``pa.RecordBatchReader``): partition
        table after partition table at its published version, pruned through ``__manifest``, the
        filter applied exactly batch by batch. A few tables are opened and read ahead on threads;
        memory stays flat whatever the size of the namespace. The snapshot is the handle's at the
        call; reading the stream later still reads it (cleanup keeps it while it is retained).
        ``batch_size``: rows per batch Lance reads (batches after the filter may be smaller).

        >>> sum(batch.num_rows for batch in ns.to_batches("country = 'US'", columns=["id", "amount"]))
        3
        """
        from lancepart.read.engines import typed_reader
        from lancepart.read.snapshot import scan_stream

        parts, filter, scan_filter = self.scan_plan(filter)
        reader = scan_stream(self.root, parts, self._schema, filter=filter, columns=columns,
                             storage_options=self.storage_options, scan_filter=scan_filter,
                             namespace_md=self._snapshot.metadata, batch_size=batch_size)
        return typed_reader(reader, "to_batches", self.root)

    @keyword_only()
    @public_operation("to_pandas", publishes=False)
    def to_pandas(self, filter: str | None = None, columns: Sequence[str] | None = None) -> pandas.DataFrame:
        """:meth:`to_table` as a pandas DataFrame."""
        return self.to_table(filter, columns).to_pandas()

    @keyword_only()
    @public_operation("to_polars", publishes=False)
    def to_polars(self, filter: str | None = None, columns: Sequence[str] | None = None) -> polars.DataFrame:
        """:meth:`to_table` as a Polars DataFrame (the ``lancepart[polars]`` extra;
        :class:`MissingDependencyError` naming it when Polars is not installed)."""
        from lancepart.read.engines import require, to_polars

        require("polars", "polars")
        return to_polars(self.to_table(filter, columns))

    @keyword_only()
    @public_operation("scan_polars", publishes=False)
    def scan_polars(self, filter: str | None = None, columns: Sequence[str] | None = None) -> polars.LazyFrame:
        """A Polars ``LazyFrame`` over the snapshot of this call (``pl.scan_pyarrow_dataset`` of
        :meth:`to_pyarrow_dataset`): the filters of the query that Polars pushes down prune
        partitions, and nothing is read before ``collect``. Columns in the types of
        :meth:`to_polars` (a ``decimal256`` of at most 38 digits as ``decimal128``, a fixed-offset
        time zone as UTC); the ``lancepart[polars]`` extra.

        >>> import polars as pl
        >>> ns.scan_polars(columns=["id", "country"]).filter(pl.col("country") == "US").collect()["id"].to_list()
        [1, 3, 5]
        """
        from lancepart.read.engines import require
        from lancepart.read.pyarrow_dataset import NamespaceDataset

        pl = require("polars", "polars")
        return pl.scan_pyarrow_dataset(NamespaceDataset(self._pinned(), filter, columns, polars=True))

    @keyword_only()
    @public_operation("to_pyarrow_dataset", publishes=False)
    def to_pyarrow_dataset(self, filter: str | None = None, columns: Sequence[str] | None = None
                           ) -> pyarrow.dataset.Dataset:
        """The snapshot of this call as a ``pyarrow.dataset.Dataset`` (the rows matching
        ``filter``, projected on ``columns``) for engines that scan one: DuckDB
        (``duckdb.sql("SELECT ... FROM ds WHERE ...")``), Polars (``pl.scan_pyarrow_dataset``),
        pyarrow itself. The filter an engine hands its scanner (a pyarrow ``Expression``) prunes
        partitions through ``__manifest`` as far as it translates to SQL (comparisons of a column
        with a literal, ``is_in``, null checks, AND / OR / NOT: docs/reading.md) and is then
        applied by pyarrow to the rows read, so a scan returns what pyarrow returns over the
        same rows. Every scan streams the kept tables (memory flat) at the versions pinned now:
        later commits are not seen.

        >>> import pyarrow.compute as pc
        >>> ds = ns.to_pyarrow_dataset(columns=["id", "event_date", "country"])
        >>> ds.to_table(filter=pc.field("event_date") == date(2025, 12, 10), columns=["id", "country"]).to_pylist()
        [{'id': 3, 'country': 'US'}, {'id': 4, 'country': 'DE'}]
        >>> import duckdb
        >>> duckdb.sql("SELECT count(*) FROM ds WHERE country = 'US'").fetchall()
        [(3,)]
        """
        from lancepart.read.pyarrow_dataset import NamespaceDataset

        return NamespaceDataset(self._pinned(), filter, columns)

    def _pinned(self) -> PartitionedNamespace:
        """A read-only handle on this handle's snapshot, for a reader that must keep reading it
        after this handle moves on (its own commits, ``refresh``)."""
        ns = PartitionedNamespace(self.root, self._manifest, self._snapshot)
        ns._read_only = True
        return ns

    @keyword_only("connection")
    @public_operation("to_duckdb", publishes=False)
    def to_duckdb(self, table_name: str, filter: str | None = None, columns: Sequence[str] | None = None, *,
                  connection: duckdb.DuckDBPyConnection | None = None) -> duckdb.DuckDBPyConnection:
        """Register the snapshot's rows matching ``filter`` in DuckDB as ``table_name`` (on
        ``connection``, default DuckDB's default connection, which ``duckdb.sql`` uses) and return
        the connection: :meth:`to_pyarrow_dataset`, so every query over it streams the partitions
        of the snapshot of this call again (memory flat), pruned by the part of its ``WHERE``
        DuckDB pushes down; the ``lancepart[duckdb]`` extra. DuckDB tables have at least one
        column: ``columns=[]`` is :class:`InvalidArgumentError`.

        >>> import duckdb
        >>> con = ns.to_duckdb("events", "country = 'US'", connection=duckdb.connect())
        >>> con.sql("SELECT count(*) FROM events").fetchall()
        [(3,)]
        """
        from lancepart.read.engines import check_duckdb_target, to_duckdb
        from lancepart.read.pyarrow_dataset import NamespaceDataset

        check_duckdb_target(table_name, connection)
        dataset = NamespaceDataset(self._pinned(), filter, columns)
        if not dataset.schema.names:
            raise InvalidArgumentError("columns=[]: a DuckDB table needs at least one column; name one in columns "
                                       "(or count rows with ns.to_table(filter, columns=[]).num_rows)")
        return to_duckdb(dataset, table_name, connection)

    @keyword_only("table", "ctx")
    @public_operation("sql", publishes=False)
    def sql(self, query: str, *, table: str = "t", ctx: datafusion.SessionContext | None = None
            ) -> datafusion.DataFrame:
        """Run the DataFusion SQL ``query`` with the namespace as ``table`` and return the
        ``datafusion.DataFrame`` (``.to_arrow_table()``, ``.to_pandas()``, ...). The predicate the
        query applies to ``table`` prunes partitions through ``__manifest`` before anything is
        read; DataFusion then runs the whole query, the kept tables streamed into it when the
        DataFrame is collected (it reads the snapshot of this call, docs/reading.md). Queries
        only (SELECT / WITH): DDL, DML and statements (``COPY``, ``CREATE``, ``INSERT``,
        ``DROP``, ``SET``, ...) are :class:`InvalidArgumentError` and nothing of them runs.
        ``ctx``: a ``SessionContext`` of yours whose tables and UDFs the query may use; the
        namespace is ``table`` in it only while the query is planned, and it keeps the tables it
        had (one of its own named ``table`` included).

        >>> ns.sql("SELECT country, sum(amount) AS amount FROM events WHERE event_date = DATE '2025-12-10' "
        ...        "GROUP BY country ORDER BY country", table="events").to_arrow_table().to_pylist()
        [{'country': 'DE', 'amount': 5.5}, {'country': 'US', 'amount': 30.0}]
        """
        from lancepart.read.sql import sql

        return sql(self._pinned(), query, table, ctx)

    @keyword_only()
    @public_operation("changes", publishes=False)
    def changes(self, start_version: int, end_version: int | None = None, filter: str | None = None,
                columns: Sequence[str] | None = None) -> pa.RecordBatchReader:
        """The change feed: the rows inserted and deleted by each ``__manifest`` commit after
        ``start_version`` up to ``end_version`` (default: this handle's version), streamed commit
        by commit, with ``_change_type`` (``insert``, ``delete``, and for a merge
        ``update_preimage`` / ``update_postimage``), ``_commit_version`` and
        ``_commit_timestamp``. Compaction, index builds and schema upgrades change nothing; a
        row moved to another partition is a delete and an insert of the same commit. A range a
        cleanup has cut is :class:`SnapshotExpiredError` naming the oldest version it reaches.
        ``filter`` prunes through ``__manifest`` and keeps the changed rows matching it.

        >>> last_seen = ns.manifest_version
        >>> _ = ns.delete("id = 1")
        >>> ns.changes(last_seen, filter="country = 'US'").read_all().select(["id", "_change_type"]).to_pylist()
        [{'id': 1, '_change_type': 'delete'}]
        """
        from lancepart.read.changes import change_stream
        from lancepart.read.engines import typed_reader

        return typed_reader(change_stream(self, start_version, end_version, filter=filter, columns=columns),
                            "changes", self.root)

    @keyword_only()
    @public_operation("scan_plan", publishes=False)
    def scan_plan(self, filter: str | None) -> tuple[list[PartitionInfo], str | None, str | None]:
        """What a read of ``filter`` scans, from one pruning pass over ``__manifest``: the kept
        partition tables, the filter (``None`` when blank) and its inclusive form to push into
        each Lance scanner (``None`` without a filter). ``to_table``, ``lancepart.spark.read``
        and ``lancepart.spark.join`` all read through it.

        >>> parts, filter, scan_filter = ns.scan_plan("event_date = DATE '2025-12-10'")
        >>> [p.values["event_date"].isoformat() for p in parts], scan_filter
        (['2025-12-10'], "event_date = DATE '2025-12-10'")
        """
        from lancepart.arguments import check_filter

        filter = check_filter(filter)
        if filter is None:
            return self.partitions(), None, None
        cached = self._plans.get(filter)  # per snapshot: _load starts a new cache
        if cached is not None:
            return list(cached[0]), cached[1], cached[2]
        from lancepart.read.manifest_query import prune

        result = prune(filter, self._schema, self._specs, self._snapshot.pin_rows())
        plan = (self._partition_infos(result.kept), filter, result.scan_filter)
        if len(self._plans) >= _PLAN_CACHE:
            self._plans.pop(next(iter(self._plans)))
        self._plans[filter] = plan
        return list(plan[0]), plan[1], plan[2]

    def _published_dataset(self, info: PartitionInfo) -> Any:
        """The partition table ``info`` at its published version, kept open for the next call
        (published versions never change, and an open dataset keeps its index and metadata caches
        warm: repeated searches do not reload an index); None for a declared-only table."""
        from lancepart.read.snapshot import is_declared, open_published

        if is_declared(info):  # reads the latest version: never cached
            return open_published(self.root, info, self.storage_options)
        key = (info.location, info.read_version, info.read_branch, info.read_tag)
        with self._datasets_lock:
            ds = self._datasets.get(key)
            if ds is not None:
                self._datasets.move_to_end(key)
                return ds
        ds = open_published(self.root, info, self.storage_options)
        with self._datasets_lock:
            self._datasets[key] = ds
            while len(self._datasets) > _DATASET_CACHE:
                self._datasets.popitem(last=False)
        return ds

    @public_operation("search", publishes=False)
    def search(self, column: str, query: Any, k: int = 10, filter: str | None = None,
               columns: Sequence[str] | None = None, **params: Any) -> pa.Table:
        """The ``k`` published rows nearest to vector ``query`` in ``column`` among those matching
        ``filter``, with ``_distance`` sorted ascending: partitions are pruned with the filter, each
        kept table is searched at its published version (index or flat), the filter is applied
        exactly and the per-table results merged (:mod:`lancepart.read.search`). ``params``:
        ``metric`` (l2, cosine, dot), ``nprobes``, ``refine_factor``, ...

        >>> docs.search("embedding", [1, 0, 0, 0], k=2, filter="tenant = 'acme'", columns=["id"])["id"].to_pylist()
        [1, 3]
        """
        from lancepart.read.search import search

        return search(self, column, query, k, filter, columns=columns, **params)

    @keyword_only()
    @public_operation("search_text", publishes=False)
    def search_text(self, column: str, query: str, k: int = 10, filter: str | None = None,
                    columns: Sequence[str] | None = None) -> pa.Table:
        """The ``k`` published rows that match full-text ``query`` on ``column`` best (``_score``
        descending), among those matching ``filter``; each searched table needs an INVERTED index.

        >>> docs.search_text("body", "partitioned lance", k=5, columns=["id"])["id"].to_pylist()
        [1, 3, 4]
        """
        from lancepart.read.search import search_text

        return search_text(self, column, query, k, filter, columns=columns)

    # ------------------------------------------------------------------ maintenance
    @keyword_only("target_rows_per_fragment")
    @public_operation("compact")
    def compact(self, filter: str | None = None, *, target_rows_per_fragment: int = 1_048_576,
                min_small_fragments: int = 2, materialize_deletions_threshold: float = 0.1,
                compact_manifest_table: bool = True, commit: CommitOptions | None = None,
                max_retries: int | None = None) -> CommitResult:
        """Rewrite the small fragments (and materialise the deleted rows) of the partition tables
        ``filter`` selects, working on their published versions, and publish them in one
        ``__manifest`` commit that is safe beside live writers. Tables pinned by ``read_tag`` /
        ``read_branch`` are skipped. ``min_small_fragments``, ``materialize_deletions_threshold``,
        ``compact_manifest_table``: see :func:`lancepart.maintenance.compact.compact`.

        >>> _ = ns.write(pa.table({"id": [7], "event_date": [date(2025, 12, 10)], "country": ["US"]}))
        >>> result = ns.compact("event_date <= DATE '2025-12-10'")
        >>> result.partitions_touched, result.details["fragments_before"], result.details["fragments_after"]
        (1, 3, 2)
        """
        self._writable("compact")
        from lancepart.maintenance.compact import compact

        retries, props = commit_settings(commit, max_retries)
        result = compact(self, filter, target_rows_per_fragment, min_small_fragments=min_small_fragments,
                         materialize_deletions_threshold=materialize_deletions_threshold,
                         compact_manifest_table=compact_manifest_table, max_retries=retries, properties=props)
        self.refresh()
        return result

    @keyword_only()
    @public_operation("describe_namespace", publishes=False)
    def describe_namespace(self, id: Sequence[str]) -> dict[str, str]:
        """Runtime properties of a namespace (spec "Runtime Namespace Properties", Appendix E).

        ``[]`` is the root (its stored properties), ``["v<N>"]`` gives ``partition_spec``,
        ``["v<N>", id1, ...]`` gives ``partition.<field_id>`` for that level only.
        """
        id = list(id)
        if not id:
            return dict(self._snapshot.metadata)
        object_id = _ids.DELIMITER.join(id)
        rows = self._snapshot.rows
        i = self._snapshot.row_index().get(object_id)
        if i is None or rows.column("object_type")[i].as_py() != "namespace":
            raise NamespaceNotFoundError(f"namespace {object_id!r} does not exist in {self.root}")
        metadata = rows.column("metadata")[i].as_py()
        props = json.loads(metadata) if metadata else {}
        props = {k: v for k, v in props.items() if not k.startswith("lancepart.batch.")}  # bookkeeping of old writes
        if not id[0].startswith("v") or not id[0][1:].isdigit() or int(id[0][1:]) not in self._specs:
            return props
        spec = self._specs[int(id[0][1:])]
        level = len(id) - 1
        if level == 0:
            props["partition_spec"] = spec.to_json_string()
        elif level <= len(spec.fields):
            f = spec.fields[level - 1]
            value = rows.column(f.column_name)[i] if f.column_name in rows.column_names else None
            props[f"partition.{f.field_id}"] = _display(value, f.result_type)
        return props

    @keyword_only("dry_run")
    @public_operation("cleanup", outcome=_CLEANUP_OUTCOME)
    def cleanup(self, older_than: timedelta = timedelta(days=7), *, allow_short_retention: bool = False,
                max_workers: int = 8, dry_run: bool = False) -> CleanupStats:
        """Remove table and ``__manifest`` versions superseded more than ``older_than`` ago, files
        no version references and unreferenced partition table directories older than that;
        never what a ``read_version``, ``read_tag`` or ``read_branch`` pins
        (:mod:`lancepart.maintenance.cleanup`). ``dry_run=True`` only reports what would go.
        ``older_than`` below the retention floor (one hour unless the namespace raises it) raises
        :class:`~lancepart.errors.UnsafeRetentionError` unless ``allow_short_retention=True``.

        >>> ns.cleanup(timedelta(days=7), dry_run=True).versions_removed   # nothing is that old yet
        0
        """
        self._writable("cleanup")
        from lancepart.maintenance.cleanup import cleanup

        stats = cleanup(self.root, older_than, dry_run=dry_run, storage_options=self.storage_options,
                        allow_short_retention=allow_short_retention, max_workers=max_workers)
        self.refresh()
        return stats

    @public_operation("repair")
    def _repair_open(self, *, dry_run: bool = False, commit: CommitOptions | None = None,
                     max_retries: int | None = None) -> RepairReport:
        self._writable("repair")
        from lancepart.ops.repair import repair

        retries, props = commit_settings(commit, max_retries)
        report = repair(self._manifest, dry_run=dry_run, max_retries=retries, properties=props)
        if not dry_run:
            self.refresh()
        return report

    @classmethod
    @public_operation("repair", root_arg=1)
    def _repair_root(cls, root: str | os.PathLike[str], *, dry_run: bool = False,
                     storage_options: Mapping[str, str] | None = None, commit: CommitOptions | None = None,
                     max_retries: int | None = None) -> RepairReport:
        from lancepart.ops.repair import repair

        retries, props = commit_settings(commit, max_retries)
        return repair(Manifest(_resolve_root(root), storage_options), dry_run=dry_run, max_retries=retries,
                      properties=props)

    @keyword_only("dry_run")
    def _repair_on_class(cls, root: str | os.PathLike[str] | PartitionedNamespace, *, dry_run: bool = False,
                         storage_options: Mapping[str, str] | None = None, commit: CommitOptions | None = None,
                         max_retries: int | None = None) -> RepairReport:
        """Restore ``__manifest`` after a tool that knows only the directory namespace rewrote it
        without lancepart's columns (``read_version``, ``read_branch``, ``read_tag``,
        ``partition_field_*``): from the newest earlier version that has them, keeping the rows
        and table metadata that tool added, in one commit, and set the flag that makes Lance's
        DirectoryNamespace refuse to rewrite it again. Returns a
        :class:`lancepart.ops.repair.RepairReport`; ``dry_run=True`` only reports; ``commit``:
        :class:`~lancepart.arguments.CommitOptions` of the restoring commit.

        ``PartitionedNamespace.repair(root, storage_options=...)`` works on the root without opening
        it: what to use when ``open`` raises :class:`CorruptNamespaceError` for the lost columns.
        ``ns.repair()`` repairs the namespace a handle was opened on and refreshes the handle.

        >>> PartitionedNamespace.repair(ns.root, dry_run=True).columns_restored
        ()
        >>> ns.repair().needed
        False
        """
        if isinstance(root, PartitionedNamespace):  # PartitionedNamespace.repair(ns): the method called unbound
            return root._repair_open(dry_run=dry_run, commit=commit, max_retries=max_retries)
        return cls._repair_root(root, dry_run=dry_run, storage_options=storage_options, commit=commit,
                                max_retries=max_retries)

    @keyword_only("dry_run")
    def _repair_on_instance(self, *, dry_run: bool = False, commit: CommitOptions | None = None,
                            max_retries: int | None = None) -> RepairReport:
        return self._repair_open(dry_run=dry_run, commit=commit, max_retries=max_retries)

    _repair_on_instance.__doc__ = _repair_on_class.__doc__
    repair = _ClassOrInstanceMethod(_repair_on_class, _repair_on_instance)
    del _repair_on_class, _repair_on_instance

    @keyword_only("deep")
    @public_operation("verify", publishes=False)
    def verify(self, *, deep: bool = False) -> VerifyReport:
        """Check that everything published can be read and is what it claims to be: the
        ``__manifest`` columns, every table at its pinned version and every file it references,
        table schemas against the namespace schema and, with ``deep=True``, every row read and
        its partition values recomputed (:mod:`lancepart.maintenance.verify`). Never raises for
        a problem found: ``report.ok``, ``report.problems``.

        >>> report = ns.verify(deep=True)
        >>> report.ok, [p.kind for p in report.problems], report.rows_checked
        (True, [], 6)
        """
        from lancepart.maintenance.verify import verify

        return verify(self.root, self.storage_options, deep=deep, open_namespace=_open_for_verify)

    @keyword_only("dry_run")
    @public_operation("drop_partitions")
    def drop_partitions(self, filter: str, *, dry_run: bool = False, commit: CommitOptions | None = None,
                        max_retries: int | None = None) -> CommitResult:
        """Remove every partition ``filter`` selects entirely from ``__manifest`` in one publish
        (files stay for cleanup). The filter may only name identity-partitioned columns
        (:mod:`lancepart.maintenance.drop`); ``details["dropped"]`` lists what went.

        >>> ns.drop_partitions("event_date = DATE '2025-12-10'").partitions_touched
        1
        >>> ns.to_table(columns=["id"]).num_rows
        4
        """
        self._writable("drop_partitions")
        from lancepart.maintenance.drop import drop_partitions

        retries, props = commit_settings(commit, max_retries)
        result = drop_partitions(self, filter, dry_run=dry_run, max_retries=retries, properties=props)
        self.refresh()
        return result

    @keyword_only()
    @public_operation("delete")
    def delete(self, filter: str, *, commit: CommitOptions | None = None, max_retries: int | None = None
               ) -> CommitResult:
        """Delete every published row matching ``filter`` (SQL over source columns) in one publish:
        Lance deletions on the published version of each partition the pruner keeps, then one
        ``__manifest`` commit (:mod:`lancepart.maintenance.delete`); ``details["rows_deleted"]``.

        >>> ns.delete("user_id = 42").details["rows_deleted"]
        3
        """
        self._writable("delete")
        from lancepart.maintenance.delete import delete

        retries, props = commit_settings(commit, max_retries)
        result = delete(self, filter, max_retries=retries, properties=props)
        self.refresh()
        return result

    @keyword_only()
    @public_operation("rollback")
    def rollback(self, version: int, *, commit: CommitOptions | None = None, max_retries: int | None = None
                 ) -> CommitResult:
        """Publish the partition tables of ``__manifest`` version ``version`` as a new version:
        the namespace reads as that snapshot did (:mod:`lancepart.maintenance.rollback`). Table
        versions move forward to copies of the old ones; batch ids published since are recorded
        as undone, so their reruns publish again. Specs and schema are not rolled back.

        >>> ns.rollback(ns.history()[1].version).details["undone_batch_ids"]
        ['2025-12-11']
        """
        self._writable("rollback")
        from lancepart.maintenance.rollback import rollback

        retries, props = commit_settings(commit, max_retries)
        result = rollback(self, version, max_retries=retries, properties=props)
        self.refresh()
        return result

    @keyword_only("when_matched", "when_not_matched")
    @public_operation("merge")
    def merge(self, data: pa.Table | pa.RecordBatchReader, on: Sequence[str], *, when_matched: str = "update",
              when_not_matched: str = "insert", batch_id: str | None = None, commit: CommitOptions | None = None,
              max_retries: int | None = None) -> CommitResult:
        """Upsert ``data`` by the key columns ``on`` in one publish (:mod:`lancepart.write.merge`):
        published rows whose key is in the input are replaced (``when_matched="update"``, even
        into another partition) or kept (``"ignore"``); the other input rows are inserted
        (``when_not_matched="insert"``) or dropped (``"ignore"``). ``details["rows_updated"]``,
        ``details["rows_inserted"]``.

        >>> changes = pa.table({"id": [1, 7], "event_date": [date(2025, 12, 9), date(2025, 12, 12)],
        ...                     "country": ["US", "JP"], "user_id": [42, 3], "amount": [11.0, 3.0]}, schema=ns.schema)
        >>> result = ns.merge(changes, on=["id"])
        >>> result.details["rows_updated"], result.details["rows_inserted"]
        (1, 1)
        """
        self._writable("merge")
        from lancepart.write.merge import merge

        retries, props = commit_settings(commit, max_retries)
        result = merge(self, data, on, when_matched, when_not_matched, batch_id=batch_id, max_retries=retries,
                       properties=props)
        self.refresh()
        return result

    @keyword_only()
    @public_operation("update")
    def update(self, set: Mapping[str, str], filter: str | None = None, *, batch_id: str | None = None,
               commit: CommitOptions | None = None, max_retries: int | None = None) -> CommitResult:
        """Set columns to SQL expressions (DataFusion, over each row's old values) on every
        published row matching ``filter`` (every row when None), in one publish
        (:mod:`lancepart.write.update`): a row whose partition source changes moves to its new
        partition; rebased and retried like a merge; at most once with a ``batch_id``.
        ``details["rows_updated"]``. A column the namespace does not have, an expression that
        cannot be planned or cast to its column's type, or one that is not deterministic is
        :class:`InvalidArgumentError`, nothing read.

        >>> ns.update({"amount": "amount * 2", "country": "lower(country)"}, "id = 1").details["rows_updated"]
        1
        >>> ns.to_table("id = 1", columns=["amount", "country"]).to_pylist()
        [{'amount': 20.0, 'country': 'us'}]
        """
        self._writable("update")
        from lancepart.write.update import update

        retries, props = commit_settings(commit, max_retries)
        result = update(self, set, filter, batch_id=batch_id, max_retries=retries, properties=props)
        self.refresh()
        return result

    @public_operation("create_index")
    def create_index(self, column: str, index_type: str, *, name: str | None = None, replace: bool = False,
                     min_rows: int | None = None, commit: CommitOptions | None = None, max_retries: int | None = None,
                     **params: Any) -> CommitResult:
        """Declare a Lance index (vector: IVF_PQ, IVF_HNSW_SQ, ...; INVERTED; BTREE, BITMAP,
        LABEL_LIST) on ``column`` and build it on every published partition table of at least
        ``min_rows`` rows (default 10000), published in one ``__manifest`` commit; writes and
        compactions keep it up to date from then on (:mod:`lancepart.maintenance.indexes`, docs/indexes.md).

        >>> _ = docs.create_index("embedding", "IVF_PQ", num_partitions=16, num_sub_vectors=2)
        >>> [(i["name"], i["tables"], i["indexed"]) for i in docs.list_indexes()]  # tables under min_rows: none yet
        [('body_inverted', 2, 2), ('embedding_ivf_pq', 2, 0)]
        """
        self._writable("create_index")
        from lancepart.maintenance.indexes import create_index

        retries, props = commit_settings(commit, max_retries)
        result = create_index(self, column, index_type, name=name, replace=replace, min_rows=min_rows,
                              max_retries=retries, properties=props, **params)
        self.refresh()
        return result

    @keyword_only()
    @public_operation("drop_index")
    def drop_index(self, name: str, *, commit: CommitOptions | None = None, max_retries: int | None = None
                   ) -> CommitResult:
        """Remove the declared index ``name`` and drop it from every published partition table
        in one publish."""
        self._writable("drop_index")
        from lancepart.maintenance.indexes import drop_index

        retries, props = commit_settings(commit, max_retries)
        result = drop_index(self, name, max_retries=retries, properties=props)
        self.refresh()
        return result

    @keyword_only()
    @public_operation("list_indexes", publishes=False)
    def list_indexes(self) -> list[dict[str, Any]]:
        """The declared indexes with their coverage: ``tables``, ``above_min_rows``, ``indexed``,
        ``missing`` (object ids above the threshold without the index)."""
        from lancepart.maintenance.indexes import list_indexes

        return list_indexes(self)

    @keyword_only()
    @public_operation("add_constraint")
    def add_constraint(self, name: str, sql_expr: str, *, commit: CommitOptions | None = None,
                       max_retries: int | None = None) -> CommitResult:
        """Declare the CHECK constraint ``name``: every row of the namespace must make the
        DataFusion SQL expression ``sql_expr`` TRUE (FALSE and NULL break it). The published
        rows are checked first (rows that break it: :class:`ConstraintViolationError` naming a
        few, nothing added); from then on every write path checks the rows it adds before it
        publishes anything. Kept in ``__manifest``, so every writer of the namespace sees it;
        listed by ``describe()["constraints"]``. Docs: docs/constraints.md.

        >>> _ = ns.add_constraint("amount_nonneg", "amount >= 0")
        >>> ns.write(pa.table({"id": [99], "event_date": [date(2025, 12, 10)], "country": ["US"],
        ...                    "amount": [-1.0]}))  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        lancepart.errors.ConstraintViolationError: write: 1 row(s) break constraint 'amount_nonneg' (amount >= 0), ...
        >>> _ = ns.drop_constraint("amount_nonneg")
        """
        self._writable("add_constraint")
        from lancepart.write.constraints import add_constraint

        retries, props = commit_settings(commit, max_retries)
        return add_constraint(self, name, sql_expr, max_retries=retries, properties=props)

    @keyword_only()
    @public_operation("drop_constraint")
    def drop_constraint(self, name: str, *, commit: CommitOptions | None = None, max_retries: int | None = None
                        ) -> CommitResult:
        """Remove the CHECK constraint ``name`` (:class:`InvalidArgumentError` naming the declared
        ones if there is none of that name); writes stop checking it from the next snapshot."""
        self._writable("drop_constraint")
        from lancepart.write.constraints import drop_constraint

        retries, props = commit_settings(commit, max_retries)
        return drop_constraint(self, name, max_retries=retries, properties=props)

    @keyword_only()
    @public_operation("list_constraints", publishes=False)
    def list_constraints(self) -> dict[str, str]:
        """The CHECK constraints declared (``ns.add_constraint``) as of this handle's snapshot:
        name -> expression. ``lancepart describe`` lists them too."""
        from lancepart.model.constraints import constraints

        return constraints(self.snapshot().metadata)

    def __repr__(self) -> str:
        from lancepart.redact import redact  # a root's URL userinfo is never shown

        return (f"PartitionedNamespace({redact(self.root)!r}, specs={sorted(self._specs)}, "
                f"manifest_version={self._snapshot.version})")


def _open_for_verify(root: str, storage_options: Mapping[str, str] | None) -> PartitionedNamespace:
    return PartitionedNamespace.open(root, storage_options=storage_options)


_handle.open_handle = PartitionedNamespace.open  # how the modules under this one reopen a handle (lancepart.handle)
