"""One Lance session per process.

Every partition table an operation touches (and every table an executor process writes)
shares one :class:`lance.Session`: its object-store clients (connection pools, credentials,
the S3 client's region lookup) and its metadata caches (a version's manifest, a file's
footer). Without it each ``lance.dataset`` / ``write_fragments`` / commit builds its own
object-store client, which on an object store costs requests and TLS handshakes per table
(docs/object-storage.md "Requests"). Caches are keyed by immutable things (a version's
manifest file, a data file), so sharing them across operations and threads is safe; the
latest version of a table is still looked up on every open without a version.

Everything here is a thin veneer over pylance: the same arguments, plus ``session=``.

After a fork the child starts with no session and a new lock (``os.register_at_fork``), and no
dataset an operation of the parent opened is handed out in it. What no reset can repair is
Lance's own runtime: Lance runs its I/O on a Tokio runtime made once per process, and a fork
copies only the thread that forked, not the runtime's threads (Tokio does not support a fork once
its runtime has started). A child forked after Lance ran in its parent therefore hung or crashed
in its first Lance call, plain pylance too; lancepart refuses such a child's operations at once
with :class:`~lancepart.errors.ForkedProcessError` naming the fix (the 'spawn' start method). A
child forked before its parent used Lance starts its own runtime and works (docs/object-storage.md
"Processes that fork").
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

import lance
import numpy as np
import pyarrow as pa

from lancepart.errors import ForkedProcessError

# the metadata cache is what a shared session is for (manifests, file footers); the index
# cache only matters to reads with a vector or scalar index, which bring their own budget
_METADATA_CACHE_BYTES = int(os.environ.get("LANCEPART_METADATA_CACHE_BYTES", str(256 << 20)))
_INDEX_CACHE_BYTES = int(os.environ.get("LANCEPART_INDEX_CACHE_BYTES", str(1 << 30)))

# tables opened at a known version by the running operation (see one_open_per_version)
_opened: ContextVar[dict[tuple[str, int], lance.LanceDataset] | None] = ContextVar("lancepart_opened", default=None)
_MAX_OPENED = 4096

_lock = threading.Lock()
_session: lance.Session | None = None
_pid = 0

# Lance's runtime threads are named "lance_background_thread"; the kernel keeps 15 characters
_RUNTIME_THREAD = b"lance_backgroun"
_forking_from: int | None = None  # set just before a fork: this process, when Lance's runtime runs in it
_forked_from: int | None = None  # in a child forked after Lance's runtime started: the parent's pid


def session() -> lance.Session:
    """This process's Lance session (a new one in a forked child: Spark's Python workers fork);
    :class:`ForkedProcessError` in a child forked after Lance's runtime had started in its parent."""
    global _session, _pid
    if _session is None or _pid != os.getpid():
        refuse_if_forked()
        with _lock:
            if _session is None or _pid != os.getpid():
                _session = lance.Session(index_cache_size_bytes=_INDEX_CACHE_BYTES,
                                         metadata_cache_size_bytes=_METADATA_CACHE_BYTES)
                _pid = os.getpid()
    return _session


def lance_runtime_started() -> bool:
    """Whether Lance's runtime runs in this process: one of its threads is alive (read from
    ``/proc/self/task``); where there is no ``/proc``, whether lancepart has made its session."""
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:
        return _session is not None
    for tid in tasks:
        try:
            with open(f"/proc/self/task/{tid}/comm", "rb") as f:
                if f.read().startswith(_RUNTIME_THREAD):
                    return True
        except OSError:  # the thread ended meanwhile
            continue
    return False


def refuse_if_forked() -> None:
    """Raise :class:`ForkedProcessError` in a process forked after Lance's runtime had started in
    its parent (or in a process forked from such a child): a Lance call there would hang or crash.

    >>> refuse_if_forked()  # this process was not forked from one that ran Lance
    """
    if _forked_from is not None:
        raise ForkedProcessError(
            f"this process (pid {os.getpid()}) was forked from process {_forked_from} after Lance had started its "
            "runtime there; that runtime's threads do not survive a fork, so Lance calls here would hang or crash. "
            "Start the process with the 'spawn' start method instead (multiprocessing.get_context('spawn'), or "
            "'forkserver'), or fork before the parent first uses lancepart")


def _before_fork() -> None:
    global _forking_from
    _forking_from = os.getpid() if _forked_from is None and lance_runtime_started() else None


def _after_fork_in_parent() -> None:
    global _forking_from
    _forking_from = None


