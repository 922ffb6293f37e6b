"""The public surface has one grammar (docs/api.md "The grammar"), pinned here so that a change
to it is a conscious change of this file:

* every public method of ``PartitionedNamespace`` and every ``lps.*`` function, its parameters
  (names, kinds, defaults) and return annotation, compared with :data:`SURFACE`;
* the rules: positional data arguments, then keyword-only options, the shared options last in
  one order (``batch_id``, ``storage_options``, ``commit``, ``max_retries``), ``commit=`` and
  ``max_retries=`` on every method that publishes;
* the old spellings (options by position, ``evolve``, ``lps.search(spark, root, queries,
  column)``, ``storage_options`` by position) keep working with a DeprecationWarning naming what
  to use, until lancepart 0.2; an unknown option is an InvalidArgumentError naming it;
* :class:`lancepart.CommitOptions`: its ``custom_metadata`` reaches the ``__manifest`` commit of
  each publishing operation (``ns.history()``), reserved keys are refused;
* the whole-namespace overwrite (``ns.overwrite``) beside the dynamic partition overwrite;
* every public error and result type is exported from ``lancepart``.
"""

from __future__ import annotations

import dataclasses
import datetime
import inspect
import json
import re
import warnings
from datetime import timedelta

import lance
import pyarrow as pa
import pytest

import lancepart
from lancepart import CommitOptions, CommitResult, HistoryEntry, PartitionedNamespace, PartitionSpec
from lancepart import spark as lps
from lancepart.errors import InvalidArgumentError, LancepartError, NamespaceNotFoundError, RowsOutsideFilterError
from lancepart.storage.manifest import OPERATION_PROPERTY as OPERATION

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), ("event_date", pa.date32()), ("country", pa.utf8())])
BY_COUNTRY = {"id": 1, "fields": [{"field_id": "country", "source_ids": [2], "transform": {"type": "identity"},
                                    "result_type": {"type": "utf8"}}]}
BY_YEAR = [{"source_ids": [1], "transform": {"type": "year"}, "result_type": {"type": "int32"}}]
SO = {"region": "eu-west-1"}
D10 = datetime.date(2025, 12, 10)


class _Session:
    """Stands in for a SparkSession: the functions only register the data source (skipped when
    registered) before they open the namespace."""

    _lancepart_registered = True


class _Frame:
    sparkSession = _Session()


# what each lps function is called with by position, as its previous signature took it, and the
# names of the trailing arguments that became keyword-only
POSITIONAL_CALLS = {
    "write": ((_Frame(), "/nowhere", "append", None, SO), ("mode", "batch_id", "storage_options")),
    "read": ((_Session(), "/nowhere", None, None, SO), ("storage_options",)),
    "compact": ((_Session(), "/nowhere", None, 1024, SO), ("target_rows_per_fragment", "storage_options")),
    "delete": ((_Session(), "/nowhere", "id = 1", SO), ("storage_options",)),
    "create_index": ((_Session(), "/nowhere", "v", "IVF_PQ", SO), ("storage_options",)),
    "drop_index": ((_Session(), "/nowhere", "v_idx", SO), ("storage_options",)),
    "join": ((_Session(), "/nowhere", "/elsewhere", "id", "inner", None, None, None, None, SO), ("storage_options",)),
    "explain_join": (("/nowhere", "/elsewhere", "id", "inner", None, None, SO, False), ("storage_options", "spj")),
}


@pytest.fixture
def opened(monkeypatch) -> list[tuple[str, object]]:
    """Every PartitionedNamespace.open call as (root, storage_options); each one stops the
    operation with NamespaceNotFoundError (nothing else of it runs)."""
    calls: list[tuple[str, object]] = []

    def fake_open(cls, root, *, storage_options=None, version=None, as_of=None):
        calls.append((str(root), storage_options))
        raise NamespaceNotFoundError(f"no namespace at {root} (test)")

    monkeypatch.setattr(PartitionedNamespace, "open", classmethod(fake_open))
    return calls


@pytest.mark.parametrize("name", sorted(POSITIONAL_CALLS))
def test_lps_storage_options_is_keyword_only(name):
    params = inspect.signature(getattr(lps, name)).parameters
    assert params["storage_options"].kind is inspect.Parameter.KEYWORD_ONLY
    positional = [p for p in params.values() if p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD]
    assert "storage_options" not in [p.name for p in positional]


@pytest.mark.parametrize("name", sorted(set(lps.__all__) & {"merge", "search"}))
def test_lps_functions_that_were_keyword_only_stay_so(name):
    assert inspect.signature(getattr(lps, name)).parameters["storage_options"].kind is inspect.Parameter.KEYWORD_ONLY


@pytest.mark.parametrize("name", sorted(POSITIONAL_CALLS))
def test_lps_positional_storage_options_still_work_with_a_deprecation_warning(name, opened):
    args, names = POSITIONAL_CALLS[name]
    with pytest.warns(DeprecationWarning, match=f"{name}\\(\\): passing {', '.join(names)} by position is "
                                                f"deprecated and works until lancepart 0.2; pass"):
        with pytest.raises(NamespaceNotFoundError):
            getattr(lps, name)(*args)
    assert opened == [("/nowhere", SO)]  # the options reached the namespace

    opened.clear()
    keywords = dict(zip(names, args[len(args) - len(names):], strict=True))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the keyword form does not warn
        with pytest.raises(NamespaceNotFoundError):
            getattr(lps, name)(*args[:len(args) - len(names)], **keywords)
    assert opened == [("/nowhere", SO)]


