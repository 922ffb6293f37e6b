"""The data-quality gate: expectations declared in the job config, evaluated by great_expectations 1.x.

A job lists ``expectations`` in its YAML; :func:`check` runs them on the batch before anything
is written and raises :class:`~lancepart.errors.ExpectationFailedError` when one fails, so a
bad batch never reaches ``__manifest``. The vocabulary is small on purpose (docs/quality.md);
any other great_expectations expectation is reachable through ``type: great_expectations``.

great_expectations does the evaluation (Spark DataFrames on Spark, pandas and Arrow input on
pandas); this module only translates the config into an ``ExpectationSuite`` and the
validation result into a :class:`QualityReport`. great_expectations is imported lazily: it
takes seconds to import, and a config can be parsed without it.

>>> report = validate(pa.table({"id": [1, 2, None]}), [{"type": "not_null", "column": "id"}])
>>> print(report.results[0].message)
1 of 3 rows unexpected, e.g. [None]
"""

from __future__ import annotations

import datetime
import decimal
import difflib
import math
import os
import platform
import re
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import pyarrow as pa

from lancepart.errors import ConfigError, ExpectationFailedError, InvalidArgumentError, MissingDependencyError

__all__ = [
    "TYPES",
    "Expectation",
    "ExpectationOutcome",
    "QualityReport",
    "check",
    "parse_expectations",
    "preload",
    "validate",
]

#: The expectation types a config may use.
TYPES = ("not_null", "between", "in_set", "regex", "unique", "row_count", "great_expectations")

# type -> (required keys, optional keys); "type" and "name" are allowed everywhere.
_KEYS: dict[str, tuple[frozenset[str], frozenset[str]]] = {
    "not_null": (frozenset({"column"}), frozenset()),
    "between": (frozenset({"column"}), frozenset({"min", "max", "strict_min", "strict_max"})),
    "in_set": (frozenset({"column", "values"}), frozenset()),
    "regex": (frozenset({"column", "pattern"}), frozenset()),
    "unique": (frozenset({"column"}), frozenset()),
    "row_count": (frozenset(), frozenset({"min", "max"})),
    "great_expectations": (frozenset({"expectation"}), frozenset({"kwargs"})),
}

# Our type -> the great_expectations class (in gx.expectations) and its snake_case name.
_GX_CLASSES = {
    "not_null": ("ExpectColumnValuesToNotBeNull", "expect_column_values_to_not_be_null"),
    "between": ("ExpectColumnValuesToBeBetween", "expect_column_values_to_be_between"),
    "in_set": ("ExpectColumnValuesToBeInSet", "expect_column_values_to_be_in_set"),
    "regex": ("ExpectColumnValuesToMatchRegex", "expect_column_values_to_match_regex"),
    "unique": ("ExpectColumnValuesToBeUnique", "expect_column_values_to_be_unique"),
    "row_count": ("ExpectTableRowCountToBeBetween", "expect_table_row_count_to_be_between"),
}

# SUMMARY gives unexpected_count/percent, element_count, observed_value and the first
# unexpected values without collecting every unexpected value (COMPLETE would, on Spark).
_RESULT_FORMAT = {"result_format": "SUMMARY", "partial_unexpected_count": 20}
_MAX_EXAMPLES = 5
_SLOT = "lancepart_slot"  # meta key that maps a validation result back to its suite entry
_COLUMN_KWARGS = ("column", "column_A", "column_B")  # kwargs of GE expectations naming one column


@dataclass(frozen=True)
class Expectation:
    """One parsed config item, ready to run as the great_expectations expectation ``gx_expectation``.

    >>> e = parse_expectations([{"type": "between", "column": "amount", "min": 0, "max": 10000}])[0]
    >>> e.label, e.gx_expectation, e.gx_kwargs
    ('between(amount, 0..10000)', 'expect_column_values_to_be_between', {'column': 'amount', 'min_value': 0, \
'max_value': 10000})
    """

    index: int  # position in the config list, for messages
    type: str  # one of TYPES
    gx_expectation: str  # snake_case name of the great_expectations expectation that runs it
    gx_kwargs: dict[str, Any]
    column: str | None = None
    name: str | None = None  # the config's optional ``name``

    @property
    def label(self) -> str:
        """The config's ``name``, else a short description such as ``between(amount, 0..10000)``."""
        if self.name:
            return self.name
        kw = self.gx_kwargs
        if self.type in ("not_null", "unique"):
            return f"{self.type}({self.column})"
        if self.type == "between":
            return f"between({self.column}, {_range_text(kw)})"
        if self.type == "row_count":
            return f"row_count({_range_text(kw)})"
        if self.type == "in_set":
            values = list(kw["value_set"])
            shown = ", ".join(str(v) for v in values[:5]) + (f", ... {len(values) - 5} more" if len(values) > 5 else "")
            return f"in_set({self.column}, [{shown}])"
        if self.type == "regex":
            return f"regex({self.column}, {kw['regex']})"
        return f"{self.gx_expectation}({self.column})" if self.column else self.gx_expectation

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "label": self.label}


