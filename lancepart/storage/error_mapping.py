"""The one place that turns storage, Lance, Arrow and Spark errors into lancepart's typed errors.

Lance reports I/O problems as ``OSError`` / ``ValueError`` / ``pyarrow.ArrowInvalid`` whose text
carries the operating system's error ("No space left on device (os error 28)") but often not the
path, and never which partition table it was reading. Everything lancepart does with such an
error is decided here, in three layers:

* **where the path is known**: :func:`typed_error` / :func:`storage_errors` (a root or a table
  directory) and :func:`table_error` / :func:`table_errors` (one partition table an operation
  reads or changes: the message names the table and, for a file that cannot be decoded, the
  file, found by reading the table's fragments one by one);
* **the commit loops**: :func:`is_commit_conflict` (Lance refused a commit for a concurrent one:
  retry) and :func:`is_not_found`;
* **every public operation** (the methods of :class:`~lancepart.namespace.PartitionedNamespace`
  and the ``lancepart.spark`` functions, through :func:`public_operation`): whatever Lance,
  Arrow, the operating system or Spark raised that is not typed yet becomes a typed error
  naming the operation and the root, and saying whether anything was published (the
  ``__manifest`` commits an operation made are noted by :func:`note_commit`). Errors of
  lancepart's own code (a bug) pass unchanged.

=============================================  ==============================================
ENOSPC (``os error 28``)                       :class:`StorageFullError`
EROFS (``os error 30``, a read-only mount)     :class:`StorageReadOnlyError`
EACCES / EPERM (``os error 13`` / ``1``)       :class:`StoragePermissionError`
a bucket, endpoint or credential that fails    :class:`StorageUnavailableError`
a root (or one of its parents) is a file       :class:`InvalidArgumentError` naming the file
a referenced file is gone                      :class:`DataFilesMissingError` naming the file
a data file cannot be decoded                  :class:`CorruptTableError` naming table and file
Lance gave up a commit against concurrent      :class:`CommitConflictError` (a
writers ("Too many concurrent writers")        :class:`RetryableError`)
a Spark job failed (executor lost, ...)        :class:`SparkJobFailedError`
anything else from Lance, Arrow or the OS      :class:`EngineError`
=============================================  ==============================================

>>> e = typed_error(OSError("LanceError(IO): No space left on device (os error 28)"), "/data/ns")
>>> type(e).__name__, str(e).startswith("/data/ns: the storage is full")
('StorageFullError', True)
"""

from __future__ import annotations

import contextlib
import contextvars
import errno
import functools
import os
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, TypeVar

import pyarrow as pa

# Lance's commit conflict lives in a submodule that `import lance` does not load: until it is
# loaded, an `except lance.commit.CommitConflictError` clause fails on any other error reaching it.
from lance.commit import CommitConflictError as LanceCommitConflictError

from lancepart import errors
from lancepart.errors import (
    CommitConflictError,
    CorruptTableError,
    DataFilesMissingError,
    EngineError,
    InvalidArgumentError,
    LancepartError,
    SparkJobFailedError,
    StorageFullError,
    StoragePermissionError,
    StorageReadOnlyError,
    StorageUnavailableError,
    without_source_locations,
)
from lancepart.storage.lance_io import one_open_per_version, open_table, refuse_if_forked

F = TypeVar("F", bound=Callable[..., Any])

_FULL = (re.compile(r"os error 28\b"), re.compile(r"No space left on device", re.I))
_READ_ONLY = (re.compile(r"os error 30\b"), re.compile(r"Read-only file system", re.I))
_DENIED = (re.compile(r"os error (13|1)\)"), re.compile(r"Permission denied|Operation not permitted", re.I))
_NOT_DIR = (re.compile(r"os error 20\b"), re.compile(r"Not a directory", re.I))
_NOT_FOUND = re.compile(r"Not found: (\S+?)(?:,|\s|$)")
# Decoding failures of a data file: Lance's and Arrow's wording when bytes are missing or wrong.
_CORRUPT = re.compile(r"Invalid range|out of range|corrupt|unexpected end|invalid (page|buffer|data|file)|"
                      r"decode|protobuf|checksum", re.I)
