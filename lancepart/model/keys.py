"""How merge keys compare: as DataFusion's ``=`` in a filter does (-0.0 is 0.0, NaN is NaN).
The merge matches keys so, and the change feed pairs an update's two images so."""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa
import pyarrow.compute as pc


def key_values(col: pa.Array | pa.ChunkedArray) -> pa.Array | pa.ChunkedArray:
    """A key column as a merge compares it, which is how filters (DataFusion's ``=``) compare:
    -0.0 is 0.0 (adding +0.0 turns -0.0 into 0.0 and keeps every other value), and a NaN equals
    every NaN (Arrow's hash lookups and joins already treat NaNs so)."""
    if pa.types.is_floating(col.type):
        return pc.add(col, pa.scalar(0, col.type))
    return col


def comparable_keys(table: pa.Table, on: Sequence[str]) -> pa.Table:
    """``table`` with its key columns ``on`` as :func:`key_values` compares them."""
    for c in on:
        i = table.schema.get_field_index(c)
        table = table.set_column(i, table.schema.field(i), key_values(table.column(i)))
    return table
