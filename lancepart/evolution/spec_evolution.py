"""Partition evolution: add ``partition_spec_v<N+1>`` (spec "Partition Evolution").

An evolution takes three ``__manifest`` commits, each idempotent, so a crash between any two
leaves a namespace that readers and writers handle and that the next evolution finishes:

1. **Columns** — Lance schema evolution adds the new spec's ``partition_field_<field_id>``
   columns, all NULL (a metadata-only ``Merge``; it conflicts with every ``__manifest``
   ``Update``, so it is linearised with publishes; on conflict it is retried). Columns that
   no spec names yet are harmless.
2. **Row** — one ``Manifest.update`` adds the ``v<N+1>`` namespace row (spec "Physical Layout
   and Naming"), with the spec's JSON as its stored ``partition_spec`` property. The spec is
   *pending*: writers still use ``v<N>`` because the root property does not exist yet.
3. **Publish** — the root property ``partition_spec_v<N+1>`` is set; from then on new writes
   use the new spec (:attr:`PartitionedNamespace.current_spec` is the highest version).

A pending ``v<M>`` row (its creator died after step 2, or a concurrent evolution is between
steps 2 and 3) is rolled forward first: its spec is published, and the new spec becomes
``v<M+1>`` with field ids reused against it too. Nothing about data changes: old partitions
stay under their spec version and are still read and pruned through it.
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa

from lancepart.errors import CommitConflictError, CorruptNamespaceError, InvalidSpecError
from lancepart.model import ids as _ids
from lancepart.model.spec import PartitionField, PartitionSpec, field_id_of
from lancepart.results import EvolveResult
from lancepart.storage.manifest import Manifest, ManifestChanges, ManifestSnapshot, metadata_json

log = logging.getLogger("lancepart.evolution")

SPEC_PROPERTY = "partition_spec"  # the v<N> row's stored copy of its spec (runtime property name, Appendix E)
_SPEC_KEY = re.compile(r"^partition_spec_v(\d+)$")


def _published_specs(snap: ManifestSnapshot) -> dict[int, PartitionSpec]:
    return {int(m.group(1)): PartitionSpec.from_json(v) for k, v in snap.metadata.items() if (m := _SPEC_KEY.match(k))}


def _pending_specs(snap: ManifestSnapshot, published: Mapping[int, PartitionSpec]) -> dict[int, PartitionSpec]:
    """``v<M>`` namespace rows that carry a ``partition_spec`` property whose root property is missing."""
    rows = snap.rows
    out: dict[int, PartitionSpec] = {}
    for oid, otype, md in zip(rows.column("object_id").to_pylist(), rows.column("object_type").to_pylist(),
                              rows.column("metadata").to_pylist(), strict=True):
        if otype != "namespace" or _ids.DELIMITER in oid or not re.fullmatch(r"v\d+", oid) or not md:
            continue
        if int(oid[1:]) in published:
            continue
        raw = json.loads(md).get(SPEC_PROPERTY)
        if raw is not None:
            out[int(oid[1:])] = PartitionSpec.from_json(raw)
    return out


def _source_name(schema: pa.Schema, source_id: int) -> str:
    for f in schema:
        if field_id_of(f) == source_id:
            return re.sub(r"[^A-Za-z0-9_]", "_", f.name)
    return f"col{source_id}"


def _default_field_id(item: Mapping[str, Any], schema: pa.Schema) -> str:
    """A readable field id for a field given without one: ``<source>_<transform>[_<param>]``."""
    sources = "_".join(_source_name(schema, s) for s in item.get("source_ids") or [])
    tf = item.get("transform")
    if tf:
        param = tf.get("num_buckets", tf.get("width"))
        kind = tf.get("type", "transform")
        return f"{sources}_{kind}" + (f"_{param}" if param is not None else "") if kind != "identity" else sources
    return f"{sources}_expr"


def resolve_fields(fields: Sequence[PartitionField | Mapping[str, Any]], schema: pa.Schema,
                   existing: Sequence[PartitionSpec]) -> list[PartitionField]:
    """The new spec's fields with spec "Field ID Reuse" applied: a field with the source_ids and
    transform (or expression) of an earlier field takes that field's ``field_id`` (when it came
    without one, or with the same one); a field without ``field_id`` otherwise gets a fresh,
    readable one that no earlier field uses. Giving an earlier field's definition a different
    ``field_id``, or an earlier ``field_id`` to a different definition, is an
    :class:`InvalidSpecError` (:func:`lancepart.model.spec.check_field_id_reuse`)."""
    known: dict[str, PartitionField] = {}
    for spec in existing:
        for f in spec.fields:
            known.setdefault(f.field_id, f)
    out: list[PartitionField] = []
    taken = set(known)
    for item in fields:
        if isinstance(item, PartitionField):
            out.append(item)
            taken.add(item.field_id)
            continue
        if not isinstance(item, Mapping):
            raise InvalidSpecError(f"partition field must be a PartitionField or a JSON object, got {item!r}")
        obj = dict(item)
        if obj.get("field_id") is None:
            probe = PartitionField.from_json({**obj, "field_id": "probe"})
            reuse = next((f.field_id for f in known.values() if f.same_definition(probe)), None)
            if reuse is None:
                base = _default_field_id(obj, schema)
                reuse, n = base, 2
                while reuse in taken:
                    reuse, n = f"{base}_{n}", n + 1
            obj["field_id"] = reuse
        f = PartitionField.from_json(obj)
        out.append(f)
        taken.add(f.field_id)
    ids = [f.field_id for f in out]
    dup = sorted({i for i in ids if ids.count(i) > 1})
    if dup:
        raise InvalidSpecError(f"partition fields {dup} appear more than once in the new spec")
    return out


def _add_columns(manifest: Manifest, spec: PartitionSpec, max_retries: int) -> None:
    """Step 1: the spec's partition columns, all NULL, through Lance schema evolution."""
    def mutate(snap: ManifestSnapshot) -> tuple[ManifestChanges | None, None]:
        have = {f.name: f.type for f in snap.schema}
        missing = []
        for f in spec.fields:
            if f.column_name not in have:
                missing.append(pa.field(f.column_name, f.result_type, nullable=True))
            elif have[f.column_name] != f.result_type:
                raise InvalidSpecError(
                    f"partition field {f.field_id!r}: __manifest column {f.column_name} has type "
                    f"{have[f.column_name]}, the field's result_type is {f.result_type}")
        return (ManifestChanges(columns=tuple(missing)) if missing else None), None

    manifest.update(mutate, max_retries=max_retries, what=f"partition columns of v{spec.id}")