def test_too_many_positional_arguments_is_a_type_error(opened):
    with pytest.raises(TypeError, match="delete\\(\\) takes at most 4 positional arguments"):
        lps.delete(_Session(), "/nowhere", "id = 1", SO, 20)
    with pytest.raises(TypeError, match="multiple values for argument 'storage_options'"):
        lps.delete(_Session(), "/nowhere", "id = 1", SO, storage_options=SO)
    assert opened == []


def test_namespace_create_and_open_take_storage_options_by_keyword(tmp_path):
    for fn in (PartitionedNamespace.create, PartitionedNamespace.open):
        assert inspect.signature(fn).parameters["storage_options"].kind is inspect.Parameter.KEYWORD_ONLY
    root = str(tmp_path / "ns")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        PartitionedNamespace.create(root, SCHEMA, BY_COUNTRY, storage_options={})
        assert PartitionedNamespace.open(root, storage_options={}).current_spec.id == 1
    with pytest.warns(DeprecationWarning, match="PartitionedNamespace.open\\(\\): passing storage_options"):
        assert PartitionedNamespace.open(root, {}).root == root
    with pytest.warns(DeprecationWarning, match="PartitionedNamespace.create\\(\\): passing storage_options"):
        PartitionedNamespace.create(str(tmp_path / "b"), SCHEMA, BY_COUNTRY, {})
    assert PartitionedNamespace.open(str(tmp_path / "b")).current_spec.id == 1


def test_update_spec_and_update_schema_both_return_a_commit_result(tmp_path):
    from lancepart.results import EvolveResult

    ns = PartitionedNamespace.create(str(tmp_path / "ns"), SCHEMA, BY_COUNTRY)
    evolved = ns.update_spec(BY_YEAR)
    assert isinstance(evolved, CommitResult) and isinstance(evolved, EvolveResult)
    assert isinstance(evolved.spec, PartitionSpec) and evolved.spec == ns.current_spec and evolved.spec.id == 2
    assert evolved.manifest_version == ns.manifest_version and evolved.retries == 0
    assert evolved.details["created"] is True and evolved.details["spec_id"] == 2
    assert evolved.details["previous_spec_id"] == 1 and evolved.details["spec"] == evolved.spec.to_json()
    assert evolved.to_dict()["spec"] == evolved.spec.to_json()
    again = ns.update_spec(BY_YEAR)
    assert again.details["created"] is False and again.spec == evolved.spec
    assert again.manifest_version == ns.manifest_version == evolved.manifest_version  # nothing published

    added = ns.update_schema(add=[pa.field("n", pa.int32())])
    assert type(added) is CommitResult and added.details["added"] == ["n"] and added.details["dropped"] == []
    changed = ns.update_schema(add=[pa.field("score", pa.float64())], rename={"country": "region"},
                               widen={"n": pa.int64()}, drop="event_date")
    assert type(changed) is CommitResult and changed.manifest_version == ns.manifest_version
    assert changed.details["added"] == ["score"] and changed.details["renamed"] == {"country": "region"}
    assert changed.details["dropped"] == ["event_date"] and changed.details["widened"] == {"n": "int64"}
    assert [f["name"] for f in changed.details["schema"]["fields"]] == ["id", "region", "n", "score"]
    assert ns.schema.names == ["id", "region", "n", "score"] and ns.schema.field("n").type == pa.int64()


def test_evolve_result_still_answers_as_the_spec_it_used_to_be(tmp_path):
    ns = PartitionedNamespace.create(str(tmp_path / "ns"), SCHEMA, BY_COUNTRY)
    result = ns.update_spec(BY_YEAR)
    with pytest.warns(DeprecationWarning, match="use result.spec.id"):
        assert result.id == 2
    with pytest.warns(DeprecationWarning, match="use result.spec.fields"):
        assert [f.field_id for f in result.fields] == ["event_date_year"]
    with pytest.warns(DeprecationWarning, match="use result.spec.to_json"):
        assert result.to_json() == ns.current_spec.to_json()
    with pytest.warns(DeprecationWarning, match="compare result.spec"):
        assert ns.current_spec == result
    with pytest.warns(DeprecationWarning):
        assert result != PartitionSpec.from_json(BY_COUNTRY)
    with pytest.raises(AttributeError):
        result.no_such_attribute  # noqa: B018


def test_every_public_error_and_result_type_is_exported():
    import lancepart.errors as errors
    import lancepart.results as results
    from lancepart.ops.repair import RepairReport

    error_types = {n for n, c in vars(errors).items()
                   if inspect.isclass(c) and issubclass(c, LancepartError) and c.__module__ == errors.__name__}
    result_types = {n for n, c in vars(results).items() if inspect.isclass(c) and c.__module__ == results.__name__}
    assert "StorageFullError" in error_types and "EvolveResult" in result_types
    for name in sorted(error_types | result_types):
        assert name in lancepart.__all__, name
        assert getattr(lancepart, name) is (getattr(errors, name, None) or getattr(results, name))
    assert lancepart.RepairReport is RepairReport and "RepairReport" in lancepart.__all__