@dataclass(frozen=True)
class ExpectationOutcome:
    """How one expectation fared on the batch.

    ``unexpected_count`` counts rows that violate it (``None`` for table-level expectations
    such as ``row_count``); ``examples`` holds up to 5 distinct violating values.

    >>> report = validate(pa.table({"id": [1, 1]}), [{"type": "unique", "column": "id"}])
    >>> o = report.results[0]
    >>> o.success, o.unexpected_count, o.element_count, o.examples
    (False, 2, 2, [1])
    """

    name: str  # the expectation's label
    type: str
    column: str | None
    success: bool
    unexpected_count: int | None = None
    element_count: int | None = None
    unexpected_percent: float | None = None
    examples: list[Any] = field(default_factory=list)
    observed_value: Any = None
    message: str = ""
    index: int = 0
    gx_expectation: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class QualityReport:
    """The result of running a list of expectations on one batch.

    >>> print(validate(pa.table({"id": [1]}), [{"type": "row_count", "min": 1}]))  # doctest: +ELLIPSIS
    quality gate ok: 1 of 1 expectations passed (pandas, ... s)
      ok     row_count(1..): 1 rows
    """

    success: bool
    results: list[ExpectationOutcome]
    seconds: float = 0.0
    engine: str = ""  # "spark" or "pandas": the input's kind
    gx_engine: str = ""  # Spark input: "pandas" (collected, validated on the driver) or "spark"
    #: of ``seconds``, the Spark job that counted the input: it computes the source and fills the
    #: cache that a gated write reads afterwards, so without a gate the write would pay it instead
    input_seconds: float = 0.0

    @property
    def failed(self) -> list[ExpectationOutcome]:
        """The outcomes that failed, in config order."""
        return [r for r in self.results if not r.success]

    def failure_message(self) -> str:
        """One line naming each failed expectation with its counts and examples ('' when all passed).

        >>> validate(pa.table({"id": [None]}), [{"type": "not_null", "column": "id"}]).failure_message()
        '1 of 1 expectations failed: not_null(id): 1 of 1 rows unexpected, e.g. [None]'
        """
        failed = self.failed
        if not failed:
            return ""
        parts = "; ".join(f"{r.name}: {r.message}" for r in failed)
        return f"{len(failed)} of {len(self.results)} expectations failed: {parts}"

    def to_dict(self) -> dict[str, Any]:
        return {"success": self.success, "seconds": self.seconds, "input_seconds": self.input_seconds,
                "engine": self.engine, "gx_engine": self.gx_engine, "results": [r.to_dict() for r in self.results]}

    def __str__(self) -> str:
        passed = sum(r.success for r in self.results)
        head = (f"quality gate {'ok' if self.success else 'FAILED'}: {passed} of {len(self.results)} expectations "
                f"passed ({self.engine or 'no data read'}{' -> ' + self.gx_engine if self.gx_engine else ''}, "
                f"{self.seconds:.2f} s)")
        lines = [f"  {'ok' if r.success else 'FAILED':<6} {r.name}: {r.message}" for r in self.results]
        return "\n".join([head, *lines])


# ---------------------------------------------------------------------------------------------
# parsing


def parse_expectations(items: Sequence[Mapping[str, Any] | Expectation] | None) -> list[Expectation]:
    """Validate the config's ``expectations`` list; every problem is a ConfigError naming item and key.

    Only ``type: great_expectations`` items import great_expectations (to check the name and kwargs).

    >>> [e.label for e in parse_expectations([{"type": "not_null", "column": "id"},
    ...                                      {"type": "row_count", "min": 1}])]
    ['not_null(id)', 'row_count(1..)']
    """
    if items is None:
        return []
    if isinstance(items, (str, bytes, Mapping)) or not isinstance(items, Sequence):
        raise ConfigError(f"expectations must be a list of mappings, got {type(items).__name__}")
    out = []
    for i, item in enumerate(items):
        if isinstance(item, Expectation):
            out.append(item)
        elif isinstance(item, Mapping):
            out.append(_parse_one(i, item))
        else:
            raise ConfigError(f"expectations[{i}] must be a mapping with a 'type', got {item!r}")
    return out


