"""lancepart: a write engine for Lance partitioned namespaces (spec/partitioning.md).

>>> from lancepart import PartitionedNamespace, PartitionSpec, PartitionField

Modules live in packages (docs/development.md "Where things live"); a module that moved keeps
its old name: ``import lancepart.spec`` is ``lancepart.model.spec``, the same module object
(:data:`_MOVED`). The names in :data:`_DEPRECATED` go in 0.2 and warn.
"""

import importlib
import importlib.abc
import importlib.machinery
import sys
import warnings

# first: Lance reads its settings at its first commit, and its log filter when it is imported
from lancepart.storage import lance_env  # noqa: F401

# isort: split
from lancepart.arguments import CommitOptions
from lancepart.errors import (  # every public error type (docs/errors.md)
    AmbiguousMatchError,
    CommitConflictError,
    ConfigError,
    ConstraintViolationError,
    CorruptNamespaceError,
    CorruptTableError,
    DataFilesMissingError,
    DuplicateKeyError,
    EngineError,
    ExpectationFailedError,
    ExpressionEvaluationError,
    ForkedProcessError,
    FragmentsGoneError,
    InvalidArgumentError,
    InvalidFilterError,
    InvalidSpecError,
    LancepartError,
    MissingDependencyError,
    NamespaceExistsError,
    NamespaceNotFoundError,
    PartitionPinnedError,
    PartitionValueError,
    RetryableError,
    RowsOutsideFilterError,
    SchemaChangedError,
    SchemaMismatchError,
    SnapshotExpiredError,
    SparkJobFailedError,
    StorageFullError,
    StoragePermissionError,
    StorageReadOnlyError,
    StorageUnavailableError,
    UnsafeLocationError,
    UnsafeRetentionError,
    WorkerEnvironmentError,
)
from lancepart.model.spec import PartitionField, PartitionSpec, Transform
from lancepart.namespace import PartitionedNamespace
from lancepart.ops.history import HistoryEntry
from lancepart.ops.repair import RepairReport
from lancepart.results import CleanupStats, CommitResult, EvolveResult, PartitionInfo, Problem, VerifyReport

__version__ = "0.1.0"

__all__ = [
    "AmbiguousMatchError",
    "CleanupStats",
    "CommitConflictError",
    "CommitOptions",
    "CommitResult",
    "ConfigError",
    "ConstraintViolationError",
    "CorruptNamespaceError",
    "CorruptTableError",
    "DataFilesMissingError",
    "DuplicateKeyError",
    "EngineError",
    "EvolveResult",
    "ExpectationFailedError",
    "ExpressionEvaluationError",
    "ForkedProcessError",
    "FragmentsGoneError",
    "HistoryEntry",
    "InvalidArgumentError",
    "InvalidFilterError",
    "InvalidSpecError",
    "LancepartError",
    "MissingDependencyError",
    "NamespaceExistsError",
    "NamespaceNotFoundError",
    "PartitionField",
    "PartitionInfo",
    "PartitionPinnedError",
    "PartitionSpec",
    "PartitionValueError",
    "PartitionedNamespace",
    "Problem",
    "RepairReport",
    "RetryableError",
    "RowsOutsideFilterError",
    "SchemaChangedError",
    "SchemaMismatchError",
    "SnapshotExpiredError",
    "SparkJobFailedError",
    "StorageFullError",
    "StoragePermissionError",
    "StorageReadOnlyError",
    "StorageUnavailableError",
    "Transform",
    "UnsafeLocationError",
    "UnsafeRetentionError",
    "VerifyReport",
    "WorkerEnvironmentError",
    "__version__",
]

