"""Job configuration (``configs/*.yaml``): configuration as data, validated with typed errors.

>>> cfg = JobConfig.from_dict({"namespace": {"root": "/tmp/x"}})
>>> cfg.namespace.root
'/tmp/x'
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import yaml

from lancepart.errors import ConfigError, InvalidSpecError
from lancepart.maintenance.compact import DEFAULT_DELETIONS_THRESHOLD, DEFAULT_MIN_SMALL_FRAGMENTS, DEFAULT_TARGET_ROWS
from lancepart.spec import PartitionSpec, arrow_type_from_json


def _schema_from_config(items: Any) -> pa.Schema:
    if not isinstance(items, list) or not items:
        raise ConfigError("namespace.schema must be a non-empty list of {name, type, nullable}")
    fields = []
    for i, item in enumerate(items):
        if not isinstance(item, Mapping) or "name" not in item or "type" not in item:
            raise ConfigError(f"namespace.schema[{i}] needs 'name' and 'type'")
        t = item["type"]
        try:
            arrow_type = arrow_type_from_json(t if isinstance(t, Mapping) else {"type": str(t)})
        except InvalidSpecError as e:
            raise ConfigError(f"namespace.schema[{i}] ({item['name']}): {e}") from None
        fields.append(pa.field(str(item["name"]), arrow_type, nullable=bool(item.get("nullable", True))))
    return pa.schema(fields)


@dataclass(frozen=True)
class NamespaceConfig:
    root: str
    storage_options: dict[str, str] = field(default_factory=dict)
    schema: pa.Schema | None = None  # for first creation only
    spec: PartitionSpec | None = None


@dataclass(frozen=True)
class SourceConfig:
    kind: str = "generate"  # generate | parquet | csv | json
    path: str | None = None
    rows: int = 100_000
    seed: int = 42
    options: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class CompactConfig:
    """The ``compact:`` section (jobs/compact.py): which partitions, and the fragment size to aim for."""

    filter: str | None = None
    target_rows_per_fragment: int = DEFAULT_TARGET_ROWS
    min_small_fragments: int = DEFAULT_MIN_SMALL_FRAGMENTS
    materialize_deletions_threshold: float = DEFAULT_DELETIONS_THRESHOLD
    tables_per_task: int | None = None  # Spark tasks each rewrite this many tables; None: ~4 tasks per core

    @classmethod
    def from_dict(cls, data: Any) -> CompactConfig:
        if data is None:
            return cls()
        if not isinstance(data, Mapping):
            raise ConfigError("compact must be a mapping of filter, target_rows_per_fragment, min_small_fragments, "
                              "materialize_deletions_threshold, tables_per_task")
        known = {"filter", "target_rows_per_fragment", "min_small_fragments", "materialize_deletions_threshold",
                 "tables_per_task"}
        if unknown := sorted(set(data) - known):
            raise ConfigError(f"unknown compact config keys: {unknown} (known: {sorted(known)})")
        out: dict[str, Any] = {}
        for key, kind in (("target_rows_per_fragment", int), ("min_small_fragments", int),
                          ("materialize_deletions_threshold", float), ("tables_per_task", int)):
            if data.get(key) is not None:
                value = data[key]
                if isinstance(value, bool) or not isinstance(value, (int, float)) or kind(value) != value \
                        or value <= 0:
                    raise ConfigError(f"compact.{key} must be a positive {kind.__name__}, got {value!r}")
                out[key] = kind(value)
        if data.get("filter") is not None:
            if not isinstance(data["filter"], str):
                raise ConfigError(f"compact.filter must be a SQL string, got {data['filter']!r}")
            out["filter"] = data["filter"]
        return cls(**out)


@dataclass(frozen=True)
class JobConfig:
    namespace: NamespaceConfig
    source: SourceConfig = field(default_factory=SourceConfig)
    mode: str = "append"
    batch_id: str | None = None
    expectations: list[dict[str, Any]] = field(default_factory=list)
    spark: dict[str, Any] = field(default_factory=dict)
    compact: CompactConfig = field(default_factory=CompactConfig)

    @classmethod
    def load(cls, path: str | Path) -> JobConfig:
        p = Path(path)
        if not p.is_file():
            raise ConfigError(f"config file {p} does not exist")
        try:
            data = yaml.safe_load(p.read_text())
        except yaml.YAMLError as e:
            raise ConfigError(f"{p}: not valid YAML: {e}") from None
        return cls.from_dict(data or {}, base_dir=p.parent)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], base_dir: Path | None = None) -> JobConfig:
        known = {"namespace", "source", "mode", "batch_id", "expectations", "spark", "compact"}
        if unknown := sorted(set(data) - known):
            raise ConfigError(f"unknown top-level config keys: {unknown} (known: {sorted(known)})")
        ns = data.get("namespace")
        if not isinstance(ns, Mapping) or not ns.get("root"):
            raise ConfigError("namespace.root is required")
        storage = {str(k): str(v) for k, v in (ns.get("storage") or {}).items()}
        try:
            spec = PartitionSpec.from_json(ns["spec"]) if ns.get("spec") is not None else None
        except InvalidSpecError as e:
            raise ConfigError(f"namespace.spec: {e}") from None
        schema = _schema_from_config(ns["schema"]) if ns.get("schema") is not None else None
        src = dict(data.get("source") or {})
        if src.get("kind", "generate") not in ("generate", "parquet", "csv", "json"):
            raise ConfigError(f"source.kind must be generate, parquet, csv or json, got {src.get('kind')!r}")
        mode = data.get("mode", "append")
        if mode not in ("append", "overwrite"):
            raise ConfigError(f"mode must be 'append' or 'overwrite', got {mode!r}")
        root = str(ns["root"])
        if base_dir is not None and "://" not in root and not Path(root).is_absolute():
            root = str(Path.cwd() / root)  # relative roots resolve against the cwd, like the API
        return cls(
            namespace=NamespaceConfig(root=root, storage_options=storage, schema=schema, spec=spec),
            source=SourceConfig(kind=src.get("kind", "generate"), path=src.get("path"),
                                rows=int(src.get("rows", 100_000)), seed=int(src.get("seed", 42)),
                                options=dict(src.get("options") or {})),
            mode=mode,
            batch_id=data.get("batch_id"),
            expectations=list(data.get("expectations") or []),
            spark=dict(data.get("spark") or {}),
            compact=CompactConfig.from_dict(data.get("compact")),
        )