def _parse_one(i: int, item: Mapping[str, Any]) -> Expectation:
    where = f"expectations[{i}]"
    t = item.get("type")
    if t is None:
        raise ConfigError(f"{where}: missing key 'type' (one of {', '.join(TYPES)})")
    if t not in _KEYS:
        raise ConfigError(f"{where}: unknown type {t!r} (one of {', '.join(TYPES)}){_did_you_mean(t, TYPES)}")
    where = f"{where} ({t})"
    required, optional = _KEYS[t]
    if unknown := sorted(set(item) - required - optional - {"type", "name"}, key=str):
        allowed = ", ".join(sorted(required | optional | {"name"}))
        raise ConfigError(f"{where}: unknown key {unknown[0]!r} (allowed: {allowed})")
    if missing := sorted(required - set(item)):
        raise ConfigError(f"{where}: missing key {missing[0]!r}")
    name = item.get("name")
    if name is not None and (not isinstance(name, str) or not name):
        raise ConfigError(f"{where}: key 'name' must be a non-empty string, got {name!r}")
    column = None
    if "column" in required:
        column = item["column"]
        if not isinstance(column, str) or not column:
            raise ConfigError(f"{where}: key 'column' must be a non-empty string, got {column!r}")

    if t == "great_expectations":
        return _parse_gx(i, where, item, name)
    gx_kwargs: dict[str, Any] = {"column": column} if column is not None else {}
    if t == "between":
        gx_kwargs.update(_parse_bounds(where, item, integer=False))
        for key in ("strict_min", "strict_max"):
            if key in item:
                if not isinstance(item[key], bool):
                    raise ConfigError(f"{where}: key {key!r} must be true or false, got {item[key]!r}")
                if item[key]:
                    gx_kwargs[key] = True
    elif t == "row_count":
        gx_kwargs.update(_parse_bounds(where, item, integer=True))
    elif t == "in_set":
        values = item["values"]
        if isinstance(values, (str, bytes, Mapping)) or not isinstance(values, (Sequence, set, frozenset)):
            raise ConfigError(f"{where}: key 'values' must be a list, got {values!r}")
        values = list(values)
        if not values:
            raise ConfigError(f"{where}: key 'values' must not be empty")
        if any(isinstance(v, str) for v in values) and any(isinstance(v, bool) for v in values):
            raise ConfigError(
                f"{where}: key 'values' mixes strings and booleans ({values!r}); YAML reads unquoted "
                f"NO/YES/ON/OFF as booleans, quote them (for example 'NO')")
        gx_kwargs["value_set"] = values
    elif t == "regex":
        pattern = item["pattern"]
        if not isinstance(pattern, str):
            raise ConfigError(f"{where}: key 'pattern' must be a string, got {pattern!r}")
        try:
            re.compile(pattern)
        except re.error as e:
            raise ConfigError(f"{where}: key 'pattern' {pattern!r} is not a valid regular expression: {e}") from None
        gx_kwargs["regex"] = pattern
    return Expectation(index=i, type=t, gx_expectation=_GX_CLASSES[t][1], gx_kwargs=gx_kwargs, column=column,
                       name=name)


def _parse_bounds(where: str, item: Mapping[str, Any], *, integer: bool) -> dict[str, Any]:
    kwargs = {}
    for key in ("min", "max"):
        if item.get(key) is None:
            continue
        v = item[key]
        if integer:
            ok = isinstance(v, int) and not isinstance(v, bool) and v >= 0
            kind = "a non-negative integer"
        else:
            ok = isinstance(v, (int, float, decimal.Decimal, datetime.date)) and not isinstance(v, bool)
            ok = (ok and not (isinstance(v, float) and math.isnan(v))) or (isinstance(v, str) and _is_iso_date(v))
            kind = "a number, a date or an ISO date/time string"
        if not ok:
            raise ConfigError(f"{where}: key {key!r} must be {kind}, got {v!r}")
        kwargs[f"{key}_value"] = v
    if not kwargs:
        raise ConfigError(f"{where}: needs 'min', 'max' or both")
    if "min_value" in kwargs and "max_value" in kwargs:
        lo, hi = kwargs["min_value"], kwargs["max_value"]
        try:
            reversed_range = lo > hi
        except TypeError:
            raise ConfigError(f"{where}: 'min' ({lo!r}) and 'max' ({hi!r}) cannot be compared") from None
        if reversed_range:
            raise ConfigError(f"{where}: 'min' ({lo!r}) is greater than 'max' ({hi!r})")
    for key in ("strict_min", "strict_max"):
        if item.get(key) and f"{key[7:]}_value" not in kwargs:
            raise ConfigError(f"{where}: key {key!r} needs {key[7:]!r}")
    return kwargs


