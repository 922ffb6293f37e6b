"""Packing a scan's partition tables into Spark input partitions the way Spark packs the files
of its own file sources (``FilePartition``), so 1 000 small tables are read by tens of tasks,
not 1 000, and one big table by several.

A *split* is a partition table, or a run of whole fragments of a table whose data files are
bigger than the split size; its size is the bytes of its data files, as the table's manifest
at its published version records them (the tables' manifests are read on the driver in
parallel, nothing else). Like Spark:

* ``max_split_bytes = min(max_partition_bytes, max(open_cost, total / min_partitions))`` where
  ``total`` sums every split's bytes plus ``open_cost`` (what opening one table costs, in bytes
  of reading): few bytes in all still make at least ``min_partitions`` tasks;
* splits, biggest first, fill a task until the next one would take it past
  ``max_split_bytes``; each split counts its bytes plus ``open_cost``.

The options carry Spark's own names (docs/datasource.md): ``maxPartitionBytes`` (default
Spark's ``spark.sql.files.maxPartitionBytes``, 128 MB), ``openCostInBytes``
(``spark.sql.files.openCostInBytes``, 4 MB) and ``minPartitions``
(``spark.sql.files.minPartitionNum``, else the session's default parallelism), the defaults
taken from the session when ``lps.register(spark)`` runs.

>>> [len(t) for t in pack([Split({"t": i}, 10 * 2**20) for i in range(10)], max_partition_bytes=64 * 2**20,
...                       open_cost=4 * 2**20, min_partitions=1)]
[4, 4, 2]
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from lancepart.errors import InvalidArgumentError
from lancepart.results import PartitionInfo, info_to_json
from lancepart.util.parallel import map_threads

MB = 1024 * 1024
#: Spark's own defaults (spark.sql.files.maxPartitionBytes / openCostInBytes)
DEFAULT_MAX_PARTITION_BYTES = 128 * MB
DEFAULT_OPEN_COST = 4 * MB
#: what a data file with no recorded size (files of old Lance versions) counts per row
BYTES_PER_ROW_UNKNOWN = 64

#: the read options of packing, as Spark lower-cases them, and the session settings they default to
PACKING_OPTIONS = {"maxpartitionbytes": "spark.sql.files.maxPartitionBytes",
                   "opencostinbytes": "spark.sql.files.openCostInBytes",
                   "minpartitions": "spark.sql.files.minPartitionNum"}

_UNITS = {"": 1, "b": 1, "k": 1024, "kb": 1024, "m": MB, "mb": MB, "g": 1024 * MB, "gb": 1024 * MB,
          "t": 1024**4, "tb": 1024**4}


@dataclass(frozen=True)
class Split:
    """One unit of a scan: a task description (one table, or a run of its fragments) and its bytes."""

    task: dict[str, Any]
    bytes: int


@dataclass(frozen=True)
class Packing:
    """How a scan is packed (see the module docstring)."""

    max_partition_bytes: int = DEFAULT_MAX_PARTITION_BYTES
    open_cost: int = DEFAULT_OPEN_COST
    min_partitions: int = 1


def byte_size(name: str, raw: Any) -> int:
    """A size as Spark writes one (``"128MB"``, ``"134217728b"``, ``"4m"``, ``134217728``), in bytes.

    >>> byte_size("maxPartitionBytes", "128MB"), byte_size("openCostInBytes", "4194304")
    (134217728, 4194304)
    """
    m = re.fullmatch(r"\s*(\d+)\s*([a-zA-Z]*)\s*", str(raw))
    unit = m.group(2).lower() if m else None
    if m is None or unit not in _UNITS:
        raise InvalidArgumentError(f"option {name!r} must be a size in bytes such as 134217728 or '128MB', got {raw!r}")
    value = int(m.group(1)) * _UNITS[unit]
    if value < 1:
        raise InvalidArgumentError(f"option {name!r} must be a positive size, got {raw!r}")
    return value


def packing(options: Mapping[str, str], defaults: Mapping[str, Any] | None = None) -> Packing:
    """The :class:`Packing` of a read's ``options`` (keys as Spark lower-cases them), each missing
    one taken from ``defaults`` (the session's settings, keyed like ``options``), else Spark's default.

    >>> packing({"maxpartitionbytes": "64MB"}).max_partition_bytes
    67108864
    """
    defaults = defaults or {}

    def pick(key: str):
        value = options.get(key)
        return value if value is not None else defaults.get(key)

    from lancepart.spark.options import _int_option

    max_bytes, open_cost = pick("maxpartitionbytes"), pick("opencostinbytes")
    return Packing(
        max_partition_bytes=DEFAULT_MAX_PARTITION_BYTES if max_bytes is None else byte_size("maxPartitionBytes",
                                                                                            max_bytes),
        open_cost=DEFAULT_OPEN_COST if open_cost is None else byte_size("openCostInBytes", open_cost),
        min_partitions=_int_option({"minPartitions": pick("minpartitions")}, "minPartitions", 1, 1))


def max_split_bytes(sizes: Sequence[int], p: Packing) -> int:
    """Spark's ``FilePartition.maxSplitBytes`` for splits of ``sizes``.

    >>> max_split_bytes([MB] * 4, Packing(min_partitions=2))
    10485760
    """
    total = sum(s + p.open_cost for s in sizes)
    return min(p.max_partition_bytes, max(p.open_cost, total // max(1, p.min_partitions)))


def pack(splits: Sequence[Split], *, max_partition_bytes: int, open_cost: int,
         min_partitions: int = 1) -> list[list[dict[str, Any]]]:
    """The tasks of ``splits``: lists of task descriptions, packed biggest first until the next
    split would take a task past the split size (Spark's ``FilePartition.getFilePartitions``).

    >>> pack([], max_partition_bytes=MB, open_cost=MB)
    []
    """
    p = Packing(max_partition_bytes, open_cost, min_partitions)
    limit = max_split_bytes([s.bytes for s in splits], p)
    tasks: list[list[dict[str, Any]]] = []
    current: list[dict[str, Any]] = []
    size = 0
    for s in sorted(splits, key=lambda s: s.bytes, reverse=True):
        if current and size + s.bytes > limit:
            tasks.append(current)
            current, size = [], 0
        current.append(s.task)
        size += s.bytes + p.open_cost
    if current:
        tasks.append(current)
    return tasks


def _fragment_sizes(ds) -> list[tuple[int, int, int]]:
    """(fragment id, live rows, bytes of data files) of each fragment of ``ds``."""
    out = []
    for f in ds.get_fragments():
        md = f.metadata
        physical = md.physical_rows or 0
        rows = physical - (md.num_deletions or 0)
        sizes = [df.file_size_bytes for df in md.files]
        size = sum(sizes) if sizes and all(s is not None for s in sizes) else physical * BYTES_PER_ROW_UNKNOWN
        out.append((f.fragment_id, rows, size))
    return out


def _table_fragments(root: str, info: PartitionInfo, so: Mapping[str, str] | None) -> list[tuple[int, int, int]]:
    """:func:`_fragment_sizes` of one table at its published version; none for a declared table
    not created yet (no rows, nothing to read)."""
    from lancepart.read.snapshot import open_published

    ds = open_published(root, info, so)
    return [] if ds is None else _fragment_sizes(ds)


def _table_splits(info: PartitionInfo, frags: Sequence[tuple[int, int, int]], limit: int,
                  split_rows: int | None) -> list[Split]:
    """The splits of one table of fragments ``frags``: the whole table, or runs of whole
    fragments of at most ``limit`` bytes (and ``split_rows`` rows) when it is bigger.

    >>> [s.task["fragments"] for s in _table_splits(PartitionInfo("t", "t", 1, {}, 3), [(0, 10, 60), (1, 10, 60)],
    ...                                             100, None)]
    [[0], [1]]
    """
    if not frags:
        return []
    total_bytes = sum(s for _, _, s in frags)
    total_rows = sum(r for _, r, _ in frags)
    if total_bytes <= limit and (split_rows is None or total_rows <= split_rows):
        return [Split(info_to_json(info, fragments=None), total_bytes)]
    runs: list[tuple[list[int], int]] = []
    ids: list[int] = []
    size = rows = 0
    for fid, n, b in frags:
        if ids and (size + b > limit or (split_rows is not None and rows + n > split_rows)):
            runs.append((ids, size))
            ids, size, rows = [], 0, 0
        ids.append(fid)
        size += b
        rows += n
    runs.append((ids, size))
    return [Split(info_to_json(info, fragments=run), b) for run, b in runs]


def plan_scan(root: str, partitions: Sequence[PartitionInfo], p: Packing, *,
              split_rows: int | None = None,
              storage_options: Mapping[str, str] | None = None) -> list[list[dict[str, Any]]]:
    """The tasks of a scan of ``partitions``: each a list of task descriptions
    (:func:`lancepart.results.info_to_json`, with ``fragments`` for a run of a big table). The
    tables' manifests are read in parallel for their sizes; a table bigger than the split size
    (or holding more than ``split_rows`` rows) becomes runs of whole fragments.

    >>> plan_scan("/r", [], Packing())
    []
    """
    if split_rows is not None and split_rows < 1:
        raise InvalidArgumentError(f"split_rows must be a positive number of rows, got {split_rows!r}")
    frags = map_threads(lambda info: _table_fragments(root, info, storage_options), partitions)
    # the split size comes from the tables' sizes, as it comes from the files' in Spark
    limit = max_split_bytes([sum(s for _, _, s in f) for f in frags if f], p)
    splits = [s for info, f in zip(partitions, frags, strict=True) for s in _table_splits(info, f, limit, split_rows)]
    return pack(splits, max_partition_bytes=p.max_partition_bytes, open_cost=p.open_cost,
                min_partitions=p.min_partitions)


def session_defaults(spark) -> dict[str, str]:
    """The session's settings for :func:`packing`, keyed as its options: ``spark.sql.files.*`` and,
    without ``minPartitionNum``, the default parallelism (what Spark's file sources use)."""
    out: dict[str, str] = {}
    for key, conf in PACKING_OPTIONS.items():
        try:
            value = spark.conf.get(conf, None)
        except Exception:  # a session that refuses to answer: Spark's defaults
            value = None
        if value is not None:
            out[key] = str(value)
    if "minpartitions" not in out:
        try:
            out["minpartitions"] = str(spark.sparkContext.defaultParallelism)
        except Exception:  # Spark Connect has no SparkContext
            pass
    return out
