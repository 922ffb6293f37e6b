"""Job configuration (``configs/*.yaml``): configuration as data, validated with typed errors.

>>> cfg = JobConfig.from_dict({"namespace": {"root": "/tmp/x"}})
>>> cfg.namespace.root
'/tmp/x'
"""

from __future__ import annotations

import datetime as dt
import difflib
import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import yaml

from lancepart.errors import ConfigError, InvalidSpecError
from lancepart.maintenance.compact import DEFAULT_DELETIONS_THRESHOLD, DEFAULT_MIN_SMALL_FRAGMENTS, DEFAULT_TARGET_ROWS
from lancepart.model.spec import PartitionSpec, arrow_type_from_json
from lancepart.redact import register as register_secrets

#: The keys a job config may hold, section by section (free-form mappings are not listed: Lance
#: storage options, Spark confs, reader options, expectations).
KEYS: dict[str, frozenset[str]] = {
    "": frozenset({"namespace", "source", "mode", "batch_id", "logical_date", "expectations", "spark", "compact",
                   "index"}),
    "namespace": frozenset({"root", "storage", "schema", "spec"}),
    "namespace.schema[]": frozenset({"name", "type", "nullable"}),
    "namespace.spec": frozenset({"id", "fields"}),
    "namespace.spec.fields[]": frozenset({"field_id", "source_ids", "transform", "expression", "result_type"}),
    "source": frozenset({"kind", "path", "rows", "seed", "options"}),
    "spark": frozenset({"app_name", "conf"}),
    "compact": frozenset({"filter", "target_rows_per_fragment", "min_small_fragments",
                          "materialize_deletions_threshold", "tables_per_task"}),
    "index": frozenset({"on_write"}),
}
#: Storage options for every namespace a process opens, as a JSON object (kept off the command line).
STORAGE_OPTIONS_ENV = "LANCEPART_STORAGE_OPTIONS"
_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
_PLAIN_INT = re.compile(r"[1-9][0-9]*|0")
#: A placeholder of a ``batch_id`` template: ``{name}``. Other braces are literal text.
_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")


def _section_name(where: str) -> str:
    return "at the top level" if not where else f"in {where}"


def _nearest(key: str, where: str) -> str:
    """`` ; did you mean 'x'?`` for an unknown ``key`` in section ``where``: the closest valid key
    there or, when closer, a valid key of another section (``storage_options`` at the top level
    -> ``namespace.storage``)."""
    def score(candidate: str) -> float:
        return difflib.SequenceMatcher(None, key.lower(), candidate.lower()).ratio()

    best: tuple[float, int, str] | None = None
    for sec, keys in KEYS.items():
        for k in keys:
            shown = k if sec == where else f"{sec}.{k}".lstrip(".").replace("[].", "[i].")
            cand = (score(k), sec == where, shown)  # a key of this section wins a tie
            if best is None or cand[:2] > best[:2]:
                best = cand
    return f"; did you mean {best[2]!r}?" if best and best[0] >= 0.6 else ""


def _check_keys(data: Mapping[str, Any], where: str, shown: str | None = None) -> None:
    """Refuse a key of ``data`` that section ``where`` does not know, naming the key, where it
    is and the nearest valid key."""
    known = KEYS[where]
    place = f"in {shown}" if shown else _section_name(where)
    for key in data:
        if key not in known:
            raise ConfigError(f"unknown key {str(key)!r} {place}{_nearest(str(key), where)} "
                              f"(valid keys there: {', '.join(sorted(known))})")