def _is_iso_date(text: str) -> bool:
    try:
        datetime.datetime.fromisoformat(text)
    except ValueError:
        return False
    return True


def _parse_gx(i: int, where: str, item: Mapping[str, Any], name: str | None) -> Expectation:
    gx_name = item["expectation"]
    kwargs = item.get("kwargs") or {}
    if not isinstance(gx_name, str) or not gx_name:
        raise ConfigError(f"{where}: key 'expectation' must be a great_expectations expectation name, got {gx_name!r}")
    if not isinstance(kwargs, Mapping) or not all(isinstance(k, str) for k in kwargs):
        raise ConfigError(f"{where}: key 'kwargs' must be a mapping of argument names to values, got {kwargs!r}")
    kwargs = dict(kwargs)
    cls = _gx_class(where, gx_name)
    try:
        cls(**kwargs)  # pydantic checks required, unknown and inconsistent arguments
    except Exception as e:  # pydantic.v1 ValidationError or a TypeError from the model
        raise ConfigError(f"{where}: kwargs for {gx_name}: {_pydantic_text(e)}") from None
    column = kwargs.get("column") if isinstance(kwargs.get("column"), str) else None
    return Expectation(index=i, type="great_expectations", gx_expectation=gx_name, gx_kwargs=kwargs,
                       column=column, name=name)


def _gx_class(where: str, gx_name: str) -> type:
    _import_gx()
    from great_expectations.expectations.registry import (
        get_expectation_impl,
        list_registered_expectation_implementations,
    )

    try:
        return get_expectation_impl(gx_name)
    except Exception:
        known = list_registered_expectation_implementations()
        hint = _did_you_mean(gx_name, known)
        if not hint and not gx_name.startswith("expect_"):
            hint = " (names are snake_case, for example expect_column_values_to_not_be_null)"
        raise ConfigError(f"{where}: key 'expectation': unknown great_expectations expectation {gx_name!r}{hint}") \
            from None


def _pydantic_text(e: Exception) -> str:
    errors = getattr(e, "errors", None)
    if callable(errors):
        try:
            return "; ".join(f"{'.'.join(str(p) for p in err['loc'])}: {err['msg']}" for err in errors())
        except Exception:  # not a pydantic error after all
            pass
    return str(e)


def _did_you_mean(word: Any, choices: Sequence[str]) -> str:
    close = difflib.get_close_matches(str(word), list(choices), n=1)
    return f"; did you mean {close[0]!r}?" if close else ""


def _range_text(kw: Mapping[str, Any]) -> str:
    lo, hi = kw.get("min_value"), kw.get("max_value")
    if not kw.get("strict_min") and not kw.get("strict_max"):
        return f"{'' if lo is None else lo}..{'' if hi is None else hi}"
    parts = []
    if lo is not None:
        parts.append(f"{'>' if kw.get('strict_min') else '>='}{lo}")
    if hi is not None:
        parts.append(f"{'<' if kw.get('strict_max') else '<='}{hi}")
    return ", ".join(parts)


def _range_words(kw: Mapping[str, Any]) -> str:
    lo, hi = kw.get("min_value"), kw.get("max_value")
    if lo is not None and hi is not None:
        return f"between {lo} and {hi}"
    return f"at least {lo}" if lo is not None else f"at most {hi}"


# ---------------------------------------------------------------------------------------------
# running


#: Spark input of at most this many rows is collected (only the columns the expectations read) and
#: validated with great_expectations' pandas engine on the driver; larger input is validated on
#: Spark by great_expectations' Spark engine. See docs/quality.md "How great_expectations is run".
DRIVER_MAX_ROWS = 2_000_000