@pytest.mark.parametrize("old,new,name", [
    ("lancepart.datafusion", "lancepart.model.datafusion_udfs", "derived_expression"),
    ("lancepart.compat", "lancepart.v1_tables", "list_v1_tables"),
])
def test_renamed_modules_keep_their_old_name_for_one_release(old, new, name):
    """Modules renamed so that their names say what they hold: the old import still works, with a
    DeprecationWarning naming the new module."""
    import importlib
    import sys

    sys.modules.pop(old, None)
    with pytest.warns(DeprecationWarning, match=new):
        mod = importlib.import_module(old)
    assert getattr(mod, name) is getattr(importlib.import_module(new), name)


# ------------------------------------------------------------------------------- the grammar
def shape(fn) -> str:
    """A callable's parameters (names, kinds, defaults) and return annotation, as one string."""
    sig = inspect.signature(fn)
    params = [p.replace(annotation=inspect.Parameter.empty) for p in sig.parameters.values()]
    ret = sig.return_annotation
    text = str(sig.replace(parameters=params, return_annotation=inspect.Signature.empty))
    return text if ret is inspect.Signature.empty else f"{text} -> {ret}"


#: every public method of PartitionedNamespace; ``repair`` is the class form, ``repair (handle)``
#: what ``ns.repair`` takes
SURFACE = {
    "add_constraint": "(self, name, sql_expr, *, commit=None, max_retries=None) -> CommitResult",
    "changes": "(self, start_version, end_version=None, filter=None, columns=None) -> pa.RecordBatchReader",
    "cleanup": "(self, older_than=datetime.timedelta(days=7), *, allow_short_retention=False, max_workers=8, "
               "dry_run=False) -> CleanupStats",
    "compact": "(self, filter=None, *, target_rows_per_fragment=1048576, min_small_fragments=2, "
               "materialize_deletions_threshold=0.1, compact_manifest_table=True, commit=None, max_retries=None) "
               "-> CommitResult",
    "create": "(root, schema, spec, *, storage_options=None) -> PartitionedNamespace",
    "create_index": "(self, column, index_type, *, name=None, replace=False, min_rows=None, commit=None, "
                    "max_retries=None, **params) -> CommitResult",
    "delete": "(self, filter, *, commit=None, max_retries=None) -> CommitResult",
    "describe_namespace": "(self, id) -> dict[str, str]",
    "drop_constraint": "(self, name, *, commit=None, max_retries=None) -> CommitResult",
    "drop_index": "(self, name, *, commit=None, max_retries=None) -> CommitResult",
    "drop_partitions": "(self, filter, *, dry_run=False, commit=None, max_retries=None) -> CommitResult",
    "dynamic_partition_overwrite": "(self, data, *, expectations=None, chunk_rows=1000000, max_rows_per_file=1048576, "
                                   "index_on_write=True, batch_id=None, commit=None, max_retries=None) -> CommitResult",
    "evolve": "(self, fields, *, commit=None, max_retries=None) -> EvolveResult",
    "explain": "(self, filter) -> str",
    "history": "(self, *, limit=None) -> list[HistoryEntry]",
    "list_constraints": "(self) -> dict[str, str]",
    "list_indexes": "(self) -> list[dict[str, Any]]",
    "merge": "(self, data, on, *, when_matched='update', when_not_matched='insert', batch_id=None, commit=None, "
             "max_retries=None) -> CommitResult",
    "open": "(root, *, version=None, as_of=None, storage_options=None) -> PartitionedNamespace",
    "overwrite": "(self, data, *, where='TRUE', max_rows_per_file=1048576, batch_id=None, commit=None, "
                 "max_retries=None) -> CommitResult",
    "partitions": "(self, filter=None) -> list[PartitionInfo]",
    "refresh": "(self) -> PartitionedNamespace",
    "repair": "(root, *, dry_run=False, storage_options=None, commit=None, max_retries=None) -> RepairReport",
    "repair (handle)": "(*, dry_run=False, commit=None, max_retries=None) -> RepairReport",
    "rollback": "(self, version, *, commit=None, max_retries=None) -> CommitResult",
    "scan_plan": "(self, filter) -> tuple[list[PartitionInfo], str | None, str | None]",
    "scan_polars": "(self, filter=None, columns=None) -> polars.LazyFrame",
    "search": "(self, column, query, k=10, filter=None, columns=None, **params) -> pa.Table",
    "search_text": "(self, column, query, k=10, filter=None, columns=None) -> pa.Table",
    "snapshot": "(self) -> ManifestSnapshot",
    "sql": "(self, query, *, table='t', ctx=None) -> datafusion.DataFrame",
    "to_batches": "(self, filter=None, columns=None, *, batch_size=None) -> pa.RecordBatchReader",
    "to_duckdb": "(self, table_name, filter=None, columns=None, *, connection=None) -> duckdb.DuckDBPyConnection",
    "to_pandas": "(self, filter=None, columns=None) -> pandas.DataFrame",
    "to_polars": "(self, filter=None, columns=None) -> polars.DataFrame",
    "to_pyarrow_dataset": "(self, filter=None, columns=None) -> pyarrow.dataset.Dataset",
    "to_table": "(self, filter=None, columns=None) -> pa.Table",
    "update": "(self, set, filter=None, *, batch_id=None, commit=None, max_retries=None) -> CommitResult",
    "update_schema": "(self, add=None, rename=None, drop=None, widen=None, *, commit=None, max_retries=None) "
                     "-> CommitResult",
    "update_spec": "(self, fields, *, commit=None, max_retries=None) -> EvolveResult",
    "verify": "(self, *, deep=False) -> VerifyReport",
    "write": "(self, data, *, mode='append', where=None, expectations=None, chunk_rows=1000000, "
             "max_rows_per_file=1048576, index_on_write=True, batch_id=None, commit=None, max_retries=None) "
             "-> CommitResult",
}

