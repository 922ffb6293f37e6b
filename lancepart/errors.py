"""Typed errors of lancepart. Every message names the offending field, value or path."""

from __future__ import annotations

import re

# Lance appends the Rust source location of each layer an error passed through
# (", /home/runner/work/lance/lance/rust/lance-io/src/local.rs:273:40"): of no use to a reader
_SOURCE_LOCATION = re.compile(r",?[ \t]*[^\s,;()'\"]+\.rs:\d+:\d+")


def without_source_locations(text: str) -> str:
    """``text`` without the ``, /path/to/file.rs:LINE:COL`` locations Lance appends to its errors.

    >>> without_source_locations("Not found: t/_versions/1.manifest, /home/runner/work/lance/lance/rust/"
    ...                          "lance-io/src/local.rs:273:40, /rust/lance/src/dataset.rs:765:44; retry")
    'Not found: t/_versions/1.manifest; retry'
    """
    return _SOURCE_LOCATION.sub("", text)


class LancepartError(Exception):
    """Base class of every error lancepart raises on purpose. Its message never shows a secret:
    URL userinfo and the values of secret storage options are masked (:mod:`lancepart.redact`),
    also when the message repeats a Lance error, nor the Rust source locations Lance appends to
    its errors (:func:`without_source_locations`)."""

    def __init__(self, *args: object) -> None:
        from lancepart.redact import redact

        super().__init__(*(without_source_locations(redact(a)) if isinstance(a, str) else a for a in args))


class InvalidSpecError(LancepartError, ValueError):
    """A partition spec, partition field or namespace schema violates the spec."""


class SchemaMismatchError(LancepartError, ValueError):
    """Input data does not match the namespace schema."""


class NamespaceNotFoundError(LancepartError, FileNotFoundError):
    """No partitioned namespace (or the named child namespace) exists at the path."""


class NamespaceExistsError(LancepartError, FileExistsError):
    """A partitioned namespace already exists where one was to be created."""


class RetryableError(LancepartError):
    """Base of the errors after which the same operation, run again, is expected to succeed:
    it lost to concurrent commits and published nothing. Catch it to retry (with a backoff);
    the command line exits 75 for it.

    >>> import time
    >>> def write_with_retries(ns, batch, batch_id, attempts=3):
    ...     for attempt in range(attempts):
    ...         try:
    ...             return ns.refresh().write(batch, batch_id=batch_id)  # the batch id makes a rerun safe
    ...         except RetryableError:
    ...             if attempt + 1 == attempts:
    ...                 raise
    ...             time.sleep(5)
    >>> write_with_retries(ns, pa.table({"id": [7], "event_date": [date(2025, 12, 12)]}), "2025-12-12").rows_written
    1
    """


class SchemaChangedError(SchemaMismatchError, RetryableError):
    """The namespace schema changed while an operation ran (a concurrent ``update_schema`` and
    the upgrade of a table it wrote to); nothing was committed. Retryable: the operation is run
    again on the new schema (``ns.write`` of a table and ``ns.merge`` do so on their own)."""


class CommitConflictError(RetryableError):
    """A commit kept conflicting with concurrent commits (lancepart's retries, or Lance's own:
    "Too many concurrent writers"), or what it built on was removed meanwhile; nothing was
    published."""


class ExpectationFailedError(LancepartError):
    """A data-quality expectation failed; nothing was published."""


class ConfigError(LancepartError, ValueError):
    """A job configuration is incomplete or wrong; the message names the key."""


class CorruptNamespaceError(LancepartError):
    """The __manifest table or its metadata cannot be read as a partitioned namespace."""


class ExpressionEvaluationError(LancepartError):
    """A partition expression planned fine but failed while evaluating data (for example a cast of one value)."""


class InvalidArgumentError(LancepartError, ValueError):
    """An API argument has a value outside what it accepts (the message names it)."""


class PartitionPinnedError(LancepartError):
    """A partition the write touches is pinned to a tag or branch; lancepart writes to main only."""


class UnsafeLocationError(CorruptNamespaceError):
    """A ``__manifest`` table row has a ``location`` that is not one directory name inside the
    namespace root (absolute, ``..``, ``/``): lancepart refuses to read or write through it."""


class PartitionValueError(LancepartError, ValueError):
    """A row's partition value cannot be stored and reported faithfully (for example a timestamp
    outside the years 1-9999 that Python's datetime can represent); the message names the field,
    its source column(s) and the value."""


class StorageUnavailableError(LancepartError, OSError):
    """The object store behind a root cannot be used: its bucket does not exist, its endpoint
    does not answer, or it refuses the credentials. The message names the root, the bucket or
    endpoint, and never a credential."""


