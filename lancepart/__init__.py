"""lancepart: a write engine for Lance partitioned namespaces (spec/partitioning.md).

>>> from lancepart import PartitionedNamespace, PartitionSpec, PartitionField
"""

# first: sets LANCE_LOG (Lance's log filter) before anything imports lance
from lancepart import _lance_log  # noqa: F401
from lancepart.errors import (
    CommitConflictError,
    ExpectationFailedError,
    InvalidSpecError,
    LancepartError,
    NamespaceExistsError,
    NamespaceNotFoundError,
    SchemaMismatchError,
)
from lancepart.namespace import PartitionedNamespace
from lancepart.results import CleanupStats, CommitResult, PartitionInfo, Problem, VerifyReport
from lancepart.spec import PartitionField, PartitionSpec, Transform

__version__ = "0.1.0"

__all__ = [
    "CleanupStats",
    "CommitConflictError",
    "CommitResult",
    "ExpectationFailedError",
    "InvalidSpecError",
    "LancepartError",
    "NamespaceExistsError",
    "NamespaceNotFoundError",
    "PartitionField",
    "PartitionInfo",
    "PartitionSpec",
    "PartitionedNamespace",
    "Problem",
    "SchemaMismatchError",
    "Transform",
    "VerifyReport",
    "__version__",
]