_FILE = re.compile(r"((?:data|_deletions|_indices)/[^\s,:'\"]+)")
# Lance's words for a commit it refused, or gave up retrying, because concurrent ones landed:
# CommitConflict, IncompatibleTransaction, RetryableCommitConflict, and TooMuchWriteContention
# ("Too many concurrent writers. Attempted 10 retries.", raised by its delete / update /
# merge_insert when their own retries run out; on object stores under contention also by writes).
_CONFLICT = ("incompatible transaction", "conflict", "too many concurrent writ")


# --------------------------------------------------------------------------- the commit loops
def is_commit_conflict(e: BaseException) -> bool:
    """Whether Lance refused a commit because a concurrent one landed first: its
    ``CommitConflictError``, or the ``OSError`` it raises for two transactions it cannot rebase
    over each other ("Incompatible transaction") or after its own retries ran out ("Too many
    concurrent writers"). Running the commit again on the latest version is the answer."""
    if isinstance(e, LanceCommitConflictError):
        return True
    return isinstance(e, OSError) and any(w in str(e).lower() for w in _CONFLICT)


def is_not_found(e: BaseException) -> bool:
    """Whether a Lance or storage error says that a table, version manifest or file does not exist."""
    text = str(e).lower()
    return "not found" in text or "does not exist" in text or "no such file" in text


