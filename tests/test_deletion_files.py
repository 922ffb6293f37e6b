"""Deletion files read by lancepart itself (lancepart/storage/deletion_files.py), which the change
feed compares to say which rows a commit deleted without reading a column.

Lance's storage layout ("Deletion Files"): ``.arrow`` files (Arrow IPC, sparse deletions) and
``.bin`` files (a Roaring bitmap in the portable serialisation, dense deletions). The oracle is
Lance itself: the offsets a deletion file marks are exactly the rows of the fragment that a Lance
scan no longer lists.
"""

from __future__ import annotations

import struct

import lance
import numpy as np
import pyarrow as pa
import pytest

from lancepart.storage.deletion_files import deleted_offsets, roaring_values

ROWS = 200_000


def _deleted_by_lance(ds: lance.LanceDataset) -> np.ndarray:
    live = ds.to_table(columns=[], with_row_address=True).column("_rowaddr").to_numpy()
    return np.setdiff1d(np.arange(ROWS, dtype=np.uint64), live)


@pytest.mark.parametrize("deletes, file_type", [
    (["a % 1000 = 7"], "array"),
    (["a % 2 = 0"], "bitmap"),
    (["r < 0.3"], "bitmap"),
    (["a < 150000", "a > 180000 AND a < 180100"], "bitmap"),  # long runs, two deletes layered
    (["a % 97 = 1", "a % 89 = 2"], "array"),
    (["a % 9 <> 0"], "bitmap"),  # dense: bitmap containers
])
def test_offsets_are_the_rows_lance_no_longer_lists(tmp_path, deletes, file_type):
    rng = np.random.default_rng(7)
    ds = lance.write_dataset(pa.table({"a": np.arange(ROWS), "r": rng.random(ROWS)}), str(tmp_path / "t"),
                             max_rows_per_file=ROWS)
    for d in deletes:
        ds.delete(d)
    (frag,) = ds.get_fragments()
    assert frag.metadata.deletion_file.file_type == file_type
    got = deleted_offsets(ds.uri, frag.metadata)
    assert got is not None and got.dtype == np.uint32
    np.testing.assert_array_equal(got.astype(np.uint64), _deleted_by_lance(ds))


def test_no_deletion_file_is_no_offsets(tmp_path):
    ds = lance.write_dataset(pa.table({"a": np.arange(10)}), str(tmp_path / "t"))
    assert deleted_offsets(ds.uri, ds.get_fragments()[0].metadata).tolist() == []


def _portable(containers: list[tuple[int, str, np.ndarray]]) -> bytes:
    """A Roaring bitmap with run containers, serialised by the portable format's rules (a
    SERIAL_COOKIE with the run flags, offsets from 4 containers): what Lance does not write today
    and another Roaring writer may."""
    n = len(containers)
    out = struct.pack("<I", 12347 | ((n - 1) << 16))
    flags = np.zeros((n + 7) // 8 * 8, dtype=np.uint8)
    flags[[i for i, (_, kind, _) in enumerate(containers) if kind == "run"]] = 1
    out += np.packbits(flags, bitorder="little").tobytes()
    bodies = []
    for key, kind, low in containers:
        out += struct.pack("<HH", key, len(low) - 1)
        if kind == "run":
            breaks = np.flatnonzero(np.diff(low) != 1) + 1
            starts = low[np.r_[0, breaks]]
            lengths = np.diff(np.r_[0, breaks, len(low)])
            pairs = np.column_stack([starts, lengths - 1]).astype("<u2").ravel()
            bodies.append(struct.pack("<H", len(starts)) + pairs.tobytes())
        elif kind == "bitmap":
            bits = np.zeros(65536, dtype=np.uint8)
            bits[low] = 1
            bodies.append(np.packbits(bits, bitorder="little").tobytes())
        else:
            bodies.append(low.astype("<u2").tobytes())
    if n >= 4:
        start = len(out) + 4 * n
        for body in bodies:
            out += struct.pack("<I", start)
            start += len(body)
    return out + b"".join(bodies)


@pytest.mark.parametrize("n_containers", [2, 5])
def test_roaring_run_containers(n_containers):
    rng = np.random.default_rng(n_containers)
    containers, expected = [], []
    for key in range(n_containers):
        kind = ["run", "array", "bitmap"][key % 3]
        if kind == "run":
            low = np.r_[np.arange(10, 5000), np.arange(7000, 7001), np.arange(60000, 65536)]
        elif kind == "array":
            low = np.unique(rng.integers(0, 65536, 300))
        else:
            low = np.unique(rng.integers(0, 65536, 20000))
        low = low.astype(np.uint32)
        containers.append((key * 3, kind, low))
        expected.append((np.uint32(key * 3) << np.uint32(16)) | low)
    np.testing.assert_array_equal(roaring_values(_portable(containers)), np.concatenate(expected))


@pytest.mark.parametrize("data", [b"", b"\x01\x02\x03\x04\x05\x06", struct.pack("<II", 12346, 3) + b"\x00" * 5])
def test_not_a_roaring_bitmap_is_none(data):
    assert roaring_values(data) is None


def test_a_file_whose_count_disagrees_with_the_metadata_is_not_trusted(tmp_path):
    ds = lance.write_dataset(pa.table({"a": np.arange(100)}), str(tmp_path / "t"))
    ds.delete("a < 5")
    md = ds.get_fragments()[0].metadata
    d = md.deletion_file
    lying = lance.fragment.DeletionFile(d.read_version, d.id, d.file_type, d.num_deleted_rows + 1, None)
    md.deletion_file = lying
    assert deleted_offsets(ds.uri, md) is None