def _mapping(value: Any, where: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ConfigError(f"{where} must be a mapping, got {type(value).__name__} {_short(value)}")
    return value


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _typed(value: Any, kind: type | tuple[type, ...], where: str, expected: str) -> Any:
    if isinstance(value, bool) and bool not in (kind if isinstance(kind, tuple) else (kind,)):
        raise ConfigError(f"{where} must be {expected}, got bool {value!r}")
    if not isinstance(value, kind):
        raise ConfigError(f"{where} must be {expected}, got {type(value).__name__} {_short(value)}")
    return value


def _storage_value(key: str, value: Any, where: str = "namespace.storage") -> str:
    """One ``namespace.storage`` value as the string Lance expects; ``${VAR}`` is replaced by the
    environment variable VAR (a missing one is an error naming the variable, never a value)."""
    if isinstance(value, bool):
        value = "true" if value else "false"  # Lance parses true/false; str(True) is "True"
    elif isinstance(value, (int, float)):
        value = str(value)
    elif not isinstance(value, str):
        raise ConfigError(f"{where}.{key} must be a string, number or bool, got {type(value).__name__}")

    def sub(m: re.Match) -> str:
        if m.group(1) not in os.environ:
            raise ConfigError(f"{where}.{key} refers to ${{{m.group(1)}}}, which is not set in the "
                              f"environment")
        return os.environ[m.group(1)]

    return _ENV_REF.sub(sub, value)


def storage_options_from_env() -> dict[str, str]:
    """``$LANCEPART_STORAGE_OPTIONS``: a JSON object of Lance storage options (for example the
    credentials a deployment injects), or ``{}``. Its values are never part of an error message."""
    text = os.environ.get(STORAGE_OPTIONS_ENV)
    if not text:
        return {}
    try:
        obj = json.loads(text)
    except ValueError:
        obj = None
    if not isinstance(obj, dict):
        raise ConfigError(f"${STORAGE_OPTIONS_ENV} must be a JSON object of option names to values "
                          f"(its content is not shown here)")
    return {str(k): _storage_value(str(k), v, f"${STORAGE_OPTIONS_ENV}") for k, v in obj.items()}


def storage_options_from_file(path: str | Path) -> dict[str, str]:
    """Lance storage options from a JSON or YAML mapping in a file (``--storage-options-file``),
    so that secrets stay off the command line; ``${VAR}`` in a value is the environment variable
    VAR. Errors name the file and the key, never a value."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"storage options file {p} does not exist")
    try:
        data = yaml.safe_load(p.read_text())
    except (yaml.YAMLError, UnicodeDecodeError):
        raise ConfigError(f"storage options file {p} is neither JSON nor YAML (its content is not shown here)") \
            from None
    if not isinstance(data, Mapping):
        raise ConfigError(f"storage options file {p} must hold a mapping of option names to values, "
                          f"got {type(data).__name__}")
    return {str(k): _storage_value(str(k), v, str(p)) for k, v in data.items()}


def load_document(value: str, what: str) -> Any:
    """A JSON (or YAML) document given inline or as the path of a file: inline JSON is an
    object or a list, anything else names a file holding JSON or YAML. Errors start with
    ``what`` (the option or key the value came from) and are :class:`InvalidArgumentError`.

    >>> load_document('{"id": 1, "fields": []}', "--spec")
    {'id': 1, 'fields': []}
    """
    from lancepart.errors import InvalidArgumentError

    p = Path(value)
    if not value.lstrip().startswith(("{", "[")):
        if not p.is_file():
            raise InvalidArgumentError(f"{what}: {value!r} is neither a file nor a JSON object or list")
        try:
            return yaml.safe_load(p.read_text())
        except yaml.YAMLError as e:
            raise InvalidArgumentError(f"{what}: {p} is neither JSON nor YAML: {e}") from None
    try:
        return json.loads(value)
    except ValueError as e:
        raise InvalidArgumentError(f"{what}: {value[:80]!r} is not valid JSON ({e})") from None


def batch_id_value(value: Any, raw: str | None = None) -> str | None:
    """A config's ``batch_id`` as a string. YAML reads an unquoted ``2025-12-01`` as a date and
    ``20251201`` as an int: both become the text as written (``raw``, the YAML scalar; without
    it a date's ISO form and an int's digits). Numbers YAML would read another way than they
    look (``0123``, ``1e3``, ``1_000``, ``0x1f``, ``1.5``) and booleans are refused: quote them."""
    if value is None or isinstance(value, str):
        return value
    text = raw if raw is not None else None
    if isinstance(value, dt.datetime):  # before date: datetime is a date
        if text is None:
            raise ConfigError(f"batch_id {value!r} is a timestamp; give it as a quoted string")
        return text
    if isinstance(value, dt.date):
        return text if text is not None else value.isoformat()
    if isinstance(value, int) and not isinstance(value, bool):
        text = text if text is not None else str(value)
        if _PLAIN_INT.fullmatch(text):
            return text
        raise ConfigError(f"batch_id {text} is read by YAML as the number {value}, not as the text written; "
                          f"quote it: batch_id: \"{text}\"")
    shown = text if text is not None else repr(value)
    raise ConfigError(f"batch_id must be a string, got {type(value).__name__} {shown} (YAML reads it as "
                      f"{value!r}); quote it: batch_id: \"{shown}\"")


def logical_date_value(value: Any, where: str = "logical_date") -> dt.date | None:
    """A logical date (``YYYY-MM-DD``, a YAML date or a ``datetime.date``) as a date; ``None``
    and ``""`` are no date."""
    if value is None or value == "":
        return None
    if isinstance(value, dt.datetime):  # before date: datetime is a date
        raise ConfigError(f"{where} must be a date YYYY-MM-DD, got the timestamp {value}")
    if isinstance(value, dt.date):
        return value
    if isinstance(value, str) and re.fullmatch(r"[0-9]{4}-[0-9]{2}-[0-9]{2}", value):
        try:
            return dt.date.fromisoformat(value)
        except ValueError:
            pass
    raise ConfigError(f"{where} must be a date YYYY-MM-DD, got {type(value).__name__} {_short(value)}")


def render_batch_id(template: str | None, logical_date: dt.date | None) -> str | None:
    """A config's ``batch_id`` with its ``{logical_date}`` placeholder replaced by
    ``logical_date`` as ``YYYY-MM-DD``; an id without a placeholder is returned as written.

    >>> render_batch_id("demo-{logical_date}", dt.date(2025, 12, 1))
    'demo-2025-12-01'
    >>> render_batch_id("nightly-7", None)
    'nightly-7'
    """
    if template is None:
        return None
    names = _PLACEHOLDER.findall(template)
    if unknown := sorted({n for n in names if n != "logical_date"}):
        raise ConfigError(f"batch_id {template!r} has the unknown placeholder(s) "
                          f"{', '.join('{' + n + '}' for n in unknown)}; the only one is {{logical_date}}")
    if not names:
        return template
    if logical_date is None:
        raise ConfigError(f"batch_id {template!r} uses {{logical_date}}, but no logical date is given: set "
                          f"logical_date: YYYY-MM-DD in the config (the date its data is for), or pass "
                          f"--logical-date (the Airflow DAG passes the run's logical date)")
    return _PLACEHOLDER.sub(logical_date.isoformat(), template)


def _raw_batch_id(text: str) -> str | None:
    """The text of a top-level ``batch_id:`` plain scalar exactly as written in the YAML."""
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError:
        return None
    if not isinstance(node, yaml.MappingNode):
        return None
    for key, value in node.value:
        if isinstance(key, yaml.ScalarNode) and key.value == "batch_id" and isinstance(value, yaml.ScalarNode) \
                and value.style is None:
            return value.value
    return None


def _schema_from_config(items: Any) -> pa.Schema:
    if not isinstance(items, list) or not items:
        raise ConfigError("namespace.schema must be a non-empty list of {name, type, nullable}")
    fields = []
    for i, item in enumerate(items):
        if not isinstance(item, Mapping) or "name" not in item or "type" not in item:
            raise ConfigError(f"namespace.schema[{i}] needs 'name' and 'type'")
        _check_keys(item, "namespace.schema[]", f"namespace.schema[{i}]")
        if "nullable" in item:
            _typed(item["nullable"], bool, f"namespace.schema[{i}].nullable", "true or false")
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
        _check_keys(data, "compact")
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
    batch_id: str | None = None  # rendered: {logical_date} replaced (render_batch_id)
    expectations: list[dict[str, Any]] = field(default_factory=list)
    spark: dict[str, Any] = field(default_factory=dict)
    compact: CompactConfig = field(default_factory=CompactConfig)
    index_on_write: bool = True  # ``index.on_write``: the ingest keeps declared indexes (docs/indexes.md)
    logical_date: dt.date | None = None  # the date the data is for: renders {logical_date} in batch_id

    @classmethod
    def load(cls, path: str | Path, storage_options_file: str | Path | None = None,
             storage_env: bool = True, logical_date: dt.date | str | None = None) -> JobConfig:
        """The job config at ``path``; ``storage_options_file`` (a JSON or YAML mapping) adds
        storage options under the config's own ``namespace.storage``. ``storage_env=False``:
        without ``$LANCEPART_STORAGE_OPTIONS`` (the CLI merges it itself, in its own order).
        ``logical_date`` (a run's date, e.g. Airflow's) replaces the config's ``logical_date``."""
        p = Path(path)
        if not p.is_file():
            raise ConfigError(f"config file {p} does not exist")
        text = p.read_text()
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as e:
            raise ConfigError(f"{p}: not valid YAML: {e}") from None
        if data is None:
            data = {}
        if not isinstance(data, Mapping):
            raise ConfigError(f"{p}: a job config is a mapping of sections, got {type(data).__name__}")
        if data.get("batch_id") is not None and not isinstance(data["batch_id"], str):
            try:
                data = {**data, "batch_id": batch_id_value(data["batch_id"], _raw_batch_id(text))}
            except ConfigError as e:
                raise ConfigError(f"{p}: {e}") from None
        try:
            defaults = storage_options_from_file(storage_options_file) if storage_options_file else None
            return cls.from_dict(data, base_dir=p.parent, storage_defaults=defaults, storage_env=storage_env,
                                 logical_date=logical_date)
        except ConfigError as e:
            raise ConfigError(f"{p}: {e}") from None

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], base_dir: Path | None = None,
                  storage_defaults: Mapping[str, str] | None = None, storage_env: bool = True,
                  logical_date: dt.date | str | None = None) -> JobConfig:
        """A config from its data. Storage options: ``$LANCEPART_STORAGE_OPTIONS`` (unless
        ``storage_env`` is false), then ``storage_defaults``, then ``namespace.storage``; later
        ones win. ``batch_id`` is rendered with ``logical_date`` when given (a run's date), else
        with the config's own ``logical_date`` (:func:`render_batch_id`)."""
        data = _mapping(data, "a job config")
        _check_keys(data, "")
        ns, storage, spec, schema = _namespace_section(data.get("namespace"), storage_defaults, storage_env)
        src = _source_section(data.get("source"))
        mode = data.get("mode", "append")
        if mode not in ("append", "overwrite"):
            raise ConfigError(f"mode must be 'append' or 'overwrite', got {mode!r}")
        expectations = data.get("expectations") or []
        _typed(expectations, list, "expectations", "a list of expectations")
        for i, item in enumerate(expectations):
            _mapping(item, f"expectations[{i}]")  # their keys are checked by lancepart.ops.quality
        spark = _spark_section(data.get("spark"))
        own_date = logical_date_value(data.get("logical_date"))
        date = logical_date_value(logical_date, "the run's logical date") or own_date
        batch_id = render_batch_id(batch_id_value(data.get("batch_id")), date)
        root = str(ns["root"])
        if base_dir is not None and "://" not in root and not Path(root).is_absolute():
            root = str(Path.cwd() / root)  # relative roots resolve against the cwd, like the API
        return cls(
            namespace=NamespaceConfig(root=root, storage_options=storage, schema=schema, spec=spec),
            source=SourceConfig(kind=src.get("kind", "generate"), path=src.get("path"),
                                rows=int(src.get("rows", 100_000)), seed=int(src.get("seed", 42)),
                                options=dict(src.get("options") or {})),
            mode=mode,
            batch_id=batch_id,
            expectations=list(expectations),
            spark=spark,
            compact=CompactConfig.from_dict(data.get("compact")),
            index_on_write=_index_on_write(data.get("index")),
            logical_date=date,
        )