def validate(data: Any, expectations: Sequence[Mapping[str, Any] | Expectation] | None, *,
             spark_persist: bool = True, driver_max_rows: int = DRIVER_MAX_ROWS) -> QualityReport:
    """Run the expectations on ``data`` with great_expectations and report every outcome; never raises on failure.

    ``data`` is a pyspark DataFrame, a pandas DataFrame or a ``pa.Table`` / ``pa.RecordBatch``
    (validated with pandas). A Spark DataFrame is persisted (unless it was cached already or
    ``spark_persist=False``) and counted; with at most ``driver_max_rows`` rows, one more Spark job
    collects the columns the expectations name, as Arrow, and great_expectations' pandas engine
    evaluates every expectation on the driver: a fixed number of Spark jobs, whatever the number of
    expectations. A larger one is validated by great_expectations' Spark engine (about two Spark
    jobs per expectation). The DataFrame is released afterwards if the gate persisted it.

    >>> report = validate(pa.table({"amount": [-5.0, 3.0, 12000.0]}),
    ...                   [{"type": "between", "column": "amount", "min": 0, "max": 10000}])
    >>> report.success, report.results[0].unexpected_count, report.results[0].examples
    (False, 2, [-5.0, 12000.0])
    """
    started = time.perf_counter()
    parsed = parse_expectations(expectations)
    engine, frame, columns = _as_frame(data)
    if not parsed:
        return QualityReport(success=True, results=[], seconds=time.perf_counter() - started, engine=engine)

    gx = _import_gx()
    gx_engine = "spark" if engine == "spark" else "pandas"
    values = engine  # how result values are turned into plain Python (see _plain)
    counted: list[float] = []  # the count's seconds, see QualityReport.input_seconds
    # read at least twice (count, collect; GE's Spark engine: ~2 jobs per expectation): compute it once
    persisted = engine == "spark" and spark_persist and not frame.is_cached
    if persisted:
        frame.persist()
    try:
        if engine == "spark":
            local = _collect_for_driver(frame, parsed, columns, driver_max_rows, counted)
            if local is not None:
                frame, gx_engine, values = local, "pandas", "collected"
        by_slot, slot_of = _run_gx(gx, parsed, frame, gx_engine)
    finally:
        if persisted:
            data.unpersist()

    _check_dependencies(by_slot.values(), gx_engine)
    outcomes = [_outcome(e, by_slot.get(slot), columns, values)
                for e, slot in zip(parsed, slot_of, strict=True)]
    return QualityReport(success=all(o.success for o in outcomes), results=outcomes,
                         seconds=time.perf_counter() - started, engine=engine,
                         gx_engine=gx_engine if engine == "spark" else "", input_seconds=sum(counted))


def _run_gx(gx: Any, parsed: list[Expectation], frame: Any, gx_engine: str) -> tuple[dict[int, Any], list[int]]:
    """One suite with every expectation, validated in one ``batch.validate`` on ``frame``: the
    results by suite slot, and for each parsed expectation the slot it reads (see _suite)."""
    context = _ephemeral_context(gx)
    suite, slot_of = _suite(gx, context, parsed)
    if gx_engine == "spark":
        # persist=False: validate() caches the frame itself, so it can also release it afterwards.
        source = context.data_sources.add_spark("lancepart_spark", persist=False)
    else:
        source = context.data_sources.add_pandas("lancepart_pandas")
    batch_definition = source.add_dataframe_asset("batch").add_batch_definition_whole_dataframe("whole")
    batch = batch_definition.get_batch(batch_parameters={"dataframe": frame})
    suite_result = batch.validate(suite, result_format=_RESULT_FORMAT)
    return {r.expectation_config.meta.get(_SLOT): r for r in suite_result.results}, slot_of


def _collect_for_driver(df: Any, parsed: list[Expectation], columns: list[str], max_rows: int,
                        counted: list[float]) -> Any:
    """The pandas DataFrame great_expectations validates on the driver for Spark input ``df``
    (counted, then collected in one Spark job), or None when ``df`` has more than ``max_rows``
    rows or cannot be counted or collected as Arrow (then GE's Spark engine runs on it, as it
    always did, and reports what it can; a package missing on the executors is raised here).
    The count's seconds are appended to ``counted``.

    Only the columns the expectations name are collected (all of them when an escape-hatch
    expectation names none, e.g. ``expect_table_columns_to_match_set``). A column an
    expectation names that ``df`` lacks is left out, so great_expectations reports it missing.
    Values keep Spark's meaning: NaN stays a value distinct from null (nullable pandas float
    dtypes), and a TIMESTAMP becomes the session time zone's wall time, as Spark compares it.
    """
    import pandas as pd
    from pyspark.sql import functions as F

    wanted = _columns_needed(parsed, columns)
    try:
        # a count first: a limit on the collect would shuffle every partition's rows into one
        t = time.perf_counter()
        rows = df.count()
        counted.append(time.perf_counter() - t)
        if rows > max_rows:
            return None
        if not wanted:  # table-level expectations only: the row count is all they read
            return pd.DataFrame(index=pd.RangeIndex(rows))
        table = df.select(*[F.col("`" + c.replace("`", "``") + "`") for c in wanted]).toArrow()
    except Exception as e:  # a package missing on the executors is no data verdict
        _raise_if_missing_module(str(e), "spark")
        return None  # e.g. a column type Arrow cannot carry
    return _arrow_to_pandas(_wall_time(table), floats=True)


