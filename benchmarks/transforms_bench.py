"""Throughput of transforms.apply per transform (rows/s), and of the DataFusion path.

Run: ``python benchmarks/transforms_bench.py [rows]`` (default 1,000,000).
"""

from __future__ import annotations

import sys
import time
from decimal import Decimal

import numpy as np
import pyarrow as pa

from lancepart.model import datafusion_udfs as ldf
from lancepart.model import transforms
from lancepart.model.spec import PartitionField


def _columns(n: int) -> dict[str, pa.Array]:
    rng = np.random.default_rng(0)
    words = np.array(["alpha", "beta", "日本語", "😀x", "", "e\u0301t\u00e9"])
    return {
        "i64": pa.array(rng.integers(-(2**40), 2**40, n)),
        "ts_naive": pa.array(rng.integers(-(10**15), 10**15, n), pa.timestamp("us")),
        "ts_ny": pa.array(rng.integers(-(10**15), 10**15, n), pa.timestamp("us", tz="America/New_York")),
        "d32": pa.array(rng.integers(-(10**5), 10**5, n).astype(np.int32), pa.date32()),
        "s": pa.array(words[rng.integers(0, len(words), n)]),
        "dec": pa.array([Decimal(int(x)).scaleb(-2) for x in rng.integers(-(10**9), 10**9, min(n, 200_000))],
                        pa.decimal128(12, 2)),
    }


CASES = [
    ("identity i64", {"type": "identity"}, None, ["i64"], pa.int64()),
    ("year date32", {"type": "year"}, None, ["d32"], pa.int32()),
    ("hour ts naive", {"type": "hour"}, None, ["ts_naive"], pa.int32()),
    ("hour ts America/New_York", {"type": "hour"}, None, ["ts_ny"], pa.int32()),
    ("bucket[16] i64", {"type": "bucket", "num_buckets": 16}, None, ["i64"], pa.int32()),
    ("bucket[16] utf8", {"type": "bucket", "num_buckets": 16}, None, ["s"], pa.int32()),
    ("multi_bucket[16] i64,utf8", {"type": "multi_bucket", "num_buckets": 16}, None, ["i64", "s"], pa.int32()),
    ("truncate[10] i64", {"type": "truncate", "width": 10}, None, ["i64"], pa.int64()),
    ("truncate[3] utf8", {"type": "truncate", "width": 3}, None, ["s"], pa.utf8()),
    ("truncate[10] decimal", {"type": "truncate", "width": 10}, None, ["dec"], pa.decimal128(12, 2)),
    ("expression lower(utf8)", None, "lower(col0)", ["s"], pa.utf8()),
    ("expression abs(murmur3(utf8)) % 16", None, "abs(murmur3(col0)) % 16", ["s"], pa.int64()),
]


def main(n: int) -> None:
    cols = _columns(n)
    for label, tf, expr, names, rt in CASES:
        arrays = [cols[x] for x in names]
        rows = len(arrays[0])
        schema = pa.schema([pa.field(x, a.type, metadata={"lance:field_id": str(i)})
                            for i, (x, a) in enumerate(zip(names, arrays, strict=True))])
        f = PartitionField("f", list(range(len(names))), transform=tf, expression=expr, result_type=rt)
        data = pa.table(dict(zip(names, arrays, strict=True)))
        transforms.apply(f, data.slice(0, 10), schema)  # warm caches
        t0 = time.perf_counter()
        transforms.apply(f, data, schema)
        t = time.perf_counter() - t0
        print(f"{label:40s} {rows / t / 1e6:8.1f} M rows/s")
    sql = "date_part('year', col0)"
    t0 = time.perf_counter()
    for _ in range(200):
        ldf.evaluate(sql, [cols["d32"].slice(0, 1000)])
    print(f"{'evaluate() per 1000-row batch':40s} {(time.perf_counter() - t0) / 200 * 1e3:8.2f} ms")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000)