def _namespace_section(ns: Any, storage_defaults: Mapping[str, str] | None, storage_env: bool
                       ) -> tuple[Mapping[str, Any], dict[str, str], PartitionSpec | None, pa.Schema | None]:
    """The ``namespace:`` section checked: ``(section, storage options, spec, schema)``; the storage
    options of ``$LANCEPART_STORAGE_OPTIONS`` (unless ``storage_env`` is false), then
    ``storage_defaults``, then ``namespace.storage``."""
    if not isinstance(ns, Mapping) or not ns.get("root"):
        raise ConfigError("namespace.root is required")
    _check_keys(ns, "namespace")
    _typed(ns["root"], str, "namespace.root", "a path or URI string")
    storage = {**(storage_options_from_env() if storage_env else {}), **(storage_defaults or {}),
               **{str(k): _storage_value(str(k), v) for k, v in _mapping(ns.get("storage"), "namespace.storage")
                  .items()}}
    register_secrets(storage)  # no message of this process shows them
    if ns.get("spec") is not None:
        spec_data = _mapping(ns["spec"], "namespace.spec")
        _check_keys(spec_data, "namespace.spec")
        for i, f in enumerate(spec_data.get("fields") or []):
            if isinstance(f, Mapping):
                _check_keys(f, "namespace.spec.fields[]", f"namespace.spec.fields[{i}]")
    try:
        spec = PartitionSpec.from_json(ns["spec"]) if ns.get("spec") is not None else None
    except InvalidSpecError as e:
        raise ConfigError(f"namespace.spec: {e}") from None
    schema = _schema_from_config(ns["schema"]) if ns.get("schema") is not None else None
    return ns, storage, spec, schema