def _columns_needed(parsed: list[Expectation], columns: list[str]) -> list[str]:
    """The existing columns the expectations read, in ``columns`` order; all of them when an
    expectation may read columns it does not name (an escape hatch naming no column)."""
    named: set[str] = set()
    for e in parsed:
        cols = _referenced_columns(e)
        if e.type == "great_expectations" and not cols:
            return list(columns)
        named.update(cols)
    return [c for c in columns if c in named]


def _wall_time(table: pa.Table) -> pa.Table:
    """Time-zone-aware timestamps as naive wall time in their zone (Spark hands TIMESTAMP over in
    the session zone, and compares it with a literal in that zone)."""
    import pyarrow.compute as pc

    for i, f in enumerate(table.schema):
        if pa.types.is_timestamp(f.type) and f.type.tz is not None:
            table = table.set_column(i, f.name, pc.local_timestamp(table.column(i)))
    return table


def check(data: Any, expectations: Sequence[Mapping[str, Any] | Expectation] | None, *,
          spark_persist: bool = True, driver_max_rows: int = DRIVER_MAX_ROWS) -> QualityReport:
    """:func:`validate`, then raise ExpectationFailedError (with ``.report``) if any expectation failed.

    >>> check(pa.table({"id": [1, None]}), [{"type": "not_null", "column": "id"}])
    Traceback (most recent call last):
    ...
    lancepart.errors.ExpectationFailedError: 1 of 1 expectations failed: not_null(id): 1 of 2 rows unexpected, \
e.g. [None]
    """
    report = validate(data, expectations, spark_persist=spark_persist, driver_max_rows=driver_max_rows)
    if not report.success:
        err = ExpectationFailedError(report.failure_message())
        err.report = report  # type: ignore[attr-defined]
        raise err
    return report


def _as_frame(data: Any) -> tuple[str, Any, list[str]]:
    """(engine, the DataFrame great_expectations gets, its column names)."""
    # Look the libraries up in sys.modules: if one was never imported, data cannot be its type.
    if type(data).__module__.startswith("pyspark.") and hasattr(data, "sparkSession"):
        return "spark", data, list(data.columns)
    pd = sys.modules.get("pandas")
    if pd is not None and isinstance(data, pd.DataFrame):
        return "pandas", data, [str(c) for c in data.columns]
    if isinstance(data, pa.RecordBatch):
        data = pa.Table.from_batches([data])
    if isinstance(data, pa.Table):
        return "pandas", _arrow_to_pandas(data), list(data.column_names)
    if isinstance(data, pa.RecordBatchReader):
        raise InvalidArgumentError(
            "validate() needs data it can read more than once; a pa.RecordBatchReader can be read only once, "
            "pass reader.read_all() (and write that same table)")
    raise InvalidArgumentError(
        f"data must be a pyspark DataFrame, pandas DataFrame, pa.Table or pa.RecordBatch, got {type(data).__name__}")


def _arrow_to_pandas(table: pa.Table, *, floats: bool = False) -> Any:
    """pandas with nullable integer and boolean dtypes; ``floats``: nullable float dtypes too, so
    NaN stays a value and only a null is null (Spark's meaning; plain pandas folds NaN into null)."""
    import pandas as pd

    # Nullable pandas dtypes keep integers integers when a column has nulls (else 2 -> 2.0 in examples).
    nullable = {
        pa.int8(): pd.Int8Dtype(), pa.int16(): pd.Int16Dtype(), pa.int32(): pd.Int32Dtype(),
        pa.int64(): pd.Int64Dtype(), pa.uint8(): pd.UInt8Dtype(), pa.uint16(): pd.UInt16Dtype(),
        pa.uint32(): pd.UInt32Dtype(), pa.uint64(): pd.UInt64Dtype(), pa.bool_(): pd.BooleanDtype(),
    }
    if floats:
        nullable.update({pa.float32(): pd.Float32Dtype(), pa.float64(): pd.Float64Dtype()})
    return table.to_pandas(types_mapper=nullable.get)