def _after_fork_in_child() -> None:
    """The child's own session and lock (the parent's lock may have been held by another of its
    threads, which the child does not have); whether Lance can run here at all."""
    global _lock, _session, _pid, _forked_from, _forking_from
    _lock = threading.Lock()
    _session, _pid = None, 0
    _opened.set(None)  # datasets opened by an operation of the parent, on its session
    if _forked_from is None:
        _forked_from = _forking_from
    _forking_from = None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=_before_fork, after_in_parent=_after_fork_in_parent,
                        after_in_child=_after_fork_in_child)


def local_path(uri: str) -> str | None:
    """The filesystem path of a local ``uri`` (a plain path or ``file://``); None for an object store.

    >>> local_path("file:///data/ns"), local_path("/data/ns"), local_path("s3://bucket/ns")
    ('/data/ns', '/data/ns', None)
    """
    if uri.startswith("file://"):
        return uri[len("file://"):]
    return None if "://" in uri else uri


def _so(storage_options: Mapping[str, str] | None) -> dict[str, str] | None:
    return dict(storage_options) if storage_options else None


@contextmanager
def one_open_per_version() -> Iterator[None]:
    """Within it (one operation: every public operation runs in one, see
    :mod:`lancepart.storage.error_mapping`), a table opened at a known version with ``reuse=True`` is
    opened once and the same dataset is handed to every later such :func:`open_table` of that
    version, on any thread of :func:`lancepart.util.parallel.map_threads`: an open at a version costs
    a request even when the session has its manifest. A version is immutable; what can change
    is whether it still exists, which a caller asking that opens without ``reuse``."""
    if _opened.get() is not None:
        yield
        return
    token = _opened.set({})
    try:
        yield
    finally:
        _opened.reset(token)


def open_table(uri: str, version: int | str | None = None, storage_options: Mapping[str, str] | None = None,
               *, reuse: bool = False, **kwargs: Any) -> lance.LanceDataset:
    """``lance.dataset(uri, version=..., storage_options=...)`` on the shared session. A
    ``version`` goes straight to that version's manifest (no listing of ``_versions/``).

    ``reuse``: inside :func:`one_open_per_version`, hand out the dataset this operation
    already opened at that version. Only for a caller that reads it, writes fragments against
    it or commits on top of it (a new dataset comes back); never for one that calls a method
    moving the dataset itself to a new version (``add_columns``, ``create_index``,
    ``optimize``...), which would move it under every other holder."""
    opened = _opened.get()
    if opened is None or not reuse or kwargs or not isinstance(version, int):
        return lance.dataset(uri, version=version, storage_options=_so(storage_options), session=session(), **kwargs)
    key = (uri, version)
    ds = opened.get(key)
    if ds is None:
        ds = lance.dataset(uri, version=version, storage_options=_so(storage_options), session=session())
        if len(opened) < _MAX_OPENED:
            opened[key] = ds
    return ds


def _struct_in_struct(t: pa.DataType) -> bool:
    if pa.types.is_struct(t):
        return any(pa.types.is_struct(t.field(i).type) or _struct_in_struct(t.field(i).type)
                   for i in range(t.num_fields))
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return _struct_in_struct(t.value_type)
    return False


def unsliced(data: Any) -> Any:
    """``data`` as Lance can write it. Lance panics (``assertion failed: end <= self.len()``)
    writing a struct nested in a struct from a *slice* of an Arrow array, which is what a
    partition's rows are; a table holding such a column is copied into fresh arrays first (only
    such tables pay for it)."""
    if (isinstance(data, pa.Table | pa.RecordBatch) and data.num_rows
            and any(_struct_in_struct(f.type) for f in data.schema)):
        return data.take(pa.array(np.arange(data.num_rows, dtype=np.int64)))
    return data


def write_fragments(data: Any, uri: str, *, storage_options: Mapping[str, str] | None = None,
                    **kwargs: Any) -> list[Any]:
    """``lance.fragment.write_fragments`` on the shared session."""
    return lance.fragment.write_fragments(unsliced(data), uri, storage_options=_so(storage_options),
                                          session=session(), **kwargs)


def write_dataset(data: Any, uri: str, *, storage_options: Mapping[str, str] | None = None,
                  **kwargs: Any) -> lance.LanceDataset:
    """``lance.write_dataset`` on the shared session."""
    return lance.write_dataset(unsliced(data), uri, storage_options=_so(storage_options), session=session(),
                               **kwargs)