def _source_section(data: Any) -> dict[str, Any]:
    """The ``source:`` section checked, as a dict."""
    src = dict(_mapping(data, "source"))
    _check_keys(src, "source")
    if src.get("kind", "generate") not in ("generate", "parquet", "csv", "json"):
        raise ConfigError(f"source.kind must be generate, parquet, csv or json, got {src.get('kind')!r}")
    if src.get("path") is not None:
        _typed(src["path"], str, "source.path", "a path string")
    for key in ("rows", "seed"):
        if src.get(key) is not None:
            _typed(src[key], int, f"source.{key}", "an integer")
    _mapping(src.get("options"), "source.options")
    return src


def _spark_section(data: Any) -> dict[str, Any]:
    """The ``spark:`` section checked, as a dict."""
    spark = dict(_mapping(data, "spark"))
    _check_keys(spark, "spark")
    if spark.get("app_name") is not None:
        _typed(spark["app_name"], str, "spark.app_name", "a string")
    _mapping(spark.get("conf"), "spark.conf")
    return spark


def _index_on_write(data: Any) -> bool:
    """``index.on_write`` (default true): whether the ingest brings the declared indexes of the
    tables it touches up to date before it publishes."""
    section = _mapping(data, "index")
    _check_keys(section, "index")
    value = section.get("on_write", True)
    return _typed(value, bool, "index.on_write", "true or false")