_preloading: list[threading.Thread] = []


def preload() -> None:
    """Start importing great_expectations in a background thread, so the seconds it takes overlap
    with other start-up work (a job calls this before it starts its Spark session). The gate then
    waits for that import to end; an import error is raised by the gate, as without preload."""
    if "great_expectations" in sys.modules or _preloading:
        return

    def run() -> None:
        try:
            _import_gx_now()
        except BaseException:  # the gate imports again and reports it
            pass

    _preloading.append(threading.Thread(target=run, name="lancepart-gx-import", daemon=True))
    _preloading[0].start()


def _import_gx() -> Any:
    if _preloading and _preloading[0] is not threading.current_thread():
        _preloading[0].join()
    return _import_gx_now()


def _import_gx_now() -> Any:
    # Analytics off unless the user decided otherwise; must be set before the first import.
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")
    try:
        import great_expectations as gx
    except ImportError as e:
        raise MissingDependencyError(f"package 'great_expectations' cannot be imported on {platform.node()}: it is "
                                     f"needed for data-quality expectations ({e})") from None

    return gx


def _ephemeral_context(gx: Any) -> Any:
    from great_expectations.data_context.types.base import (
        DataContextConfig,
        InMemoryStoreBackendDefaults,
        ProgressBarsConfig,
    )

    # In-memory stores and no temporary docs site: nothing is written anywhere; no tqdm bars on stderr.
    config = DataContextConfig(
        store_backend_defaults=InMemoryStoreBackendDefaults(init_temp_docs_sites=False),
        progress_bars=ProgressBarsConfig(globally=False, metric_calculations=False),
        analytics_enabled=False,
    )
    return gx.get_context(mode="ephemeral", project_config=config)


def _suite(gx: Any, context: Any, parsed: list[Expectation]) -> tuple[Any, list[int]]:
    """The ExpectationSuite, and for each parsed expectation the suite slot whose result it reads.

    A suite is a set: it silently drops an expectation equal to one it holds (``meta`` is not
    compared), so duplicates in the config share one slot instead of losing their result.
    The suite is added to our own context: an unattached suite would resolve whichever
    context great_expectations considers current in the process.
    """
    from great_expectations.expectations.registry import get_expectation_impl

    suite = context.suites.add(gx.ExpectationSuite(name="lancepart_quality_gate"))
    slots: list[Any] = []
    slot_of: list[int] = []
    ignored = {"id", "rendered_content", "notes", "meta"}  # what the suite ignores when comparing
    for e in parsed:
        cls = getattr(gx.expectations, _GX_CLASSES[e.type][0]) if e.type in _GX_CLASSES \
            else get_expectation_impl(e.gx_expectation)
        kwargs = dict(e.gx_kwargs)
        meta = {**(kwargs.pop("meta", None) or {}), _SLOT: len(slots)}
        try:
            gx_expectation = cls(**kwargs, meta=meta)
        except Exception as err:  # parse_expectations checks these, so only a hand-built Expectation gets here
            where = f"expectations[{e.index}] ({e.type})"
            raise ConfigError(f"{where}: {e.gx_expectation}: {_pydantic_text(err)}") from None
        same = [k for k, s in enumerate(slots)
                if type(s) is type(gx_expectation) and s.dict(exclude=ignored) == gx_expectation.dict(exclude=ignored)]
        if same:
            slot_of.append(same[0])
        else:
            slot_of.append(len(slots))
            slots.append(suite.add_expectation(gx_expectation))
    return suite, slot_of


