"""The one place that turns storage and Lance errors into lancepart's typed errors.

Lance reports I/O problems as ``OSError`` / ``ValueError`` / ``pyarrow.ArrowInvalid`` whose text
carries the operating system's error ("No space left on device (os error 28)") but often not the
path, and never which partition table it was reading. The write, read and maintenance paths
call :func:`typed_error` (or wrap a block in :func:`storage_errors`) with what they know: the
path, and the table's ``object_id`` when there is one. The result names both. The commit loops
ask :func:`is_commit_conflict` whether Lance refused a commit for a concurrent one (retry), the
Spark front ends :func:`task_error` which lancepart error a task raised.

=============================================  ==============================================
ENOSPC (``os error 28``)                       :class:`StorageFullError`
EROFS (``os error 30``, a read-only mount)     :class:`StorageReadOnlyError`
EACCES / EPERM (``os error 13`` / ``1``)       :class:`StoragePermissionError`
a bucket, endpoint or credential that fails    :class:`StorageUnavailableError`
a root (or one of its parents) is a file       :class:`InvalidArgumentError` naming the file
a referenced file is gone (reading)            :class:`DataFilesMissingError` naming the file
a data file cannot be decoded (reading)        :class:`CorruptTableError` naming the table
Lance refused or gave up a commit against      a conflict (:func:`is_commit_conflict`): the
concurrent writers                             commit loops retry it
=============================================  ==============================================

>>> e = typed_error(OSError("LanceError(IO): No space left on device (os error 28)"), "/data/ns")
>>> type(e).__name__, str(e).startswith("/data/ns: the storage is full")
('StorageFullError', True)
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
from collections.abc import Iterator, Sequence
from typing import Any

# Lance's commit conflict lives in a submodule that `import lance` does not load: until it is
# loaded, an `except lance.commit.CommitConflictError` clause fails on any other error reaching it.
from lance.commit import CommitConflictError as LanceCommitConflictError

from lancepart import errors
from lancepart.errors import (
    CorruptTableError,
    DataFilesMissingError,
    InvalidArgumentError,
    LancepartError,
    StorageFullError,
    StoragePermissionError,
    StorageReadOnlyError,
    StorageUnavailableError,
)

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
        return StorageFullError(f"{where}: the storage is full (ENOSPC); the operation stopped there (a write "
                                f"publishes all or nothing). Free space and run it again ({_short(text)})")
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


@contextlib.contextmanager
def storage_errors(path: str, *, table: str | None = None, reading: bool = False) -> Iterator[None]:
    """Re-raise an ``OSError`` / ``ValueError`` (Arrow's and Lance's included) of the block as its
    typed error (:func:`typed_error`); anything else passes unchanged.

    >>> # with storage_errors(root): lance.write_dataset(...)
    """
    try:
        yield
    except (OSError, ValueError) as e:
        typed = typed_error(e, path, table=table, reading=reading)
        if typed is None:
            raise
        raise typed from e


# --------------------------------------------------------------------------- Spark tasks
_TASK_ERROR = re.compile(r"lancepart\.errors\.(\w+): ([^\n]*)")
_NO_MODULE = re.compile(r"No module named '([^']+)'")


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


def _short(text: str, limit: int = 300) -> str:
    text = " ".join(text.split())
    # Lance appends the Rust source location of the error: of no use to a reader
    text = re.sub(r",\s*/(?:home|rustc)/\S+", "", text)
    return text if len(text) <= limit else text[:limit] + "..."
