"""Input files as Arrow: Parquet, CSV (and TSV), newline-delimited JSON and Arrow IPC.

What ``lancepart ingest`` and ``lancepart merge`` write, and what any in-process caller can
hand to :meth:`lancepart.PartitionedNamespace.write` or ``merge``: each file is streamed in
record batches (only its schema is read up front), CSV and JSON columns the namespace schema
knows are parsed as its types, and several files become one stream with one schema.

>>> import gzip, pyarrow.parquet as pq
>>> pq.write_table(pa.table({"id": [7], "event_date": [date(2025, 12, 12)], "country": ["US"]}), f"{tmp}/a.parquet")
>>> with gzip.open(f"{tmp}/b.csv.gz", "wt") as f:
...     _ = f.write("id,event_date,country\\n8,2025-12-12,FR\\n")
>>> reader = input_reader([f"{tmp}/a.parquet", f"{tmp}/b.csv.gz"], None, ns.schema, progress=lambda message: None)
>>> ns.write(reader, batch_id="2025-12-12").rows_written
2
>>> ns.to_table("event_date = DATE '2025-12-12'", columns=["id", "country"]).to_pylist()
[{'id': 7, 'country': 'US'}, {'id': 8, 'country': 'FR'}]
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from lancepart.errors import InvalidArgumentError, SchemaMismatchError

if TYPE_CHECKING:
    import pyarrow as pa

FORMATS = ("parquet", "csv", "json", "ipc")
EXTENSIONS = {".parquet": "parquet", ".pq": "parquet", ".csv": "csv", ".tsv": "csv", ".json": "json",
              ".jsonl": "json", ".ndjson": "json", ".arrow": "ipc", ".arrows": "ipc", ".ipc": "ipc",
              ".feather": "ipc"}
COMPRESSED = (".gz", ".bz2", ".zst", ".lz4")


def input_format(path: str, forced: str | None = None) -> str:
    """The format of an input file: ``forced`` (the command line's ``--format``) or its
    extension (``.parquet``, ``.csv[.gz]``, ...)."""
    if forced:
        return forced
    name = path.lower()
    for ext in COMPRESSED:
        if name.endswith(ext):
            name = name[: -len(ext)]
    fmt = EXTENSIONS.get(os.path.splitext(name)[1])
    if fmt is None:
        raise InvalidArgumentError(f"cannot tell the format of input file {path} from its extension; "
                                   f"pass --format {'|'.join(FORMATS)}")
    return fmt


def open_input(path: str, fmt: str, ns_schema: pa.Schema, batch_rows: int = 65_536
               ) -> tuple[pa.Schema, Callable[[], Iterator[pa.RecordBatch]]]:
    """The schema of one input file and a function streaming its record batches; nothing but
    the schema (Parquet footer, IPC header, first CSV/JSON block) is read up front.

    CSV and JSON columns that the namespace schema knows are parsed as its types, so text
    dates and timestamps arrive typed; everything else is inferred and checked by the write.
    """
    import pyarrow as pa

    if not Path(path).is_file():
        raise InvalidArgumentError(f"input file {path} does not exist")
    types = {f.name: f.type for f in ns_schema}
    try:
        if fmt == "parquet":
            import pyarrow.parquet as pq

            pf = pq.ParquetFile(path)
            return pf.schema_arrow, lambda: pf.iter_batches(batch_size=batch_rows)
        if fmt == "ipc":
            source = pa.memory_map(path)
            try:
                reader = pa.ipc.open_file(source)
                return reader.schema, lambda: (reader.get_batch(i) for i in range(reader.num_record_batches))
            except pa.ArrowInvalid:  # not the IPC file format: the streaming format
                stream = pa.ipc.open_stream(pa.memory_map(path))
                return stream.schema, lambda: iter(stream)
        if fmt == "csv":
            import pyarrow.csv as pcsv

            delimiter = "\t" if ".tsv" in path.lower() else ","
            reader = pcsv.open_csv(path, parse_options=pcsv.ParseOptions(delimiter=delimiter),
                                   convert_options=pcsv.ConvertOptions(column_types=types))
            return reader.schema, lambda: iter(reader)
        if fmt == "json":
            import pyarrow.json as pjson

            with open(path, "rb") as f:
                header = f.readline()
            try:
                present = set(json.loads(header)) if header.strip() else set()
            except ValueError:
                present = set()
            # Arrow's JSON parser reads timestamps from strings but not dates or times: those
            # columns are read as strings and cast batch by batch.
            as_text = {n: t for n, t in types.items() if n in present and
                       (pa.types.is_date(t) or pa.types.is_time(t))}
            explicit = pa.schema([pa.field(n, pa.utf8() if n in as_text else t)
                                  for n, t in types.items() if n in present])
            reader = pjson.open_json(path, parse_options=pjson.ParseOptions(explicit_schema=explicit))
            schema = reader.schema
            for n, t in as_text.items():
                i = schema.get_field_index(n)
                schema = schema.set(i, schema.field(i).with_type(t))
            return schema, lambda: (b.cast(schema) for b in reader)
    except (pa.ArrowInvalid, OSError) as e:
        raise InvalidArgumentError(f"cannot read input file {path} as {fmt}: {e}") from None
    raise InvalidArgumentError(f"unknown input format {fmt!r} (known: {', '.join(FORMATS)})")


def input_reader(paths: Sequence[str], fmt: str | None, ns_schema: pa.Schema, progress: Callable[[str], None],
                 report_every: int = 1_000_000) -> pa.RecordBatchReader:
    """One stream over every input file, with the first file's schema; later files must have
    the same columns (in any order) with types that cast safely. All schemas are checked
    before any row is read."""
    import pyarrow as pa

    opened = []
    for path in paths:
        file_fmt = input_format(path, fmt)
        schema, batches = open_input(path, file_fmt, ns_schema)
        opened.append((path, file_fmt, schema, batches))
    target = opened[0][2]
    for path, _, schema, _ in opened[1:]:
        if set(schema.names) != set(target.names):
            raise SchemaMismatchError(
                f"input file {path} has columns {sorted(schema.names)}, but {opened[0][0]} has "
                f"{sorted(target.names)}: every input file needs the same columns")

    def stream() -> Iterator[pa.RecordBatch]:
        rows = next_report = 0
        for path, file_fmt, schema, batches in opened:
            progress(f"reading {path} ({file_fmt})")
            same = schema.equals(target)
            try:
                for batch in batches():
                    if not same:
                        batch = batch.select(target.names).cast(target)
                    rows += batch.num_rows
                    if rows >= next_report + report_every:
                        next_report = rows - rows % report_every
                        progress(f"{rows} rows read")
                    yield batch
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError, OSError) as e:
                raise InvalidArgumentError(f"cannot read input file {path} as {file_fmt}: {e}") from None
        progress(f"{rows} rows read from {len(opened)} file(s); publishing")

    return pa.RecordBatchReader.from_batches(target, stream())