def _outcome(e: Expectation, result: Any, columns: list[str], engine: str) -> ExpectationOutcome:
    common = {"name": e.label, "type": e.type, "column": e.column, "index": e.index,
              "gx_expectation": e.gx_expectation}
    if result is None:  # not expected: every suite entry gets a result
        return ExpectationOutcome(success=False, message="great_expectations returned no result for it", **common)
    error = _raised(result.exception_info)
    if error is not None:
        missing = [c for c in _referenced_columns(e) if c not in columns]
        if missing:
            message = f"column {missing[0]!r} does not exist (columns: {', '.join(columns) or 'none'})"
        else:
            message = f"great_expectations could not evaluate it: {error}"
        return ExpectationOutcome(success=False, message=message, **common)

    r = result.result or {}
    unexpected = r.get("unexpected_count")
    elements = r.get("element_count")
    if unexpected is None and "element_count" in r and not elements:
        unexpected, elements = 0, 0  # Spark sums an empty batch to null
    observed = _plain(r.get("observed_value"), engine)
    if e.type == "row_count" and observed is not None:
        elements = int(observed)
    examples = _distinct([_plain(v, engine) for v in r.get("partial_unexpected_list") or []])[:_MAX_EXAMPLES]
    success = bool(result.success)
    if unexpected is not None:
        message = f"{unexpected} of {elements} rows unexpected"
        if examples:
            message += f", e.g. {_examples_text(examples)}"
    elif e.type == "row_count":
        message = f"{observed} rows" if success else f"observed {observed} rows, expected {_range_words(e.gx_kwargs)}"
    else:
        message = f"observed {_short(observed)}"
    return ExpectationOutcome(
        success=success, unexpected_count=None if unexpected is None else int(unexpected),
        element_count=None if elements is None else int(elements),
        unexpected_percent=r.get("unexpected_percent"), examples=examples, observed_value=observed,
        message=message, **common)


def _check_dependencies(results: Any, engine: str) -> None:
    """A package missing where the data is computed (a Spark executor without a module the
    DataFrame's Python code imports) makes great_expectations report every expectation as failed
    to evaluate: that is no data-quality verdict. Raise :class:`MissingDependencyError` naming it."""
    for r in results:
        error = _raised(getattr(r, "exception_info", None))
        if error:
            _raise_if_missing_module(error, engine)


def _raise_if_missing_module(error: str, engine: str) -> None:
    from lancepart.storage.error_mapping import missing_module

    package = missing_module(error)
    if package:
        where = "on the Spark executors" if engine == "spark" else f"on {platform.node()}"
        raise MissingDependencyError(
            f"package {package!r} cannot be imported {where}, so the data-quality expectations could not be "
            f"evaluated (no verdict on the data; nothing was published). Ship it to the executors "
            f"(spark-submit --py-files / the executors' Python environment) and run again")


def _raised(exception_info: Any) -> str | None:
    """The exception message if great_expectations failed to evaluate the expectation, else None."""
    if not isinstance(exception_info, Mapping):
        return None
    # Either one {"raised_exception": ...} record or, when a metric failed, one record per metric.
    records = [exception_info] if "raised_exception" in exception_info else list(exception_info.values())
    for rec in records:
        if isinstance(rec, Mapping) and rec.get("raised_exception"):
            return str(rec.get("exception_message") or "unknown error").strip()
    return None


def _referenced_columns(e: Expectation) -> list[str]:
    cols = [e.gx_kwargs[k] for k in _COLUMN_KWARGS if isinstance(e.gx_kwargs.get(k), str)]
    column_list = e.gx_kwargs.get("column_list")
    if isinstance(column_list, (list, tuple)):
        cols += [c for c in column_list if isinstance(c, str)]
    return cols


def _plain(v: Any, engine: str) -> Any:
    """A plain Python value: numpy scalars unwrapped, pandas' NaN/NA/NaT (all 'null' there) as None;
    ``collected`` (Spark input validated with pandas, nullable floats): NaN is a value and stays."""
    if hasattr(v, "item") and type(v).__module__ == "numpy":
        v = v.item()
    if engine == "collected":
        pd = sys.modules.get("pandas")
        if pd is not None and isinstance(v, pd.Timestamp) and v is not pd.NaT:
            return v.to_pydatetime()
        return None if v is None or (pd is not None and (v is pd.NA or v is pd.NaT)) else v
    if engine == "pandas":
        pd = sys.modules.get("pandas")
        if pd is not None and isinstance(v, pd.Timestamp) and v is not pd.NaT:
            return v.to_pydatetime()
        if v is None or (pd is not None and v is pd.NA) or (pd is not None and v is pd.NaT):
            return None
        if isinstance(v, float) and math.isnan(v):
            return None
    return v


def _distinct(values: list[Any]) -> list[Any]:
    out: list[Any] = []
    for v in values:
        if not any(type(v) is type(o) and _equal(v, o) for o in out):
            out.append(v)
    return out


def _equal(a: Any, b: Any) -> bool:
    try:
        return bool(a == b) or (isinstance(a, float) and math.isnan(a) and math.isnan(b))
    except Exception:
        return repr(a) == repr(b)


def _short(v: Any, limit: int = 60) -> str:
    text = repr(v)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _examples_text(examples: list[Any]) -> str:
    return "[" + ", ".join(_short(v) for v in examples) + "]"