#: every function of lancepart.spark (lps)
LPS_SURFACE = {
    "compact": "(spark, root, filter=None, *, target_rows_per_fragment=1048576, min_small_fragments=2, "
               "materialize_deletions_threshold=0.1, compact_manifest_table=True, tables_per_task=None, "
               "storage_options=None, commit=None, max_retries=None) -> CommitResult",
    "create_index": "(spark, root, column, index_type, *, name=None, replace=False, min_rows=None, "
                    "storage_options=None, commit=None, max_retries=None, **params) -> CommitResult",
    "delete": "(spark, root, filter, *, storage_options=None, commit=None, max_retries=None) -> CommitResult",
    "drop_index": "(spark, root, name, *, storage_options=None, commit=None, max_retries=None) -> CommitResult",
    "explain_join": "(left_root, right_root, on, how='inner', filter_left=None, filter_right=None, *, spj=True, "
                    "storage_options=None) -> JoinPlan",
    "join": "(spark, left_root, right_root, on, how='inner', filter_left=None, filter_right=None, columns_left=None, "
            "columns_right=None, *, right_suffix='_right', spj=True, storage_options=None) -> DataFrame",
    "last_result": "(root) -> CommitResult | None",
    "merge": "(df, root, on, *, when_matched='update', when_not_matched='insert', flush_rows=1000000, "
             "max_rows_per_file=1048576, batch_id=None, storage_options=None, commit=None, max_retries=None) "
             "-> CommitResult",
    "read": "(spark, root, filter=None, columns=None, *, split_rows=None, storage_options=None) -> DataFrame",
    "register": "(spark, strict=True) -> None",
    "search": "(spark, root, column, queries, k=10, filter=None, columns=None, *, query_column='query', "
              "id_column=None, storage_options=None, **params) -> DataFrame",
    "spj_compatibility": "(left_ns, right_ns, left_keys, right_keys) -> Compatibility",
    "update": "(spark, root, set, filter=None, *, batch_id=None, storage_options=None, commit=None, max_retries=None) "
              "-> CommitResult",
    "write": "(df, root, *, mode='append', expectations=None, flush_rows=1000000, max_rows_per_file=1048576, "
             "index_on_write=True, write_threads=8, batch_id=None, storage_options=None, commit=None, "
             "max_retries=None) -> CommitResult",
}

#: the methods that publish a __manifest commit: each takes commit= and max_retries=, last
PUBLISHING = ("add_constraint", "compact", "create_index", "delete", "drop_constraint", "drop_index", "drop_partitions",
              "dynamic_partition_overwrite", "evolve", "merge", "overwrite", "repair", "repair (handle)", "rollback",
              "update", "update_schema", "update_spec", "write")
LPS_PUBLISHING = ("compact", "create_index", "delete", "drop_index", "merge", "update", "write")
#: the options every method that has them takes in this order, after its own options
SHARED = ("dry_run", "batch_id", "storage_options", "commit", "max_retries")
#: positional parameters with a default: the selection (filter), the projection (columns) and the
#: parts of what the method is asked (a range's end, a search's k, a schema change, a retention)
POSITIONAL_DEFAULTS = {"filter", "columns", "end_version", "k", "add", "rename", "drop", "widen", "older_than",
                       "how", "filter_left", "filter_right", "columns_left", "columns_right", "strict"}


def namespace_methods() -> dict[str, object]:
    methods = {n: getattr(PartitionedNamespace, n) for n, v in vars(PartitionedNamespace).items()
               if not n.startswith("_") and not isinstance(v, property)}
    methods["repair (handle)"] = vars(PartitionedNamespace)["repair"]._on_instance.__get__(object())
    return methods


def lps_functions() -> dict[str, object]:
    return {n: getattr(lps, n) for n in lps.__all__ if inspect.isfunction(getattr(lps, n))}


def test_every_public_method_is_pinned():
    """A method added, removed or changed shows here: change SURFACE (and docs/api.md) with it."""
    methods = namespace_methods()
    assert sorted(methods) == sorted(SURFACE)
    changed = {n: shape(f) for n, f in methods.items() if shape(f) != SURFACE[n]}
    assert not changed, changed


def test_every_lps_function_is_pinned():
    functions = lps_functions()
    assert sorted(functions) == sorted(LPS_SURFACE)
    changed = {n: shape(f) for n, f in functions.items() if shape(f) != LPS_SURFACE[n]}
    assert not changed, changed