# --------------------------------------------------------------------------- where the path is known
_BUCKET = re.compile(r"<BucketName>([^<]+)</BucketName>")
_ENDPOINT = re.compile(r"(https?://[^/?\s]+)")
_STORE_PROBLEMS = (
    (("NoSuchBucket", "bucket does not exist"), "bucket {bucket} does not exist"),
    (("error sending request", "Connection refused", "dns error", "connection timed out", "operation timed out"),
     "the object store endpoint {endpoint} does not answer"),
    (("AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "403 Forbidden"),
     "the object store {endpoint} refused the credentials or the bucket policy denies access"),
)


def storage_problem(e: BaseException, uri: str) -> StorageUnavailableError | None:
    """A :class:`StorageUnavailableError` naming ``uri`` and what is wrong with its store, if
    ``e`` (an error from Lance's object store) says the bucket, endpoint or credentials fail;
    else None. Lance's messages carry the request URL, never the credentials."""
    text = str(e)
    for needles, template in _STORE_PROBLEMS:
        if any(n in text for n in needles):
            bucket = _BUCKET.search(text)
            endpoint = _ENDPOINT.search(text)
            what = template.format(bucket=repr(bucket.group(1)) if bucket else "(named in the root URI)",
                                   endpoint=endpoint.group(1) if endpoint else "(default AWS endpoint)")
            return StorageUnavailableError(f"{uri}: {what}")
    return None


def _errno(e: BaseException) -> int | None:
    return e.errno if isinstance(e, OSError) and isinstance(e.errno, int) else None


def _matches(text: str, patterns: tuple[re.Pattern[str], ...]) -> bool:
    return any(p.search(text) for p in patterns)


def file_in_the_way(path: str) -> str | None:
    """The first component of a local ``path`` (itself or a parent) that is a regular file, if any."""
    if "://" in path and not path.startswith("file://"):
        return None
    p = os.path.abspath(path[len("file://"):] if path.startswith("file://") else path)
    while True:
        if os.path.isfile(p):
            return p
        parent = os.path.dirname(p)
        if parent == p:
            return None
        p = parent


def _where(path: str, table: str | None) -> str:
    return f"partition table {table!r} at {path}" if table else path


def typed_error(e: BaseException, path: str, *, table: str | None = None, reading: bool = False
                ) -> LancepartError | None:
    """The typed error for ``e``, raised while working on ``path`` (a root, a table directory or a
    file), or None when ``e`` is none of the cases above. ``table`` is the partition table's
    object_id; ``reading``: ``e`` came from reading rows (so a missing or undecodable file is the
    table's problem, not the caller's)."""
    if isinstance(e, LancepartError):
        return None
    text = str(e)
    code = _errno(e)
    where = _where(path, table)
    if code == errno.ENOSPC or _matches(text, _FULL):
        return StorageFullError(f"{where}: the storage is full (ENOSPC); the operation stopped there. Free space "
                                f"and run it again ({_short(text)})")
    if code == errno.EROFS or _matches(text, _READ_ONLY):
        return StorageReadOnlyError(f"{where}: the storage is read-only (EROFS): it can be read, but nothing can be "
                                    f"committed there; make it writable or write elsewhere ({_short(text)})")
    if code in (errno.EACCES, errno.EPERM) or _matches(text, _DENIED):
        return StoragePermissionError(f"{where}: the storage refused access (permission denied); check the "
                                      f"owner and mode of the directory or the store's policy ({_short(text)})")
    if (problem := storage_problem(e, path)) is not None:
        return problem
    if code == errno.ENOTDIR or _matches(text, _NOT_DIR):
        blocker = file_in_the_way(path)
        if blocker is not None:
            return InvalidArgumentError(f"{blocker} is a file, not a directory: it cannot be (or hold) the "
                                        f"namespace root {path}")
    if not reading:
        return None
    m = _NOT_FOUND.search(text)
    if m is not None or code == errno.ENOENT:
        missing = m.group(1) if m else (getattr(e, "filename", None) or "a file")
        return _missing(where, missing)
    if _CORRUPT.search(text) or "LanceError(IO)" in text or "External error" in text:
        f = _FILE.search(text)
        return _corrupt(where, f.group(1) if f else None, text)
    return None


# Lance closing a data file it was writing, which was deleted meanwhile (by a cleanup at a
# retention shorter than the write: the file was not referenced yet)
_DELETED_WHILE_WRITTEN = re.compile(r"failed to shutdown local writer for (\S+?):.*?(?:failed to read metadata|"
                                    r"failed to persist temp file|No such file|os error 2)", re.I | re.S)


def _deleted_while_written(where: str, path: str) -> DataFilesMissingError:
    return DataFilesMissingError(f"{where}: the data file {path} was deleted while it was being written (a cleanup "
                                 f"with a retention shorter than the write ran beside it)")


def _missing(where: str, missing: str) -> DataFilesMissingError:
    return DataFilesMissingError(f"{where}: {missing} is gone from storage but the published version references "
                                 f"it (deleted by hand or by a cleanup with a too short retention); `lancepart "
                                 f"verify` lists every such file")


def _corrupt(where: str, file: str | None, text: str) -> CorruptTableError:
    return CorruptTableError(f"{where}: {'data file ' + file if file else 'a data file'} cannot be read "
                             f"({_short(text)}); `lancepart verify --deep` checks every table")


def unreadable_file(ds: Any, columns: Sequence[str] | None = None) -> str | None:
    """The data file(s) of the first fragment of the Lance dataset ``ds`` that cannot be read, or
    None: Lance's decoding errors do not say which file they came from (only called once a read
    failed)."""
    for frag in ds.get_fragments():
        try:
            frag.to_table(columns=list(columns) if columns is not None else None)
        except (OSError, ValueError):
            return ", ".join(f"data/{df.path}" for df in frag.metadata.files)
    return None


def table_error(e: BaseException, root: str, object_id: str, location: str, *, version: int | None = None,
                storage_options: Mapping[str, str] | None = None) -> LancepartError | None:
    """The typed error for ``e``, raised while an operation read or changed the partition table
    ``object_id`` (at ``location``, its published ``version``): :func:`typed_error` naming the
    table, or :class:`CorruptTableError` naming the table and the file that cannot be decoded (the
    table's fragments are read one by one to find it); None for anything else (a commit conflict
    included: the caller's loop retries it)."""
    if isinstance(e, LancepartError) or is_commit_conflict(e):
        return None
    uri = "/".join([root.rstrip("/"), location])
    typed = typed_error(e, uri, table=object_id)
    if typed is not None:
        return typed
    text = str(e)
    if not _CORRUPT.search(text):
        return None
    f = _FILE.search(text)
    file = f.group(1) if f else None
    if file is None:
        try:
            file = unreadable_file(open_table(uri, version=version, storage_options=dict(storage_options or {})
                                              or None))
        except (OSError, ValueError):
            file = None
    return _corrupt(_where(uri, object_id), file, text)


def table_failure(e: BaseException, uri: str, object_id: str) -> str:
    """One line saying why the partition table ``object_id`` at ``uri`` was left out of a
    maintenance run that goes on with the others (compaction, cleanup): the typed error's name
    and message, naming the table and its path (and the file when the error says which).

    >>> why = table_failure(ValueError("Dataset at path x was not found: Not found: x/_versions, /a/b.rs:1:2"),
    ...                     "/data/ns/0a1b_v1$x$dataset", "v1$x$dataset")
    >>> why.split(":")[0], "partition table 'v1$x$dataset' at /data/ns/0a1b_v1$x$dataset" in why, ".rs:" in why
    ('DataFilesMissingError', True, False)
    """
    typed = typed_error(e, uri, table=object_id, reading=True)
    if typed is not None:
        text = str(typed)
    elif isinstance(e, LancepartError) and object_id in str(e):  # it names the table already
        text = str(e)
    else:
        text = f"partition table {object_id!r} at {uri}: {e}"
    return f"{type(typed or e).__name__}: {' '.join(without_source_locations(text).split())[:600]}"


@contextlib.contextmanager
def storage_errors(path: str, *, table: str | None = None, reading: bool = False) -> Iterator[None]:
    """Re-raise an ``OSError`` / ``ValueError`` (Arrow's and Lance's included) of the block as its
    typed error (:func:`typed_error`); anything else passes unchanged.

    >>> with storage_errors("/data/ns"):
    ...     raise OSError("LanceError(IO): No space left on device (os error 28)")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    lancepart.errors.StorageFullError: /data/ns: the storage is full (ENOSPC); ...
    >>> with storage_errors("/data/ns"):
    ...     raise KeyError("id")                                       # not a storage error: unchanged
    Traceback (most recent call last):
    KeyError: 'id'
    """
    try:
        yield
    except (OSError, ValueError) as e:
        typed = typed_error(e, path, table=table, reading=reading)
        if typed is None:
            raise
        raise typed from e


@contextlib.contextmanager
def table_errors(root: str, object_id: str, location: str, *, version: int | None = None,
                 storage_options: Mapping[str, str] | None = None) -> Iterator[None]:
    """Re-raise an error of the block, which reads or changes one partition table, as its typed
    error (:func:`table_error`); anything else passes unchanged.

    >>> import glob, lance, os
    >>> p = ns.partitions()[0]
    >>> for f in glob.glob(f"{ns.root}/{p.location}/data/*.lance"):  # damage the table's data file
    ...     os.truncate(f, os.path.getsize(f) // 2)
    >>> with table_errors(ns.root, p.object_id, p.location, version=p.read_version):
    ...     lance.dataset(f"{ns.root}/{p.location}").to_table()  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    lancepart.errors.CorruptTableError: partition table 'v1$...$dataset' at ...: data file data/... cannot be read ...
    """
    try:
        yield
    except (OSError, ValueError, RuntimeError) as e:
        typed = table_error(e, root, object_id, location, version=version, storage_options=storage_options)
        if typed is None:
            raise
        raise typed from e


# --------------------------------------------------------------------------- Spark
_TASK_ERROR = re.compile(r"lancepart\.errors\.(\w+): ([^\n]*)")
_NO_MODULE = re.compile(r"No module named '([^']+)'")
_SPARK_REASON = re.compile(r"most recent failure: ([^\n]+)|Job aborted due to stage failure: ([^\n]+)")


def missing_module(text: str) -> str | None:
    """The package a ``ModuleNotFoundError`` text (also one relayed from a Spark executor) names."""
    m = _NO_MODULE.search(text)
    return m.group(1).split(".")[0] if m else None


def task_error(e: BaseException) -> LancepartError | None:
    """The lancepart error a Spark task raised (found in the Python traceback Spark reports), so
    the driver raises the same typed error; None if the failure was something else."""
    found = _TASK_ERROR.findall(str(e))
    if not found:
        return None
    name, message = found[-1]
    cls = getattr(errors, name, None)
    if not (isinstance(cls, type) and issubclass(cls, LancepartError)):
        return None
    return cls(message.strip())


def _class_names(e: BaseException) -> list[str]:
    return [f"{c.__module__}.{c.__name__}" for c in type(e).__mro__]


def is_spark_failure(e: BaseException) -> bool:
    """Whether ``e`` is Spark's report of a failed job or call (py4j's ``Py4JJavaError``, a
    ``PySparkException`` such as a task's ``PythonException``), other than an analysis error of
    the DataFrame itself (a column that does not exist: Spark's message says what is wrong)."""
    names = _class_names(e)
    if any(n.endswith((".AnalysisException", ".ParseException")) for n in names):
        return False
    return any(n.startswith(("py4j.", "pyspark.")) for n in names)


def spark_reason(text: str) -> str:
    """The part of a Spark failure that says what went wrong ("ExecutorLostFailure (executor 2
    exited ...) ... exit code 137", "Python worker exited unexpectedly (crashed)"), shortened."""
    m = _SPARK_REASON.search(text)
    reason = (m.group(1) or m.group(2)) if m else next((line for line in text.splitlines() if line.strip()), text)
    return _short(reason.lstrip(": "), 400)


# --------------------------------------------------------------------------- every public operation
# The __manifest versions the running public operation committed (None outside one): whether
# "nothing was published" is true when it fails.
_COMMITS: contextvars.ContextVar[list[int | None] | None] = contextvars.ContextVar("lancepart_commits",
                                                                                  default=None)
# typed errors of the layers below, to which an operation adds whether it published
_NEEDS_OUTCOME = (StorageFullError, StoragePermissionError, StorageUnavailableError, CorruptTableError,
                  DataFilesMissingError)
_BATCH_OPERATIONS = ("write", "merge", "lps.write", "lps.merge")


def note_commit(version: int | None = None) -> None:
    """Record that the running public operation committed ``__manifest`` (``version``, when
    known): should it fail afterwards, its error says so instead of "nothing was published"."""
    commits = _COMMITS.get()
    if commits is not None:
        commits.append(version)


@functools.cache
def _engine_paths() -> tuple[str, ...]:
    """The directories of the lance, pyarrow and datafusion packages."""
    dirs = []
    for name in ("lance", "pyarrow", "datafusion"):
        try:
            module = __import__(name)
        except ImportError:
            continue
        if getattr(module, "__file__", None):
            dirs.append(os.path.dirname(module.__file__) + os.sep)
    return tuple(dirs)


def is_engine_error(e: BaseException) -> bool:
    """Whether ``e`` came from Lance, Arrow or the operating system (not from lancepart's own
    code): an ``OSError``, an Arrow exception, a Lance error, or anything raised inside the
    lance, pyarrow or datafusion packages."""
    if isinstance(e, OSError | pa.ArrowException) or "LanceError" in str(e):
        return True
    tb, last = e.__traceback__, None
    while tb is not None:
        last, tb = tb, tb.tb_next
    return last is not None and last.tb_frame.f_code.co_filename.startswith(_engine_paths())


def _outcome(publishes: bool, commits: Sequence[int | None], outcome: str | None) -> str:
    if outcome is not None:
        return outcome
    if not publishes:
        return ""
    if commits:
        known = [v for v in commits if v is not None]
        return (f"__manifest version {max(known)} was committed before the error" if known
                else "a __manifest commit was made before the error")
    return "nothing was published"


def _join(*parts: str) -> str:
    return "; ".join(p for p in parts if p)


def _states_outcome(text: str) -> bool:
    """Whether a message already says what was published."""
    return any(w in text for w in ("nothing was published", "nothing published", "nothing was committed",
                                   "committed before the error"))


def operation_error(e: BaseException, operation: str, root: str | None, *, publishes: bool = True,
                    commits: Sequence[int | None] = (), outcome: str | None = None) -> LancepartError | None:
    """The typed error public operation ``operation`` on ``root`` raises for ``e``, or None when
    ``e`` passes unchanged (a lancepart error that needs nothing added, or a bug of lancepart's
    own code). ``commits``: the ``__manifest`` versions it committed before ``e``; ``outcome``
    replaces the "nothing was published" statement (cleanup, which publishes nothing)."""
    note = _outcome(publishes, commits, outcome)
    said = f"{operation}: {note}" if note else ""
    where = root or "(no root)"
    if isinstance(e, LancepartError):
        if said and isinstance(e, _NEEDS_OUTCOME) and not _states_outcome(str(e)):
            return type(e)(_join(str(e), said))
        return None
    text = str(e)
    if is_spark_failure(e):
        if (typed := task_error(e)) is not None:
            return operation_error(typed, operation, root, publishes=publishes, commits=commits,
                                   outcome=outcome) or typed
        rerun = ""
        if not commits:
            rerun = ("running it again with the same batch_id is safe (a batch id publishes at most once)"
                     if operation in _BATCH_OPERATIONS else "running it again is safe")
            rerun += "; files the failed attempt wrote are unreferenced and left for cleanup"
        return SparkJobFailedError(_join(f"{operation} on {where}: a Spark job failed ({spark_reason(text)})",
                                         note, rerun))
    if not is_engine_error(e):
        return None
    if is_commit_conflict(e):
        return CommitConflictError(_join(f"{operation} on {where}: Lance gave up a commit against concurrent "
                                         f"writers ({_short(text)})", note, "run it again"))
    typed = typed_error(e, where)
    if (m := _DELETED_WHILE_WRITTEN.search(text)) is not None:
        typed = _deleted_while_written(where, m.group(1))
    if typed is None and (m := _NOT_FOUND.search(text)) is not None:
        typed = _missing(where, m.group(1))
    if typed is None and _CORRUPT.search(text):
        f = _FILE.search(text)
        typed = _corrupt(where, f.group(1) if f else None, text)
    if typed is not None:
        return type(typed)(_join(str(typed), said))
    return EngineError(_join(f"{operation} on {where}: {type(e).__name__}: {_short(text)}", note))


@contextlib.contextmanager
def operation_errors(operation: str, root: str | None, *, publishes: bool = True,
                     outcome: str | None = None) -> Iterator[None]:
    """Around one public operation: an error escaping it becomes :func:`operation_error`'s typed
    error (raised from the original). Nested operations share the outermost one's record of
    commits. In a process forked after Lance ran in its parent it raises
    :class:`~lancepart.errors.ForkedProcessError` before anything runs.

    >>> with operation_errors("merge", "/data/events"):
    ...     raise OSError("LanceError(IO): Too many concurrent writers. Attempted 10 retries.")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    lancepart.errors.CommitConflictError: merge on /data/events: Lance gave up a commit ...; run it again
    """
    refuse_if_forked()  # before anything of it runs: in such a child Lance would hang or crash
    token = _COMMITS.set([]) if _COMMITS.get() is None else None
    try:
        with one_open_per_version():
            yield
    except Exception as e:
        typed = operation_error(e, operation, root, publishes=publishes, commits=list(_COMMITS.get() or ()),
                                outcome=outcome)
        if typed is None:
            raise
        raise typed from e
    finally:
        if token is not None:
            _COMMITS.reset(token)


def public_operation(name: str, *, publishes: bool = True, root_arg: int | None = None,
                     outcome: str | None = None) -> Callable[[F], F]:
    """Decorator of a public operation (:func:`operation_errors` around each call). The root is
    the ``root`` attribute of the first argument (a method of PartitionedNamespace), or with
    ``root_arg`` the positional argument at that index (or the ``root`` keyword).

    >>> @public_operation("lps.write", root_arg=1)
    ... def write(df, root):
    ...     raise OSError("LanceError(IO): No space left on device (os error 28)")
    >>> write(None, "/data/events")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    lancepart.errors.StorageFullError: /data/events: the storage is full (ENOSPC); ...; lps.write: nothing was published
    """

    def wrap(fn: F) -> F:
        @functools.wraps(fn)
        def run(*args: Any, **kwargs: Any) -> Any:
            if root_arg is None:
                root = getattr(args[0], "root", None) if args else None
            else:
                root = args[root_arg] if len(args) > root_arg else kwargs.get("root")
            with operation_errors(name, None if root is None else os.fspath(root), publishes=publishes,
                                  outcome=outcome):
                return fn(*args, **kwargs)

        return run  # type: ignore[return-value]

    return wrap


def _short(text: str, limit: int = 300) -> str:
    text = " ".join(without_source_locations(text).split())
    return text if len(text) <= limit else text[:limit] + "..."
