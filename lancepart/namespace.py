"""PartitionedNamespace: create / open / describe a partitioned directory namespace.

Spec: spec/partitioning.md "Metadata Definition", "Physical Layout and Naming",
"Runtime Namespace Properties", Appendices A, B, C, E; DESIGN-NOTES §4–§7.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from lancepart import ids as _ids
from lancepart.errors import CorruptNamespaceError, InvalidSpecError, NamespaceExistsError, NamespaceNotFoundError
from lancepart.manifest import (
    Manifest,
    ManifestSnapshot,
    manifest_schema,
    metadata_json,
    normalize_root,
    rows_from_records,
)
from lancepart.results import CommitResult, PartitionInfo
from lancepart.spec import PartitionSpec, assign_field_ids, schema_from_json, schema_to_json

SCHEMA_KEY = "schema"
SPEC_KEY_PREFIX = "partition_spec_v"


def _partition_columns(specs: Sequence[PartitionSpec]) -> list[pa.Field]:
    cols: dict[str, pa.Field] = {}
    for spec in specs:
        for f in spec.fields:
            cols.setdefault(f.column_name, pa.field(f.column_name, f.result_type, nullable=True))
    return list(cols.values())


def _display(value: Any, type_: pa.DataType) -> str | None:
    """A partition value as a runtime property string (Appendix E: ``2025-12-10``, ``2025``, ``US``)."""
    if value is None:
        return None
    return pc.cast(pa.array([value], type_), pa.utf8())[0].as_py()


class PartitionedNamespace:
    """A partitioned namespace rooted at a directory or URI.

    >>> import tempfile, pyarrow as pa
    >>> schema = pa.schema([("id", pa.int64()), ("country", pa.utf8())])
    >>> spec = {"id": 1, "fields": [{"field_id": "country", "source_ids": [1],
    ...          "transform": {"type": "identity"}, "result_type": {"type": "utf8"}}]}
    >>> ns = PartitionedNamespace.create(tempfile.mkdtemp() + "/ns", schema, spec)
    >>> ns.current_spec.id
    1
    """

    def __init__(self, root: str, manifest: Manifest, snapshot: ManifestSnapshot) -> None:
        self.root = root
        self.storage_options = manifest.storage_options
        self._manifest = manifest
        self._load(snapshot)

    # ------------------------------------------------------------------ construction
    @classmethod
    def create(
        cls,
        root: str | os.PathLike[str],
        schema: pa.Schema,
        spec: PartitionSpec | Mapping[str, Any] | str,
        storage_options: Mapping[str, str] | None = None,
    ) -> PartitionedNamespace:
        """Create a partitioned namespace: ``__manifest`` with the ``v<id>`` row, the
        ``schema`` and ``partition_spec_v<id>`` root properties and the manifest indexes.

        Raises :class:`NamespaceExistsError` when ``root`` already has a ``__manifest``.
        """
        from lancepart.transforms import validate_spec  # engine-level checks (types, expressions)

        root_s = normalize_root(root)
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
        except (OSError, ValueError) as e:
            if manifest.exists() and "exist" in str(e).lower():
                raise NamespaceExistsError(f"a namespace already exists at {root_s}") from None
            raise
        return cls(root_s, manifest, snapshot)

    @classmethod
    def open(cls, root: str | os.PathLike[str], storage_options: Mapping[str, str] | None = None
             ) -> PartitionedNamespace:
        """Open an existing partitioned namespace; :class:`NamespaceNotFoundError` if there is none."""
        root_s = normalize_root(root)
        manifest = Manifest(root_s, storage_options)
        return cls(root_s, manifest, manifest.snapshot())

    def refresh(self) -> PartitionedNamespace:
        """Reload ``__manifest`` (specs, schema and rows) at its latest version."""
        self._load(self._manifest.snapshot())
        return self

    def _load(self, snap: ManifestSnapshot) -> None:
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
        self._specs = dict(sorted(specs.items()))
        self._snapshot = snap

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

    # ------------------------------------------------------------------ writing
    def write(
        self,
        data: pa.Table | pa.RecordBatchReader,
        mode: str = "append",
        batch_id: str | None = None,
        **options: Any,
    ) -> CommitResult:
        """Write ``data`` in-process (no Spark) and publish it in one ``__manifest`` commit.

        ``mode="append"`` adds rows; ``mode="overwrite"`` replaces exactly the partitions the
        input touches (dynamic partition overwrite). A ``batch_id`` that is already
        published makes this a no-op returning ``skipped=True``.

        >>> # ns.write(pa.table({"id": [1], "event_date": [...], "country": ["US"]}), batch_id="2025-12-10")
        """
        from lancepart.write.local import write_local

        result = write_local(self, data, mode=mode, batch_id=batch_id, **options)
        self.refresh()
        return result

    # ------------------------------------------------------------------ reading
    def partitions(self, filter: str | None = None) -> list[PartitionInfo]:
        """Published partition tables that may hold rows matching ``filter`` (a SQL boolean
        expression over source columns). Until pruning lands every partition is kept, which
        is always correct."""
        tables = self._snapshot.tables()
        out = []
        for row in tables.to_pylist():  # one row per partition table
            spec_id = int(row["object_id"].split(_ids.DELIMITER, 1)[0][1:])
            spec = self._specs.get(spec_id)
            values = {f.field_id: row.get(f.column_name) for f in spec.fields} if spec else {}
            out.append(PartitionInfo(
                object_id=row["object_id"], location=row["location"], spec_id=spec_id, values=values,
                read_version=row["read_version"], read_branch=row["read_branch"], read_tag=row["read_tag"],
            ))
        return out

    def to_table(self, filter: str | None = None, columns: Sequence[str] | None = None) -> pa.Table:
        """The published snapshot (every table at its ``read_version``/branch/tag) as one table,
        with ``filter`` and ``columns`` pushed into each partition scan."""
        from lancepart.read.snapshot import scan

        return scan(self.root, self.partitions(filter), self._schema, filter=filter, columns=columns,
                    storage_options=self.storage_options)

    def describe_namespace(self, id: Sequence[str]) -> dict[str, str]:
        """Runtime properties of a namespace (spec "Runtime Namespace Properties", Appendix E).

        ``[]`` is the root (its stored properties), ``["v<N>"]`` gives ``partition_spec``,
        ``["v<N>", id1, ...]`` gives ``partition.<field_id>`` for that level only.
        """
        id = list(id)
        if not id:
            return dict(self._snapshot.metadata)
        object_id = _ids.DELIMITER.join(id)
        row = self._snapshot.row(object_id)
        if row is None or row["object_type"] != "namespace":
            raise NamespaceNotFoundError(f"namespace {object_id!r} does not exist in {self.root}")
        props = json.loads(row["metadata"]) if row["metadata"] else {}
        if not id[0].startswith("v") or not id[0][1:].isdigit() or int(id[0][1:]) not in self._specs:
            return props
        spec = self._specs[int(id[0][1:])]
        level = len(id) - 1
        if level == 0:
            props["partition_spec"] = spec.to_json_string()
        elif level <= len(spec.fields):
            f = spec.fields[level - 1]
            props[f"partition.{f.field_id}"] = _display(row.get(f.column_name), f.result_type)
        return props

    def __repr__(self) -> str:
        return (f"PartitionedNamespace({self.root!r}, specs={sorted(self._specs)}, "
                f"manifest_version={self._snapshot.version})")