@pytest.mark.parametrize("family", ["ns", "lps"])
def test_one_grammar(family):
    """Positional: the data arguments; every other option is keyword-only; the shared options
    come last, in one order; every publishing method takes commit= and max_retries= last."""
    functions, publishing = (namespace_methods(), PUBLISHING) if family == "ns" else (lps_functions(), LPS_PUBLISHING)
    problems = []
    for name, fn in sorted(functions.items()):
        params = inspect.signature(fn).parameters.values()
        loose = [p.name for p in params if p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD
                 and p.default is not inspect.Parameter.empty and p.name not in POSITIONAL_DEFAULTS]
        if loose:
            problems.append(f"{name}: options {loose} are not keyword-only")
        options = [p.name for p in params if p.kind is inspect.Parameter.KEYWORD_ONLY]
        shared = [o for o in options if o in SHARED]
        if shared != sorted(shared, key=SHARED.index) or options[len(options) - len(shared):] != shared:
            problems.append(f"{name}: the shared options {shared} are not last in the order {SHARED}: {options}")
        if (name in publishing) != (options[-2:] == ["commit", "max_retries"]):
            problems.append(f"{name}: publishes={name in publishing}, options {options}")
        if any(p.default is not inspect.Parameter.empty and p.name == "max_retries" and p.default is not None
               for p in params):
            problems.append(f"{name}: max_retries defaults to None (CommitOptions says the default)")
    assert not problems, "\n".join(problems)


def test_the_documented_defaults_are_the_engine_defaults():
    from lancepart.arguments import DEFAULT_MAX_RETRIES
    from lancepart.maintenance import compact as engine

    params = inspect.signature(PartitionedNamespace.compact).parameters
    assert params["target_rows_per_fragment"].default == engine.DEFAULT_TARGET_ROWS
    assert params["min_small_fragments"].default == engine.DEFAULT_MIN_SMALL_FRAGMENTS
    assert params["materialize_deletions_threshold"].default == engine.DEFAULT_DELETIONS_THRESHOLD
    assert inspect.signature(engine.compact).parameters["max_retries"].default == DEFAULT_MAX_RETRIES
    assert lancepart.CommitOptions is CommitOptions and lancepart.HistoryEntry is HistoryEntry
    assert [f.name for f in dataclasses.fields(CommitOptions)] == ["max_retries", "custom_metadata"]
    assert CommitOptions() == CommitOptions(max_retries=None, custom_metadata=None)


# ------------------------------------------------------------------------------- old spellings
def events(ids, countries) -> pa.Table:
    return pa.table({"id": pa.array(ids, pa.int64()), "event_date": pa.array([D10] * len(ids), pa.date32()),
                     "country": countries}, schema=SCHEMA)


@pytest.fixture
def ns(tmp_path) -> PartitionedNamespace:
    ns = PartitionedNamespace.create(str(tmp_path / "ns"), SCHEMA, BY_COUNTRY)
    ns.write(events([1, 2, 3], ["US", "FR", "DE"]))
    return ns


def deprecated(match: str):
    return pytest.warns(DeprecationWarning, match=match)


def test_options_by_position_still_work_with_a_deprecation_warning(ns):
    until = "works until lancepart 0.2"
    with deprecated(rf"PartitionedNamespace.write\(\): passing mode, batch_id by position .*{until}; "
                    r"pass mode=\.\.\., batch_id=\.\.\. as keyword arguments"):
        r = ns.write(events([4], ["US"]), "overwrite", "b-old")
    assert r.batch_id == "b-old" and sorted(ns.to_table("country = 'US'").column("id").to_pylist()) == [4]
    with deprecated(rf"PartitionedNamespace.merge\(\): passing when_matched by position .*{until}"):
        r = ns.merge(events([4, 9], ["US", "US"]), ["id"], "ignore")
    assert r.details["rows_updated"] == 0 and r.details["rows_inserted"] == 1
    with deprecated(rf"compact\(\): passing target_rows_per_fragment by position .*{until}"):
        ns.compact(None, 1024)
    with deprecated(rf"drop_partitions\(\): passing dry_run by position .*{until}"):
        assert ns.drop_partitions("country = 'DE'", True).details["dry_run"] is True
    with deprecated(rf"history\(\): passing limit by position .*{until}"):
        assert len(ns.history(2)) == 2
    with deprecated(rf"verify\(\): passing deep by position .*{until}"):
        assert ns.verify(True).deep
    with deprecated(rf"PartitionedNamespace.repair\(\): passing dry_run by position .*{until}"):
        assert ns.repair(True).dry_run
    with deprecated(rf"PartitionedNamespace.repair\(\): passing dry_run by position .*{until}"):
        assert PartitionedNamespace.repair(ns.root, True).dry_run
    with deprecated(rf"cleanup\(\): passing dry_run by position .*{until}"):
        assert ns.cleanup(timedelta(days=7), True).dry_run
    with deprecated(rf"sql\(\): passing table by position .*{until}"):
        assert ns.sql("SELECT count(*) AS n FROM e", "e").to_arrow_table().column("n").to_pylist() == [4]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the keyword spellings do not warn
        ns.write(events([5], ["FR"]), mode="overwrite", batch_id="b-new", max_retries=3)
        ns.merge(events([5], ["FR"]), ["id"], when_matched="ignore", max_retries=3)
        ns.history(limit=1)
        ns.verify(deep=False)
        ns.changes(1, None, "country = 'FR'", ["id"]).read_all()  # filter and columns by position too


