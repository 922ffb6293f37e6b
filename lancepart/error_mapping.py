"""One place that turns storage and Lance errors into lancepart's typed errors.

Lance reports I/O problems as ``OSError`` / ``ValueError`` / ``pyarrow.ArrowInvalid`` whose text
carries the operating system's error ("No space left on device (os error 28)") but often not the
path, and never which partition table it was reading. The write, read and maintenance paths
call :func:`typed_error` (or wrap a block in :func:`storage_errors`) with what they know: the
path, and the table's ``object_id`` when there is one. The result names both:

=========================================  ==============================================
ENOSPC (``os error 28``)                   :class:`StorageFullError`
EACCES / EPERM (``os error 13`` / ``1``)   :class:`StoragePermissionError`
a root (or one of its parents) is a file   :class:`InvalidArgumentError` naming the file
a referenced file is gone (reading)        :class:`DataFilesMissingError` naming the file
a data file cannot be decoded (reading)    :class:`CorruptTableError` naming the table
=========================================  ==============================================

>>> e = typed_error(OSError("LanceError(IO): No space left on device (os error 28)"), "/data/ns")
>>> type(e).__name__, str(e).startswith("/data/ns: the storage is full")
('StorageFullError', True)
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
from collections.abc import Iterator

from lancepart.errors import (
    CorruptTableError,
    DataFilesMissingError,
    InvalidArgumentError,
    LancepartError,
    StorageFullError,
    StoragePermissionError,
)

_FULL = (re.compile(r"os error 28\b"), re.compile(r"No space left on device", re.I))
_DENIED = (re.compile(r"os error (13|1)\)"), re.compile(r"Permission denied|Operation not permitted", re.I))
_NOT_DIR = (re.compile(r"os error 20\b"), re.compile(r"Not a directory", re.I))
_NOT_FOUND = re.compile(r"Not found: (\S+?)(?:,|\s|$)")
# Decoding failures of a data file: Lance's and Arrow's wording when bytes are missing or wrong.
_CORRUPT = re.compile(r"Invalid range|out of range|corrupt|unexpected end|invalid (page|buffer|data|file)|"
                      r"decode|protobuf|checksum", re.I)
_FILE = re.compile(r"((?:data|_deletions|_indices)/[^\s,:'\"]+)")


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
    if code in (errno.EACCES, errno.EPERM) or _matches(text, _DENIED):
        return StoragePermissionError(f"{where}: the storage refused access (permission denied); check the "
                                      f"owner and mode of the directory or the store's policy ({_short(text)})")
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
        return DataFilesMissingError(f"{where}: {missing} is gone from storage but the published version "
                                     f"references it (deleted by hand or by a cleanup with a too short "
                                     f"retention); `lancepart verify` lists every such file")
    if _CORRUPT.search(text) or "LanceError(IO)" in text or "External error" in text:
        f = _FILE.search(text)
        return CorruptTableError(f"{where}: {'data file ' + f.group(1) if f else 'a data file'} cannot be read "
                                 f"({_short(text)}); `lancepart verify --deep` checks every table")
    return None


_NO_MODULE = re.compile(r"No module named '([^']+)'")


def missing_module(text: str) -> str | None:
    """The package a ``ModuleNotFoundError`` text (also one relayed from a Spark executor) names."""
    m = _NO_MODULE.search(text)
    return m.group(1).split(".")[0] if m else None


def _short(text: str, limit: int = 300) -> str:
    text = " ".join(text.split())
    # Lance appends the Rust source location of the error: of no use to a reader
    text = re.sub(r",\s*/(?:home|rustc)/\S+", "", text)
    return text if len(text) <= limit else text[:limit] + "..."


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
