"""Lance file format versions for small partition tables: write, size, read, features.

A partitioned namespace is many small Lance tables (one per partition), so what matters is the
cost of one small table in each Lance file format version. For every version pylance can write
(``2.0``, ``2.1``, the default of this pylance, ``legacy`` when it is still accepted; ``2.3`` /
``next`` is an unstable development format and is left out), the script writes ``--tables``
tables of ``--rows`` rows each (int64 ``id`` 0..rows-1 per table, a ``timestamp[us]``, a
float64 and a 40-character string; numpy, seeded) with ``lance.write_dataset`` on 16 threads
and one shared ``lance.Session`` (:mod:`lancepart.storage.lance_io`), into a fresh directory per round.
Rounds are interleaved (round r starts with version r mod n); one untimed warm-up round first.

Measured per version (medians over the rounds; reads run over the tables of the last round):

* write: the ``--tables`` writes, 16 threads
* bytes: on disk, all tables
* scan: ``to_table()`` of every table (16 threads)
* filter: ``to_table(filter="id > 0.9 * rows")`` of every table (10 % of the rows)
* count: ``count_rows()`` of every table
* take: ``take`` of 10 random rows of every table

Then, on one table per version: BTREE scalar index and a filtered read that uses it;
``add_columns`` / ``alter_columns`` / ``drop_columns``; ``delete`` + ``compact_files`` (and
the file version of the rewritten data file); and the encodings the data files hold, per
column (read from the file metadata; none for legacy, whose reader is not exposed).

    python benchmarks/file_format.py [--tables 1000] [--rows 1000] [--rounds 5] [--threads 16]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import lance
import numpy as np
import pyarrow as pa
from machine_info import machine

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from lancepart.storage import lance_io

CANDIDATES = ("2.0", "2.1", None, "legacy")  # None: pylance's default
_ENCODING = re.compile(r"\b([A-Z][A-Za-z]+)[ ]?[({]")
_NOT_ENCODINGS = {"Some", "ArrayEncoding", "CompressiveEncoding", "PageLayout", "Buffer", "NoNull", "NoNulls"}


def make_table(rows: int, seed: int) -> pa.Table:
    rng = np.random.default_rng(seed)
    text = np.frombuffer(rng.bytes(rows * 20), dtype=np.uint8).reshape(rows, 20)
    strings = [bytes(r).hex() for r in text]  # 40 characters
    return pa.table({
        "id": pa.array(np.arange(rows, dtype=np.int64)),
        "ts": pa.array(1_700_000_000_000_000 + rng.integers(0, 86_400_000_000, rows), pa.timestamp("us")),
        "value": pa.array(rng.random(rows)),
        "name": pa.array(strings, pa.string()),
    })


def label(v: str | None, default: str) -> str:
    return f"{default} (default)" if v is None else v


def kw(v: str | None) -> dict:
    return {} if v is None else {"data_storage_version": v}


def du(path: str) -> int:
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs)


def write_all(tables: list[pa.Table], root: str, v: str | None, threads: int) -> float:
    os.makedirs(root)
    t = time.perf_counter()
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(lambda it: lance_io.write_dataset(it[1], os.path.join(root, f"t{it[0]:05d}"), **kw(v)),
                      enumerate(tables)))
    return time.perf_counter() - t


def over_tables(root: str, n: int, threads: int, fn: Callable[[lance.LanceDataset], object]) -> float:
    t = time.perf_counter()
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(lambda i: fn(lance_io.open_table(os.path.join(root, f"t{i:05d}"))), range(n)))
    return time.perf_counter() - t


def encodings(uri: str) -> dict[str, list[str]] | str:
    from lance.file import LanceFileReader

    ds = lance_io.open_table(uri)
    f = ds.get_fragments()[0].metadata.files[0]
    try:
        md = LanceFileReader(os.path.join(uri, "data", f.path)).metadata()
    except Exception as e:  # legacy files: the v2 reader refuses them
        return f"n/a ({type(e).__name__})"
    out = {}
    for name, col in zip(ds.schema.names, md.columns, strict=False):
        found = set()
        for page in col.pages:
            found.update(m for m in _ENCODING.findall(str(page.encoding)) if m not in _NOT_ENCODINGS)
        out[name] = sorted(found)
    return out


def file_version(ds: lance.LanceDataset) -> set[str]:
    return {f"{df.file_major_version}.{df.file_minor_version}" for fr in ds.get_fragments()
            for df in fr.metadata.files}


def check(fn: Callable[[], object]) -> str:
    try:
        r = fn()
        return "ok" if r is None else f"ok {r}"
    except Exception as e:
        return f"FAILED {type(e).__name__}: {str(e)[:120]}"


def features(base: str, v: str | None, rows: int) -> dict[str, str]:
    uri = os.path.join(base, "features")
    data = make_table(rows, 7)
    lance_io.write_dataset(pa.concat_tables([data, data]), uri, max_rows_per_file=rows, **kw(v))
    res = {"file version": ",".join(sorted(file_version(lance_io.open_table(uri))))}

    def btree():
        ds = lance_io.open_table(uri)
        ds.create_scalar_index("id", "BTREE")
        ds = lance_io.open_table(uri)
        plan = ds.scanner(filter=f"id = {rows // 2}").explain_plan()
        n = ds.to_table(filter=f"id = {rows // 2}").num_rows
        return f"rows={n} index used={'ScalarIndexQuery' in plan or 'MaterializeIndex' in plan}"

    def evolve():
        ds = lance_io.open_table(uri)
        ds.add_columns({"double_id": "id * 2"})
        ds = lance_io.open_table(uri)
        ds.alter_columns({"path": "value", "name": "score"})
        ds = lance_io.open_table(uri)
        ds.drop_columns(["double_id"])
        ds = lance_io.open_table(uri)
        return f"columns={ds.schema.names} files={sorted(file_version(ds))}"

    def delete_compact():
        ds = lance_io.open_table(uri)
        ds.delete(f"id < {rows // 10}")
        ds = lance_io.open_table(uri)
        ds.optimize.compact_files(target_rows_per_fragment=4 * rows)
        ds = lance_io.open_table(uri)
        return (f"rows={ds.count_rows()} fragments={len(ds.get_fragments())} "
                f"files={sorted(file_version(ds))}")

    res["btree"] = check(btree)
    res["schema evolution"] = check(evolve)
    res["delete+compact"] = check(delete_compact)
    res["encodings"] = json.dumps(encodings(uri)) if os.path.exists(uri) else "n/a"
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tables", type=int, default=1000)
    ap.add_argument("--rows", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, default=16)
    args = ap.parse_args()
    print(json.dumps(machine("lance", "pyarrow", "numpy")))

    default = lance.write_dataset(pa.table({"x": [1]}), tempfile.mkdtemp(prefix="ff-probe-")).data_storage_version
    versions = []
    for v in CANDIDATES:
        try:
            lance.write_dataset(pa.table({"x": [1]}), tempfile.mkdtemp(prefix="ff-probe-"), **kw(v))
            versions.append(v)
        except Exception as e:
            print(f"# {v}: not writable here ({type(e).__name__}: {e})")
    print(f"# default data_storage_version of pylance {lance.__version__}: {default}")

    tables = [make_table(args.rows, i) for i in range(args.tables)]
    base = tempfile.mkdtemp(prefix="lancepart-file-format-")
    times: dict[str | None, list[float]] = {v: [] for v in versions}
    last: dict[str | None, str] = {}
    try:
        for r in range(-1, args.rounds):  # round -1: warm-up, untimed
            order = versions[r % len(versions):] + versions[:r % len(versions)] if r >= 0 else versions
            for v in order:
                root = os.path.join(base, f"r{r + 1}-{label(v, default).split()[0]}")
                dt = write_all(tables, root, v, args.threads)
                if r >= 0:
                    times[v].append(dt)
                if v in last:
                    shutil.rmtree(last[v])
                last[v] = root

        reads: dict[str | None, dict[str, float]] = {v: {"scan": [], "filter": [], "count": [], "take": []}
                                                     for v in versions}
        cut = int(args.rows * 0.9)
        rng = np.random.default_rng(1)
        idx = sorted(rng.choice(args.rows, size=min(10, args.rows), replace=False).tolist())
        for r in range(args.rounds):
            order = versions[r % len(versions):] + versions[:r % len(versions)]
            for v in order:
                root, n, th = last[v], args.tables, args.threads
                reads[v]["scan"].append(over_tables(root, n, th, lambda ds: ds.to_table()))
                reads[v]["filter"].append(over_tables(root, n, th, lambda ds: ds.to_table(filter=f"id > {cut}")))
                reads[v]["count"].append(over_tables(root, n, th, lambda ds: ds.count_rows()))
                reads[v]["take"].append(over_tables(root, n, th, lambda ds: ds.take(idx)))

        print(f"\n{args.tables} tables x {args.rows} rows, {args.threads} threads, {args.rounds} rounds "
              f"(medians, seconds; bytes on disk of one round's tables)")
        print(f"{'format':<16}{'write':>8}{'min':>8}{'MB':>8}{'B/row':>7}"
              f"{'scan':>8}{'filter':>8}{'count':>8}{'take':>8}")
        summary = {}
        for v in versions:
            size = du(last[v])
            med = {k: statistics.median(x) for k, x in reads[v].items()}
            row = {"write": statistics.median(times[v]), "write_min": min(times[v]), "bytes": size, **med}
            summary[label(v, default)] = row
            print(f"{label(v, default):<16}{row['write']:>8.2f}{row['write_min']:>8.2f}{size / 1e6:>8.1f}"
                  f"{size / (args.tables * args.rows):>7.1f}{med['scan']:>8.2f}{med['filter']:>8.2f}"
                  f"{med['count']:>8.2f}{med['take']:>8.2f}")
        for v in versions:
            shutil.rmtree(last[v])

        print("\nfeatures (one table of 2 fragments per version)")
        for v in versions:
            d = os.path.join(base, f"feat-{label(v, default).split()[0]}")
            os.makedirs(d)
            res = features(d, v, args.rows)
            summary[label(v, default)]["features"] = res
            print(f"[{label(v, default)}]")
            for k, val in res.items():
                print(f"  {k:<17}{val}")
        print(json.dumps({"tables": args.tables, "rows": args.rows, "rounds": args.rounds, "results": summary}))
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