def test_evolve_is_update_spec_with_a_deprecation_warning(ns):
    with deprecated(r"ns.evolve\(\) is deprecated and works until lancepart 0.2: use ns.update_spec\(\)"):
        evolved = ns.evolve(BY_YEAR, commit=CommitOptions(custom_metadata={"ticket": "T-1"}))
    assert evolved.spec == ns.current_spec and evolved.spec.id == 2
    assert ns.history(limit=1)[0].properties["ticket"] == "T-1"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert ns.update_spec(BY_YEAR).details["created"] is False


def test_lps_search_takes_column_then_queries_like_ns_search(opened):
    """``lps.search(spark, root, column, queries)`` in the order of ``ns.search(column, query)``;
    the old order still works for one release (the queries are a DataFrame, the column a str)."""
    queries = object()  # stands in for the queries DataFrame: the namespace is opened first
    with deprecated(r"lps.search\(spark, root, queries, column, \.\.\.\) is deprecated and works until lancepart "
                    r"0.2: pass lps.search\(spark, root, column, queries, \.\.\.\)"):
        with pytest.raises(NamespaceNotFoundError):
            lps.search(_Session(), "/nowhere", queries, "v", k=3)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(NamespaceNotFoundError):
            lps.search(_Session(), "/nowhere", "v", queries, 3)
    assert opened == [("/nowhere", None), ("/nowhere", None)]


@pytest.mark.parametrize(("call", "named"), [
    (lambda ns: ns.write(events([7], ["US"]), max_retrys=3), "max_retrys="),
    (lambda ns: ns.write(events([7], ["US"]), mode="overwrite", where="country = 'US'", chunk_rows=5),
     "['chunk_rows']"),
    (lambda ns: ns.compact(target_rows=5), "target_rows="),
    (lambda ns: ns.drop_partitions("country = 'US'", force=True), "force="),
    (lambda ns: ns.delete("id = 1", commit={"max_retries": 3}), "commit must be a lancepart.CommitOptions"),
    (lambda ns: ns.cleanup(workers=2), "workers="),
    (lambda ns: ns.to_table(colums=["id"]), "colums="),
    (lambda ns: ns.overwrite(events([7], ["US"]), were="TRUE"), "were="),
    (lambda ns: ns.merge(events([7], ["US"]), ["id"], on_conflict="x"), "on_conflict="),
])
def test_unknown_options_are_refused_naming_them(ns, call, named):
    version = ns.manifest_version
    with pytest.raises(InvalidArgumentError, match=re.escape(named)):
        call(ns)
    assert PartitionedNamespace.open(ns.root).manifest_version == version  # nothing published


# ------------------------------------------------------------------------------- commit options
def test_commit_options_are_checked():
    with pytest.raises(InvalidArgumentError, match=r"custom_metadata key 'lancepart\.operation' is reserved"):
        CommitOptions(custom_metadata={"lancepart.operation": "mine"})
    with pytest.raises(InvalidArgumentError, match=r"custom_metadata key 'LancePart\.batch_id' is reserved"):
        CommitOptions(custom_metadata={"LancePart.batch_id": "x"})
    with pytest.raises(InvalidArgumentError, match=r"custom_metadata\['n'\] must be a str, got int 5"):
        CommitOptions(custom_metadata={"n": 5})
    with pytest.raises(InvalidArgumentError, match="max_retries must be an integer >= 0"):
        CommitOptions(max_retries=-1)
    with pytest.raises(InvalidArgumentError, match="custom_metadata must be a mapping"):
        CommitOptions(custom_metadata=[("a", "b")])
    md = {"a": "1"}
    options = CommitOptions(custom_metadata=md)
    md["b"] = "2"
    assert options.custom_metadata == {"a": "1"}  # a copy: the caller's dict changing later changes nothing


def test_max_retries_is_still_accepted_beside_commit(ns):
    from lancepart.arguments import commit_settings

    assert commit_settings(None, None) == (20, {})
    assert commit_settings(None, 3) == (3, {})
    assert commit_settings(CommitOptions(max_retries=4), None) == (4, {})
    assert commit_settings(CommitOptions(max_retries=4), 4) == (4, {})
    with pytest.raises(InvalidArgumentError, match="max_retries=3 and commit=CommitOptions\\(max_retries=4\\) "
                                                   "disagree"):
        ns.delete("id = 1", commit=CommitOptions(max_retries=4), max_retries=3)
    assert ns.delete("id = 1", max_retries=0).details["rows_deleted"] == 1


MD = {"job": "nightly-7", "owner": "data-eng"}

