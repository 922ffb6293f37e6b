"""Modules moved into packages keep their old names (docs/development.md "Where things live").

``import lancepart.spec`` is ``lancepart.model.spec``: the same module object, so a name imported
either way, a pickle and a monkeypatch all reach the one module. The public names import without
a warning; the renamed modules that go in 0.2 (docs/api.md) warn with a DeprecationWarning.
"""

from __future__ import annotations

import importlib
import pickle
import sys
import warnings

import pytest

import lancepart

# old name -> (its home, a name it defines)
MOVED = {
    "lancepart.spec": ("lancepart.model.spec", "PartitionSpec"),
    "lancepart.transforms": ("lancepart.model.transforms", "apply"),
    "lancepart.murmur3": ("lancepart.model.murmur3", "bucket"),
    "lancepart.projection": ("lancepart.model.projection", "MAX_POINTS"),
    "lancepart.predicates": ("lancepart.model.predicates", "_sql_literal"),
    "lancepart.ids": ("lancepart.model.ids", "partition_ids"),
    "lancepart.keys": ("lancepart.model.keys", "key_values"),
    "lancepart.datafusion_udfs": ("lancepart.model.datafusion_udfs", "register_udfs"),
    "lancepart.read.visitors": ("lancepart.model.visitors", "_SpecProjector"),
    "lancepart.lance_env": ("lancepart.storage.lance_env", None),
    "lancepart.lance_io": ("lancepart.storage.lance_io", None),
    "lancepart.manifest": ("lancepart.storage.manifest", "Manifest"),
    "lancepart.table_commit": ("lancepart.storage.table_commit", "DROPS_UNPUBLISHED"),
    "lancepart.error_mapping": ("lancepart.storage.error_mapping", "table_errors"),
    "lancepart.schema_evolution": ("lancepart.evolution.schema_evolution", "SCHEMA_KEY"),
    "lancepart.spec_evolution": ("lancepart.evolution.spec_evolution", None),
    "lancepart.file_format": ("lancepart.evolution.file_format", "set_data_storage_version"),
    "lancepart.history": ("lancepart.ops.history", None),
    "lancepart.quality": ("lancepart.ops.quality", "check"),
    "lancepart.repair": ("lancepart.ops.repair", "RepairReport"),
    "lancepart.durations": ("lancepart.util.durations", "parse_duration"),
    "lancepart.parallel": ("lancepart.util.parallel", None),
    "lancepart.faults": ("lancepart.util.faults", None),
    "lancepart.sample": ("lancepart.util.sample", "demo_events"),
    "lancepart.cli_args": ("lancepart.cli.args", "UsageError"),
    "lancepart.cli_read": ("lancepart.cli.read", None),
    "lancepart.read.prune": ("lancepart.read.manifest_query", "prune"),
}
DEPRECATED = {
    "lancepart.compat": ("lancepart.v1_tables", "list_v1_tables"),
    "lancepart.datafusion": ("lancepart.model.datafusion_udfs", "derived_expression"),
}
# public modules that did not move: they stay where they were
STAYED = ["lancepart.errors", "lancepart.namespace", "lancepart.results", "lancepart.inputs", "lancepart.stats",
          "lancepart.config", "lancepart.v1_tables", "lancepart.index", "lancepart.spark", "lancepart.cli"]


def _forget(name: str) -> None:
    """Forget an old name (as before its first import); its new module stays imported."""
    sys.modules.pop(name, None)
    parent, _, child = name.rpartition(".")
    vars(importlib.import_module(parent)).pop(child, None)


def _fresh_import(name: str):
    _forget(name)
    return importlib.import_module(name)


@pytest.mark.parametrize("old", sorted(MOVED))
def test_an_old_public_name_is_the_new_module_without_a_warning(old):
    new, name = MOVED[old]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        module = _fresh_import(old)
        assert module is importlib.import_module(new)
        assert module.__name__ == new and module.__spec__.name == new  # pickles name the new home
        if name is not None:
            scope: dict = {}
            exec(f"from {old} import {name}", scope)
            assert scope[name] is getattr(module, name)


@pytest.mark.parametrize("old", sorted(MOVED))
def test_an_old_name_is_an_attribute_of_its_parent(old):
    parent, _, child = old.rpartition(".")
    _forget(old)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        scope: dict = {}
        exec(f"from {parent} import {child}", scope)
    assert scope[child] is importlib.import_module(MOVED[old][0])


def test_an_old_top_level_name_is_an_attribute_of_the_package():
    assert lancepart.spec is importlib.import_module("lancepart.model.spec")
    assert lancepart.murmur3 is importlib.import_module("lancepart.model.murmur3")
    with pytest.raises(AttributeError):
        lancepart.no_such_module  # noqa: B018


@pytest.mark.parametrize("old", sorted(DEPRECATED))
def test_a_deprecated_name_is_the_new_module_with_a_warning(old):
    new, name = DEPRECATED[old]
    with pytest.warns(DeprecationWarning, match=new) as record:
        module = _fresh_import(old)
    assert module is importlib.import_module(new)
    assert record[0].filename == __file__  # at the importer's line, not the import system's
    scope: dict = {}
    _forget(old)
    with pytest.warns(DeprecationWarning, match=new):
        exec(f"from {old} import {name}", scope)
    assert scope[name] is getattr(module, name)


@pytest.mark.parametrize("name", STAYED)
def test_modules_that_stayed_import_as_before(name):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        module = importlib.import_module(name)
    assert module.__name__ == name


def test_a_function_pickled_by_either_name_unpickles_to_the_one_function():
    from lancepart.murmur3 import bucket as old_bucket

    from lancepart.model.murmur3 import bucket

    assert old_bucket is bucket
    assert pickle.loads(pickle.dumps(old_bucket)) is bucket
    assert b"lancepart.model.murmur3" in pickle.dumps(bucket)


def test_the_cli_package_keeps_the_names_of_the_module_it_was():
    from lancepart.cli import EXIT_OK, build_parser, commands, main

    assert main is commands.main and build_parser is commands.build_parser and EXIT_OK == commands.EXIT_OK