class FragmentsGoneError(LancepartError):
    """Fragments a compaction rewrote are no longer in the partition table's published version
    (an overwrite or another compaction replaced them); the message names the table."""


class UnsafeRetentionError(LancepartError, ValueError):
    """A cleanup asked to remove versions or files younger than the namespace's retention floor
    (default one hour) without ``allow_short_retention=True``; the message names the floor."""


class DataFilesMissingError(LancepartError):
    """Files a publish or read needs are gone from storage (for example removed by a cleanup
    with a retention shorter than the job); the message names the table and a file. Nothing
    was published."""


class StorageFullError(LancepartError, OSError):
    """The storage under the namespace root is full (ENOSPC); the message names the path."""


class StoragePermissionError(LancepartError, PermissionError):
    """The storage refused access (EACCES / EPERM); the message names the path."""


class StorageReadOnlyError(StoragePermissionError):
    """The storage under the path is read-only (EROFS, a read-only mount or snapshot): reads
    work, commits cannot be made; the message names the path."""


class CorruptTableError(CorruptNamespaceError):
    """A partition table (or one of its data files) cannot be read; the message names the
    table's object_id and location."""


class InvalidFilterError(LancepartError, ValueError):
    """A filter cannot be applied to the namespace schema (unknown column, a literal that does
    not fit its column's type); the message names the column and the literal."""


class MissingDependencyError(LancepartError, ImportError):
    """A package lancepart needs is not importable where the code runs (for example on a Spark
    executor); the message names the package and the host."""


class SnapshotExpiredError(LancepartError):
    """The ``__manifest`` version a handle read was removed (superseded, then cleaned up)
    before the handle read its rows: refresh the handle (``ns.refresh()``) and retry. For the
    change feed and the Spark streaming source: versions it was to read are gone (before it
    was planned, or after); the message names the oldest version it reaches back to."""


class WorkerEnvironmentError(MissingDependencyError):
    """Spark's Python workers cannot run lancepart: a dependency (pyarrow, lance, mmh3,
    lancepart) is missing on the worker's Python, or its pyarrow/lance version differs from
    the driver's. The message names the module, the worker's Python and what to set
    (``PYSPARK_PYTHON``, ``spark.pyspark.python`` or the packed environment)."""


class DuplicateKeyError(InvalidArgumentError):
    """A merge input holds the same key twice (which row wins would be arbitrary); the message
    names the key columns, one duplicated key and how many keys are duplicated."""


class AmbiguousMatchError(LancepartError):
    """A merge key matches more than one published row; the message names the key and the
    partition tables holding its rows."""


class RowsOutsideFilterError(InvalidArgumentError):
    """A replace-where input (``ns.write(mode="overwrite", where=...)``) has rows for which the
    filter is not TRUE; the message names the filter, how many rows and one of them."""


class ConstraintViolationError(InvalidArgumentError):
    """Rows break a CHECK constraint of the namespace (``ns.add_constraint``): a write whose rows
    break one publishes nothing, and a constraint the published rows break is not added. The
    message names the constraint, its expression, how many rows and a few of them;
    ``constraint``, ``expression``, ``rows`` (those few, as dicts) and ``count`` carry the same."""

    def __init__(self, message: str, *, constraint: str = "", expression: str = "",
                 rows: list[dict] | None = None, count: int = 0) -> None:
        super().__init__(message)
        self.constraint, self.expression, self.rows, self.count = constraint, expression, list(rows or []), count


class SparkJobFailedError(LancepartError):
    """A Spark job of an ``lps.*`` operation failed (a task failed too often, an executor was
    lost, a Python worker was killed): nothing was published. The message names the operation,
    the root and Spark's reason; rerunning it (with the same ``batch_id``) is safe, and files the
    failed attempt wrote are unreferenced until a cleanup removes them. ``__cause__`` is Spark's
    error."""


class ForkedProcessError(LancepartError, RuntimeError):
    """This process was forked (``os.fork``; multiprocessing's 'fork' start method, the default on
    Linux; a pre-forking server or executor) from a process in which Lance had already started its
    runtime. That runtime's threads stay in the parent, so a Lance call here would hang or crash:
    lancepart refuses it at once. The message names both processes and the fix: start such
    processes with the 'spawn' (or 'forkserver') start method, or fork before the parent first
    uses lancepart."""


class EngineError(LancepartError):
    """Lance, Arrow or the operating system failed in a way no more specific error describes.
    The message names the operation and the root (the table or file when known) and says
    whether anything was published; ``__cause__`` is the original error."""