# old module name -> its home; importing the old name gives the module of the new one
_MOVED = {
    "lancepart.cli_args": "lancepart.cli.args",
    "lancepart.cli_read": "lancepart.cli.read",
    "lancepart.durations": "lancepart.util.durations",
    "lancepart.parallel": "lancepart.util.parallel",
    "lancepart.faults": "lancepart.util.faults",
    "lancepart.sample": "lancepart.util.sample",
    "lancepart.history": "lancepart.ops.history",
    "lancepart.quality": "lancepart.ops.quality",
    "lancepart.repair": "lancepart.ops.repair",
    "lancepart.schema_evolution": "lancepart.evolution.schema_evolution",
    "lancepart.spec_evolution": "lancepart.evolution.spec_evolution",
    "lancepart.file_format": "lancepart.evolution.file_format",
    "lancepart.lance_env": "lancepart.storage.lance_env",
    "lancepart.lance_io": "lancepart.storage.lance_io",
    "lancepart.manifest": "lancepart.storage.manifest",
    "lancepart.table_commit": "lancepart.storage.table_commit",
    "lancepart.error_mapping": "lancepart.storage.error_mapping",
    "lancepart.spec": "lancepart.model.spec",
    "lancepart.transforms": "lancepart.model.transforms",
    "lancepart.murmur3": "lancepart.model.murmur3",
    "lancepart.projection": "lancepart.model.projection",
    "lancepart.predicates": "lancepart.model.predicates",
    "lancepart.ids": "lancepart.model.ids",
    "lancepart.keys": "lancepart.model.keys",
    "lancepart.datafusion_udfs": "lancepart.model.datafusion_udfs",
    "lancepart.read.visitors": "lancepart.model.visitors",
    "lancepart.read.prune": "lancepart.read.manifest_query",
}
# renamed modules whose old name goes in 0.2 (docs/api.md): importing it warns
_DEPRECATED = {
    "lancepart.compat": "lancepart.v1_tables",
    "lancepart.datafusion": "lancepart.model.datafusion_udfs",
}


def _warn_at_importer(message: str) -> None:
    """A DeprecationWarning at the line that imported the old name (past the import system's
    frames and this module's :func:`__getattr__`)."""
    frame = sys._getframe(1)
    while frame.f_back is not None and ("importlib" in frame.f_code.co_filename
                                        or frame.f_code.co_filename == __file__):
        frame = frame.f_back
    warnings.warn_explicit(message, DeprecationWarning, frame.f_code.co_filename, frame.f_lineno,
                           module=frame.f_globals.get("__name__", "<unknown>"))


class _OldNames(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Imports an old module name (:data:`_MOVED`, :data:`_DEPRECATED`) as its new module: the
    same object, registered under both names, so ``from lancepart.spec import X``, pickles that
    name the old path and ``monkeypatch.setattr("lancepart.spec.X", ...)`` all reach the one module."""

    def __init__(self) -> None:
        self._specs: dict[str, importlib.machinery.ModuleSpec] = {}

    def find_spec(self, fullname, path=None, target=None):
        if fullname in _MOVED or fullname in _DEPRECATED:
            return importlib.machinery.ModuleSpec(fullname, self)
        return None

    def create_module(self, spec):
        new = _MOVED.get(spec.name) or _DEPRECATED[spec.name]
        if spec.name in _DEPRECATED:
            _warn_at_importer(f"{spec.name} is now {new}; the old name goes in 0.2")
        module = importlib.import_module(new)
        self._specs[spec.name] = module.__spec__  # the import system sets __spec__ to ours next
        return module

    def exec_module(self, module) -> None:
        module.__spec__ = self._specs.pop(module.__spec__.name, module.__spec__)  # the module's own


if not any(isinstance(f, _OldNames) for f in sys.meta_path):
    sys.meta_path.insert(0, _OldNames())


def __getattr__(name: str):
    """``lancepart.spec`` (attribute access, ``from lancepart import spec``) for a moved module."""
    if f"lancepart.{name}" in _MOVED or f"lancepart.{name}" in _DEPRECATED:
        return importlib.import_module(f"lancepart.{name}")
    raise AttributeError(f"module 'lancepart' has no attribute {name!r}")
