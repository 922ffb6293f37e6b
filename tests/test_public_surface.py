"""The public surface is consistent (docs/api.md): every ``lps.*`` function and
``PartitionedNamespace`` constructor takes ``storage_options`` as a keyword (the positional form
still works for one release, with a DeprecationWarning), and ``evolve`` and ``update_schema``
both return a CommitResult saying what changed, and every public error and result type is
exported from ``lancepart``.
"""

from __future__ import annotations

import inspect
import warnings

import pyarrow as pa
import pytest

import lancepart
from lancepart import CommitResult, PartitionedNamespace, PartitionSpec
from lancepart import spark as lps
from lancepart.errors import LancepartError, NamespaceNotFoundError

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), ("event_date", pa.date32()), ("country", pa.utf8())])
BY_COUNTRY = {"id": 1, "fields": [{"field_id": "country", "source_ids": [2], "transform": {"type": "identity"},
                                    "result_type": {"type": "utf8"}}]}
BY_YEAR = [{"source_ids": [1], "transform": {"type": "year"}, "result_type": {"type": "int32"}}]
SO = {"region": "eu-west-1"}


class _Session:
    """Stands in for a SparkSession: the functions only register the data source (skipped when
    registered) before they open the namespace."""

    _lancepart_registered = True


class _Frame:
    sparkSession = _Session()


# what each lps function is called with by position, up to and including storage_options
# (explain_join: and spj after it), as the previous signatures took them
POSITIONAL_CALLS = {
    "write": (_Frame(), "/nowhere", "append", None, SO),
    "read": (_Session(), "/nowhere", None, None, SO),
    "compact": (_Session(), "/nowhere", None, 1024, SO),
    "delete": (_Session(), "/nowhere", "id = 1", SO),
    "create_index": (_Session(), "/nowhere", "v", "IVF_PQ", SO),
    "drop_index": (_Session(), "/nowhere", "v_idx", SO),
    "join": (_Session(), "/nowhere", "/elsewhere", "id", "inner", None, None, None, None, SO),
    "explain_join": ("/nowhere", "/elsewhere", "id", "inner", None, None, SO, False),
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
    args = POSITIONAL_CALLS[name]
    with pytest.warns(DeprecationWarning, match=f"{name}\\(\\): passing storage_options.* by position is deprecated"):
        with pytest.raises(NamespaceNotFoundError):
            getattr(lps, name)(*args)
    assert opened == [("/nowhere", SO)]  # the options reached the namespace

    opened.clear()
    keywords = dict(zip(("storage_options", "spj"), args[len(args) - (2 if name == "explain_join" else 1):],
                        strict=False))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the keyword form does not warn
        with pytest.raises(NamespaceNotFoundError):
            getattr(lps, name)(*args[:len(args) - len(keywords)], **keywords)
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


def test_evolve_and_update_schema_both_return_a_commit_result(tmp_path):
    from lancepart.results import EvolveResult

    ns = PartitionedNamespace.create(str(tmp_path / "ns"), SCHEMA, BY_COUNTRY)
    evolved = ns.evolve(BY_YEAR)
    assert isinstance(evolved, CommitResult) and isinstance(evolved, EvolveResult)
    assert isinstance(evolved.spec, PartitionSpec) and evolved.spec == ns.current_spec and evolved.spec.id == 2
    assert evolved.manifest_version == ns.manifest_version and evolved.retries == 0
    assert evolved.details["created"] is True and evolved.details["spec_id"] == 2
    assert evolved.details["previous_spec_id"] == 1 and evolved.details["spec"] == evolved.spec.to_json()
    assert evolved.to_dict()["spec"] == evolved.spec.to_json()
    again = ns.evolve(BY_YEAR)
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
    result = ns.evolve(BY_YEAR)
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
