"""Read partition tables at their published version (spec "Transaction / Read Behavior").

``read_version`` alone: that version of main; ``read_branch`` + ``read_version``: that
version of the branch; ``read_tag``: the tagged version; all NULL: latest main. Rows a
table holds beyond its published version are never visible here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import lance
import pyarrow as pa

from lancepart.errors import CorruptNamespaceError
from lancepart.ids import check_location
from lancepart.manifest import join_uri
from lancepart.results import PartitionInfo


def open_partition(root: str, info: PartitionInfo, storage_options: Mapping[str, str] | None = None
                   ) -> lance.LanceDataset:
    """The partition table at its published version. :class:`UnsafeLocationError` when its
    ``location`` leaves the root; :class:`CorruptNamespaceError` naming the table when Lance
    cannot open that version."""
    so = dict(storage_options) if storage_options else None
    uri = join_uri(root, check_location(info.location, info.object_id, root))
    try:
        if info.read_tag is not None:
            return lance.dataset(uri, version=info.read_tag, storage_options=so)
        if info.read_branch is not None:
            return lance.dataset(uri, storage_options=so).checkout_version((info.read_branch, info.read_version))
        return lance.dataset(uri, version=info.read_version, storage_options=so)
    except (OSError, ValueError) as e:
        raise CorruptNamespaceError(
            f"partition table {info.object_id!r} at {uri} (read_version={info.read_version}, "
            f"read_branch={info.read_branch!r}, read_tag={info.read_tag!r}) cannot be opened: {e}") from e


def scan(root: str, partitions: Sequence[PartitionInfo], schema: pa.Schema, *, filter: str | None = None,
         columns: Sequence[str] | None = None, storage_options: Mapping[str, str] | None = None) -> pa.Table:
    """Concatenate the published rows of ``partitions``, with ``filter`` and ``columns`` pushed
    into each Lance scan."""
    cols = list(columns) if columns is not None else None
    out_schema = pa.schema([schema.field(c) for c in cols]) if cols is not None else schema
    tables = []
    for info in partitions:
        t = open_partition(root, info, storage_options).to_table(columns=cols, filter=filter)
        tables.append(t.select(out_schema.names).cast(out_schema))
    return pa.concat_tables(tables) if tables else out_schema.empty_table()
