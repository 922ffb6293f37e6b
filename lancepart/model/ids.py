"""Object ids and table directories (spec "Physical Layout and Naming"; docs/design.md §4, §5).

A partition namespace id is 16 base36 characters derived deterministically from the spec
version, the level and the partition values down to that level, so every writer names
the same partition the same way. Nothing may ever parse a value out of an id: values
live in the ``partition_field_*`` columns of ``__manifest``.
"""

from __future__ import annotations

import hashlib
import secrets
import struct
from collections.abc import Sequence

import pyarrow as pa

DELIMITER = "$"
TABLE_NAME = "dataset"
ID_LENGTH = 16
_ALPHABET = "0123456789abcdefghijklmnopqrstuvwxyz"
_ID_SPACE = 36**ID_LENGTH


#: Root property of each partition spec version: ``partition_spec_v<N>``.
SPEC_KEY_PREFIX = "partition_spec_v"
#: Root property: the namespace schema (JSON).
SCHEMA_KEY = "schema"


def spec_namespace(spec_id: int) -> str:
    """The spec version namespace name: ``v<N>``."""
    return f"v{spec_id}"


def partition_spec_id(object_id: str) -> int | None:
    """The spec version of a partition table id ``v<N>$...$dataset``; None for any other table
    (a root-level table of a directory namespace is not a partition).

    >>> partition_spec_id("v2$k7m2a1b2c3d4e5f6$dataset"), partition_spec_id("events")
    (2, None)
    """
    parts = object_id.split(DELIMITER)
    head = parts[0]
    if len(parts) < 2 or parts[-1] != TABLE_NAME or head[:1] != "v" or not head[1:].isdigit():
        return None
    return int(head[1:])


def _base36(n: int) -> str:
    out = []
    for _ in range(ID_LENGTH):
        n, r = divmod(n, 36)
        out.append(_ALPHABET[r])
    return "".join(reversed(out))


def partition_ids(spec_id: int, values: Sequence[pa.Array]) -> list[list[str]]:
    """Namespace ids of every level for each partition (one row per partition).

    ``values[level]`` holds the partition values of field ``level`` (typed by its
    ``result_type``), one entry per partition. Returns ``ids[row][level]``: the id of the
    partition namespace at that level. Equal values give equal ids in every process.

    >>> partition_ids(1, [pa.array([2025], pa.int32())])[0][0] == partition_ids(1, [pa.array([2025], pa.int32())])[0][0]
    True
    """
    from lancepart.model.murmur3 import canonical_bytes  # canonical encoding shared with bucket hashing

    if not values:
        return []
    n = len(values[0])
    encoded = [canonical_bytes(v).to_pylist() for v in values]
    out: list[list[str]] = []
    for row in range(n):  # per partition, not per data row
        h = hashlib.sha256(b"lance-partition-namespace\x00" + str(spec_id).encode())
        ids = []
        for level, column in enumerate(encoded):
            b = column[row]
            # level and a length prefix keep (NULL), (b"") and value boundaries distinct
            h.update(struct.pack("<IB", level, b is not None))
            if b is not None:
                h.update(struct.pack("<Q", len(b)) + b)
            ids.append(_base36(int.from_bytes(h.copy().digest(), "big") % _ID_SPACE))
        out.append(ids)
    return out


def namespace_object_id(spec_id: int, ids: Sequence[str]) -> str:
    """``v<N>$<id1>$...$<idk>``: the object_id of a partition namespace."""
    return DELIMITER.join([spec_namespace(spec_id), *ids])


def table_object_id(spec_id: int, ids: Sequence[str]) -> str:
    """``v<N>$<id1>$...$dataset``: the object_id of a partition table."""
    return DELIMITER.join([spec_namespace(spec_id), *ids, TABLE_NAME])


def table_location(object_id: str) -> str:
    """A fresh table directory, ``<8 random lowercase hex>_<object_id>`` (docs/design.md §5).

    Random, so a table created, dropped and recreated never shares a directory.
    """
    return f"{secrets.token_hex(4)}_{object_id}"


def check_location(location: object, object_id: object, root: str) -> str:
    """``location`` of a ``__manifest`` table row, if it is one directory name inside ``root``;
    else :class:`UnsafeLocationError` naming it. A hand-edited row must never make a reader or
    writer leave the namespace root (``../x``, ``/abs``, ``a/b``, ``..``). Locations lancepart
    makes are ``<8 hex>_<object_id>``; others (``<name>.lance``) are accepted if they are safe.

    >>> check_location("3f9a0c1e_v1$k7m2n9p4q8r5s3t6$dataset", "v1$k7m2n9p4q8r5s3t6$dataset", "/r")
    '3f9a0c1e_v1$k7m2n9p4q8r5s3t6$dataset'
    """
    from lancepart.errors import UnsafeLocationError

    if (not isinstance(location, str) or location in ("", ".", "..")
            or any(c in location for c in ("/", "\\", "\0"))):
        raise UnsafeLocationError(
            f"__manifest row {object_id!r} has location {location!r}: a table location must be one "
            f"directory name inside the namespace root {root} (no path separator, no '..', not absolute); "
            f"refusing to read or write it")
    return location


def is_valid_namespace_id(name: str) -> bool:
    return len(name) == ID_LENGTH and all(c in _ALPHABET for c in name)
