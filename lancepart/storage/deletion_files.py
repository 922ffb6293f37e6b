"""The row offsets a Lance deletion file marks as deleted, read from the file itself.

A fragment's deletion file lists the offsets (row number inside the fragment's data files) of
its deleted rows. The Lance storage layout keeps it under ``_deletions/`` of the table, named
``<fragment id>-<read version>-<id>`` with one of two extensions:

* ``.arrow``: an Arrow IPC file of one ``uint32`` column (sparse deletions);
* ``.bin``: a Roaring bitmap in the portable serialisation every Roaring library shares
  (dense deletions): a cookie, one (key, cardinality) pair per container, optional offsets,
  then each container as an array of 16-bit values, a 65 536-bit bitmap, or runs.

Comparing the offsets of one fragment's deletion files at two table versions says which rows a
commit deleted without reading any column, which is what the change feed needs
(:mod:`lancepart.read.changes`). Lance has no Python call handing out a deletion vector.

Anything this module does not recognise (a file in another base path, an unknown cookie, a
count that disagrees with the fragment metadata) is None: the caller falls back to asking Lance
for the live row addresses, so an unexpected file costs time, never a wrong answer.
"""

from __future__ import annotations

import os
import struct
import tempfile
from collections.abc import Mapping
from typing import Any

import numpy as np
import pyarrow as pa

from lancepart.storage.lance_io import local_path

_COOKIE_NO_RUNS = 12346  # followed by the container count
_COOKIE_RUNS = 12347  # in the low 16 bits; the high 16 bits are the container count - 1
_NO_OFFSETS_BELOW = 4  # a bitmap with runs stores container offsets only from this many containers
_BITMAP_MAX_ARRAY = 4096  # a container of more values than this is a 65 536-bit bitmap
_NO_THREADS = pa.ipc.IpcReadOptions(use_threads=False)  # a file of one small column: threads cost 4x the read


def roaring_values(data: bytes) -> np.ndarray | None:
    """The sorted ``uint32`` values of a Roaring bitmap in the portable serialisation; None when
    ``data`` is not one (an unknown cookie, a truncated buffer).

    >>> roaring_values(struct.pack("<IIHHIHH", _COOKIE_NO_RUNS, 1, 0, 1, 16, 3, 9)).tolist()
    [3, 9]
    """
    try:
        return _roaring(memoryview(data))
    except (struct.error, ValueError, IndexError):
        return None


def _roaring(buf: memoryview) -> np.ndarray | None:
    (cookie,) = struct.unpack_from("<I", buf, 0)
    pos = 4
    runs = np.zeros(0, dtype=bool)
    if cookie == _COOKIE_NO_RUNS:
        (n,) = struct.unpack_from("<I", buf, pos)
        pos += 4
    elif cookie & 0xFFFF == _COOKIE_RUNS:
        n = (cookie >> 16) + 1
        flags = np.frombuffer(buf, dtype=np.uint8, count=(n + 7) // 8, offset=pos)
        runs = np.unpackbits(flags, bitorder="little")[:n].astype(bool)
        pos += (n + 7) // 8
    else:
        return None
    header = np.frombuffer(buf, dtype="<u2", count=2 * n, offset=pos).astype(np.uint32)
    keys, cards = header[0::2], header[1::2] + 1
    pos += 4 * n
    if cookie == _COOKIE_NO_RUNS or n >= _NO_OFFSETS_BELOW:
        pos += 4 * n
    parts = []
    for i in range(n):
        high = keys[i] << np.uint32(16)
        if len(runs) and runs[i]:
            (n_runs,) = struct.unpack_from("<H", buf, pos)
            pairs = np.frombuffer(buf, dtype="<u2", count=2 * n_runs, offset=pos + 2).astype(np.uint32)
            pos += 2 + 4 * n_runs
            starts, lengths = pairs[0::2], pairs[1::2] + 1
            # each run start..start+length-1, vectorised: offsets within runs added to repeated starts
            within = np.arange(int(lengths.sum()), dtype=np.uint32) - np.repeat(
                np.cumsum(lengths) - lengths, lengths).astype(np.uint32)
            low = np.repeat(starts, lengths) + within
        elif cards[i] > _BITMAP_MAX_ARRAY:
            words = np.frombuffer(buf, dtype=np.uint8, count=8192, offset=pos)
            low = np.flatnonzero(np.unpackbits(words, bitorder="little")).astype(np.uint32)
            pos += 8192
        else:
            low = np.frombuffer(buf, dtype="<u2", count=int(cards[i]), offset=pos).astype(np.uint32)
            pos += 2 * int(cards[i])
        if len(low) != cards[i]:
            return None
        parts.append(high | low)
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.uint32)


def _read_bytes(table_uri: str, path: str, storage_options: Mapping[str, str] | None) -> bytes:
    local = local_path(table_uri)
    if local is not None:
        with open(os.path.join(local, path), "rb") as f:
            return f.read()
    from lance.file import LanceFileSession

    with tempfile.TemporaryDirectory(prefix="lancepart-deletions-") as tmp:
        target = os.path.join(tmp, "file")
        LanceFileSession(table_uri, storage_options=dict(storage_options) if storage_options else None
                         ).download_file(path, target)
        with open(target, "rb") as f:
            return f.read()


def deleted_offsets(table_uri: str, fragment: Any, storage_options: Mapping[str, str] | None = None
                    ) -> np.ndarray | None:
    """The sorted row offsets (``uint32``) that the deletion file of ``fragment`` (a
    ``FragmentMetadata`` of the table at ``table_uri``) marks deleted: empty without a deletion
    file; None when the file is not one this module reads (the caller asks Lance instead)."""
    d = fragment.deletion_file
    if d is None:
        return np.zeros(0, dtype=np.uint32)
    if d.base_id is not None or d.file_type not in ("array", "bitmap"):
        return None
    data = _read_bytes(table_uri, d.path(fragment.id), storage_options)
    if d.file_type == "array":
        try:
            table = pa.ipc.open_file(pa.py_buffer(data), options=_NO_THREADS).read_all()
        except (pa.ArrowInvalid, OSError):
            return None
        if table.num_columns != 1 or not pa.types.is_integer(table.schema.field(0).type):
            return None
        values = np.sort(table.column(0).to_numpy().astype(np.uint32))
    else:
        values = roaring_values(data)
        if values is None:
            return None
    if d.num_deleted_rows is not None and len(values) != d.num_deleted_rows:
        return None
    return values