# operation -> what it runs on the namespace of the ns fixture (countries US, FR, DE) with commit=
OPERATIONS = {
    "write": lambda ns, c: ns.write(events([10], ["US"]), commit=c),
    "dynamic_partition_overwrite": lambda ns, c: ns.dynamic_partition_overwrite(events([10], ["US"]), commit=c),
    "overwrite": lambda ns, c: ns.overwrite(events([10], ["US"]), commit=c),
    "replace-where": lambda ns, c: ns.write(events([10], ["US"]), mode="overwrite", where="country = 'US'",
                                           commit=c),
    "merge": lambda ns, c: ns.merge(events([1, 11], ["FR", "US"]), ["id"], commit=c),
    "delete": lambda ns, c: ns.delete("id = 2", commit=c),
    "update": lambda ns, c: ns.update({"country": "'JP'"}, "id = 2", commit=c),
    "compact": lambda ns, c: (ns.write(events([12], ["US"])), ns.compact(commit=c)),
    "drop_partitions": lambda ns, c: ns.drop_partitions("country = 'DE'", commit=c),
    "rollback": lambda ns, c: (ns.write(events([13], ["US"])), ns.rollback(ns.manifest_version - 1, commit=c)),
    "update_schema": lambda ns, c: ns.update_schema(add=[pa.field("score", pa.float64())], commit=c),
    "update_spec": lambda ns, c: ns.update_spec(BY_YEAR, commit=c),
    "create_index": lambda ns, c: ns.create_index("id", "BTREE", min_rows=0, commit=c),
    "drop_index": lambda ns, c: (ns.create_index("id", "BTREE", min_rows=0), ns.drop_index("id_btree", commit=c)),
    "add_constraint": lambda ns, c: ns.add_constraint("id_pos", "id > 0", commit=c),
    "drop_constraint": lambda ns, c: (ns.add_constraint("id_pos", "id > 0"), ns.drop_constraint("id_pos", commit=c)),
}


@pytest.mark.parametrize("operation", sorted(OPERATIONS))
def test_custom_metadata_reaches_the_manifest_commit(ns, operation):
    """``commit=CommitOptions(custom_metadata=...)`` is recorded in the transaction of the
    operation's __manifest commit: ``ns.history()`` shows it beside lancepart's own properties,
    and only on the commits of that operation."""
    before = ns.manifest_version
    OPERATIONS[operation](ns, CommitOptions(max_retries=5, custom_metadata=MD))
    fresh = PartitionedNamespace.open(ns.root)
    assert fresh.manifest_version > before
    entries = [e for e in fresh.history() if e.version > before]
    tagged = [e for e in entries if {k: e.properties.get(k) for k in MD} == MD]
    assert tagged, [(e.operation, e.properties) for e in entries]
    assert all(isinstance(e, HistoryEntry) and e.properties.get(OPERATION) for e in tagged)
    untagged = [e for e in fresh.history() if e.version <= before]
    assert not any("job" in e.properties for e in untagged)


def test_custom_metadata_of_the_four_main_operations_in_one_history(ns):
    """write, merge, delete, compact: each commit carries its own metadata, ``ns.history()``
    lists them newest first with lancepart's operation name."""
    for i, run in enumerate((lambda c: ns.write(events([20], ["US"]), commit=c),
                             lambda c: ns.merge(events([20], ["FR"]), ["id"], commit=c),
                             lambda c: ns.delete("id = 3", commit=c),
                             lambda c: ns.compact(commit=c))):
        run(CommitOptions(custom_metadata={"step": str(i)}))
    steps = [(e.properties.get("step"), e.properties[OPERATION]) for e in ns.history() if "step" in e.properties]
    assert steps == [("3", "compaction publish"), ("2", "delete"), ("1", "merge"), ("0", "append")]


def test_repair_records_custom_metadata(tmp_path):
    """The restoring commit of a repair carries the custom metadata too."""
    import lance.namespace as lns

    ns = PartitionedNamespace.create(str(tmp_path / "ns"), SCHEMA, BY_COUNTRY)
    ns.write(events([1, 2], ["US", "FR"]))
    manifest = lance.dataset(ns.root + "/__manifest")
    manifest.update_metadata({"lance.namespace.manifest.writer_feature_flags": None})  # as before lancepart set it
    lns.DirectoryNamespace(root=ns.root).create_namespace(lns.CreateNamespaceRequest(id=["foreign"]))
    report = PartitionedNamespace.repair(ns.root, commit=CommitOptions(custom_metadata={"incident": "INC-9"}))
    assert report.needed and report.new_version is not None
    entry = next(e for e in PartitionedNamespace.open(ns.root).history() if e.version == report.new_version)
    assert entry.properties["incident"] == "INC-9"


# ------------------------------------------------------------------------------- overwrite
def test_overwrite_replaces_the_whole_namespace_in_one_commit(ns):
    """``ns.overwrite(data)``: every published row is replaced by ``data`` in ONE __manifest
    commit; partitions the input has no rows for (FR, DE) keep no row. The dynamic partition
    overwrite (``mode="overwrite"``) beside it keeps them."""
    dynamic = ns.dynamic_partition_overwrite(events([30], ["US"]))
    assert sorted(ns.to_table().column("country").to_pylist()) == ["DE", "FR", "US"]  # others kept
    assert dynamic.partitions_touched == 1
    before = ns.manifest_version
    result = ns.overwrite(events([40, 41, 42], ["US", "US", "NL"]), batch_id="full-2025-12-10")
    assert result.manifest_version == before + 1  # one commit
    assert [e.version for e in ns.history() if e.version > before] == [before + 1]
    assert result.details["rows_deleted"] == 3 and result.rows_written == 3
    fresh = PartitionedNamespace.open(ns.root)
    assert sorted(fresh.to_table().to_pylist(), key=lambda r: r["id"]) == sorted(
        events([40, 41, 42], ["US", "US", "NL"]).to_pylist(), key=lambda r: r["id"])
    for gone in ("FR", "DE"):  # not in the input: their partitions hold no row any more
        assert fresh.to_table(f"country = '{gone}'").num_rows == 0
    # read with plain pylance at each published read_version: the same rows
    published = []
    for p in fresh.partitions():
        published += lance.dataset(f"{fresh.root}/{p.location}", version=p.read_version).to_table().to_pylist()
    assert sorted(r["id"] for r in published) == [40, 41, 42]