def _add_row(manifest: Manifest, spec: PartitionSpec, max_retries: int,
             properties: Mapping[str, str] | None = None) -> ManifestSnapshot:
    """Step 2: the ``v<N>`` namespace row holding the pending spec (no-op when it is there)."""

    def mutate(snap: ManifestSnapshot):
        if spec.key in snap.metadata:
            raise _Taken(spec.id)  # a concurrent evolution published this id
        i = snap.row_index().get(spec.namespace)
        if i is not None:
            md = snap.rows.column("metadata")[i].as_py()
            stored = json.loads(md).get(SPEC_PROPERTY) if md else None
            if stored is not None and PartitionSpec.from_json(stored) == spec:
                return None, None  # already there (a rerun)
            raise _Taken(spec.id)
        row = {"object_id": spec.namespace, "object_type": "namespace",
               "metadata": metadata_json({SPEC_PROPERTY: spec.to_json_string()})}
        new = pa.Table.from_pylist([row], schema=snap.rows.schema)
        return pa.concat_tables([snap.rows, new]), None

    snap, _, _ = manifest.update(mutate, max_retries=max_retries, what=f"evolve to v{spec.id}",
                                 transaction_properties=properties)
    return snap


class _Taken(Exception):
    """Internal: spec id already names another spec (a concurrent evolution got there first)."""


def _publish(manifest: Manifest, spec: PartitionSpec, max_retries: int,
             properties: Mapping[str, str] | None = None) -> None:
    """Step 3: the root property ``partition_spec_v<N>`` (idempotent). Two processes may finish
    the same pending spec at once (its creator and one that rolls it forward); Lance refuses one
    of two concurrent metadata updates, and the loser finds the property set and is done."""
    def mutate(snap: ManifestSnapshot) -> tuple[ManifestChanges | None, None]:
        published = snap.metadata.get(spec.key)
        if published is None:
            return ManifestChanges(metadata={spec.key: spec.to_json_string()}), None
        if PartitionSpec.from_json(published) == spec:
            return None, None
        raise CorruptNamespaceError(f"{manifest.uri}: {spec.key} is published as {published}, but the v{spec.id} "
                                    f"namespace row holds {spec.to_json_string()}")

    manifest.update(mutate, max_retries=max_retries, what=f"publish {spec.key}", transaction_properties=properties)


def _roll_forward(manifest: Manifest, snap: ManifestSnapshot, published: dict[int, PartitionSpec],
                  max_retries: int) -> dict[int, PartitionSpec]:
    for sid, spec in sorted(_pending_specs(snap, published).items()):
        log.warning("finishing the evolution to spec v%d found pending in %s", sid, manifest.uri)
        _add_columns(manifest, spec, max_retries)
        _publish(manifest, spec, max_retries)
        published[sid] = spec
    return published


def evolve(manifest: Manifest, schema: pa.Schema, fields: Sequence[PartitionField | Mapping[str, Any]], *,
           max_retries: int = 20, properties: Mapping[str, str] | None = None) -> EvolveResult:
    """Add a new partition spec version with ``fields``; the result's ``spec`` is it, or the
    current spec when ``fields`` define exactly it (so a rerun is a no-op: ``created`` False)."""
    from lancepart.model.transforms import validate_spec  # engine-level checks (types, expressions)

    started = time.monotonic()
    if isinstance(fields, Mapping) and "fields" in fields:  # a whole spec object was given
        fields = fields["fields"]
    if not fields:
        raise InvalidSpecError("a partition spec needs at least one field")
    before: int | None = None  # the current spec id when this call started
    for attempt in range(max_retries + 1):
        snap = manifest.snapshot()
        published = _published_specs(snap)
        before = max(published) if before is None else before
        published = _roll_forward(manifest, snap, published, max_retries)
        existing = [published[k] for k in sorted(published)]
        resolved = resolve_fields(fields, schema, existing)
        current = existing[-1]
        if [f.to_json() for f in resolved] == [f.to_json() for f in current.fields]:
            return _result(manifest, current, before, attempt, started)
        spec = PartitionSpec(max(published) + 1, resolved)
        validate_spec(spec, schema, existing)
        _add_columns(manifest, spec, max_retries)
        try:
            _add_row(manifest, spec, max_retries, properties)
        except _Taken:
            continue  # someone else evolved to this id first: roll it forward, take the next id
        _publish(manifest, spec, max_retries, properties)
        log.info("partition spec v%d published in %s: %s", spec.id, manifest.uri, spec.to_json_string())
        return _result(manifest, spec, before, attempt, started)
    raise CommitConflictError(f"evolving {manifest.uri}: {max_retries + 1} attempts lost to concurrent "
                              f"evolutions; nothing was published")


def _result(manifest: Manifest, spec: PartitionSpec, before: int, attempt: int, started: float) -> EvolveResult:
    """``created``: the current spec changed during the call (the new version, or a pending one
    this call finished that the fields define exactly)."""
    return EvolveResult(manifest_version=manifest.dataset().version, retries=attempt,
                        seconds=round(time.monotonic() - started, 3), spec=spec,
                        details={"spec_id": spec.id, "created": spec.id != before, "previous_spec_id": before,
                                 "spec": spec.to_json()})