def test_overwrite_is_exactly_once_with_a_batch_id(ns):
    first = ns.overwrite(events([50], ["FR"]), batch_id="b-50")
    again = ns.overwrite(events([51, 52], ["US", "DE"]), batch_id="b-50")  # a rerun: nothing happens
    assert not first.skipped and again.skipped and again.batch_id == "b-50"
    assert again.manifest_version == first.manifest_version == ns.manifest_version
    assert ns.to_table().column("id").to_pylist() == [50]
    assert ns.history(limit=1)[0].batch_id == "b-50"


def test_overwrite_where_replaces_the_matching_rows_only(ns):
    r = ns.overwrite(events([60], ["FR"]), where="country IN ('FR', 'DE')")
    assert r.details["rows_deleted"] == 2
    assert sorted(ns.to_table().column("id").to_pylist()) == [1, 60]
    with pytest.raises(RowsOutsideFilterError):  # every input row must match where
        ns.overwrite(events([61], ["US"]), where="country = 'FR'")
    with pytest.raises(InvalidArgumentError, match="needs mode='overwrite'"):
        ns.write(events([61], ["US"]), where="country = 'US'")


def test_a_time_travel_handle_cannot_overwrite(ns):
    old = PartitionedNamespace.open(ns.root, version=ns.manifest_version)
    for name, call in {"overwrite": lambda: old.overwrite(events([1], ["US"])),
                       "write": lambda: old.dynamic_partition_overwrite(events([1], ["US"])),
                       "update_spec": lambda: old.update_spec(BY_YEAR)}.items():
        with pytest.raises(InvalidArgumentError, match=f"{name}: this handle reads __manifest version"):
            call()
    assert PartitionedNamespace.open(ns.root).manifest_version == old.manifest_version


def test_overwrite_from_the_command_line(ns, tmp_path, capsys):
    import pyarrow.parquet as pq

    from lancepart.cli import main

    pq.write_table(events([70, 71], ["US", "NL"]), tmp_path / "all.parquet")
    before = ns.manifest_version
    capsys.readouterr()
    assert main(["overwrite", ns.root, str(tmp_path / "all.parquet"), "--batch-id", "cli-1",
                 "--commit-metadata", "job=cli", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["manifest_version"] == before + 1 and out["where"] == "TRUE" and out["details"]["rows_deleted"] == 3
    fresh = PartitionedNamespace.open(ns.root)
    assert sorted(fresh.to_table().column("id").to_pylist()) == [70, 71]
    assert fresh.history(limit=1)[0].properties["job"] == "cli"
    assert main(["overwrite", ns.root, str(tmp_path / "all.parquet"), "--batch-id", "cli-1"]) == 0  # a rerun
    assert "already published" in capsys.readouterr().out
    assert main(["delete", ns.root, "--filter", "id = 70", "--commit-metadata", "lancepart.x=1"]) == 2
    assert "reserved" in capsys.readouterr().err


@pytest.mark.spark
def test_lps_functions_record_custom_metadata(spark, ns):
    """lps.write, lps.merge, lps.delete, lps.update, lps.compact, lps.create_index, lps.drop_index:
    the same commit options as the namespace's methods, recorded in their __manifest commits."""
    def frame(ids, countries):
        return spark.createDataFrame([(i, D10, c) for i, c in zip(ids, countries, strict=True)],
                                     "id long, event_date date, country string")

    def commit(step: str) -> CommitOptions:
        return CommitOptions(max_retries=5, custom_metadata={"step": step})

    lps.write(frame([80, 81], ["US", "NL"]), ns.root, batch_id="spark-1", commit=commit("write"))
    lps.merge(frame([80, 82], ["FR", "US"]), ns.root, ["id"], when_matched="update", commit=commit("merge"))
    lps.delete(spark, ns.root, "id = 81", commit=commit("delete"))
    lps.update(spark, ns.root, {"country": "'DE'"}, "id = 82", commit=commit("update"))
    lps.compact(spark, ns.root, commit=commit("compact"))
    lps.create_index(spark, ns.root, "id", "BTREE", min_rows=0, commit=commit("create_index"))
    lps.drop_index(spark, ns.root, "id_btree", max_retries=5, commit=commit("drop_index"))
    history = PartitionedNamespace.open(ns.root).history()
    steps = {e.properties["step"] for e in history if "step" in e.properties}
    assert steps == {"write", "merge", "delete", "update", "compact", "create_index", "drop_index"}
    assert next(e for e in history if e.properties.get("step") == "write").batch_id == "spark-1"
    assert sorted(PartitionedNamespace.open(ns.root).to_table().column("id").to_pylist()) == [1, 2, 3, 80, 82]
