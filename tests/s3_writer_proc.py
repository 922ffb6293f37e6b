"""A writer process for the object-store tests (tests/test_object_store.py).

Storage options come as JSON in the environment variable ``LANCEPART_STORAGE_OPTIONS``
(never on the command line, where ``ps`` would show the secret key).

``write ROOT``: writes demo rows with ids [start, start+rows) through ``ns.write`` (as
tests/writer_proc.py does for local roots) and prints the CommitResult as JSON.

``manifest-race ROOT``: runs ``--commits`` ``Manifest.update`` calls, each adding one
namespace row ``race-<writer>-<i>``, and prints the manifest version every commit landed
at. Several of these racing on one endpoint show whether its commits are atomic: if two
commits of the same version both "succeed", one row is lost and two writers report the
same version. With ``--barrier DIR --writers N`` every writer takes its first snapshot,
then waits for the others: all N first commits target the same version.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import pyarrow as pa

from lancepart import PartitionedNamespace
from lancepart.errors import CommitConflictError
from lancepart.storage.manifest import Manifest, metadata_json
from lancepart.util.sample import demo_events


def _storage_options() -> dict[str, str] | None:
    raw = os.environ.get("LANCEPART_STORAGE_OPTIONS")
    return json.loads(raw) if raw else None


def write(a: argparse.Namespace) -> int:
    data = demo_events(a.rows, seed=a.start, start_id=a.start, days=a.days)
    ns = PartitionedNamespace.open(a.root, storage_options=_storage_options())
    if a.start_at:
        time.sleep(max(0.0, a.start_at - time.time()))
    if a.wait_for:
        deadline = time.monotonic() + 120
        while not os.path.exists(a.wait_for):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{a.wait_for} never appeared")
            time.sleep(0.01)
        ns.refresh()
    try:
        r = ns.write(data, mode=a.mode, batch_id=a.batch_id, max_retries=a.max_retries)
    except CommitConflictError as e:
        print(json.dumps({"error": "CommitConflictError", "message": str(e)}))
        return 3
    print(json.dumps(r.to_dict()))
    return 0


def _barrier(directory: str, name: str, parties: int, timeout: float = 120.0) -> None:
    os.makedirs(directory, exist_ok=True)
    open(os.path.join(directory, name), "w").close()
    deadline = time.monotonic() + timeout
    while len(os.listdir(directory)) < parties:
        if time.monotonic() > deadline:
            raise TimeoutError(f"barrier {directory}: {len(os.listdir(directory))} of {parties} writers arrived")
        time.sleep(0.005)


def manifest_race(a: argparse.Namespace) -> int:
    manifest = Manifest(a.root, _storage_options())
    if a.start_at:
        time.sleep(max(0.0, a.start_at - time.time()))
    waited = not a.barrier
    landed: list[int] = []
    retries = 0
    for i in range(a.commits):
        oid = f"race-{a.writer}-{i}"

        def mutate(snap, oid=oid):
            nonlocal waited
            if not waited:  # after the first snapshot: every writer now holds the same version
                _barrier(a.barrier, a.writer, a.writers)
                waited = True
            row = pa.Table.from_pylist([{"object_id": oid, "object_type": "namespace", "metadata": metadata_json({})}],
                                       schema=snap.rows.schema)
            return pa.concat_tables([snap.rows, row]), None

        snap, _, r = manifest.update(mutate, max_retries=200, base_delay=0.005, max_delay=0.2, what="race")
        landed.append(snap.version)
        retries += r
    print(json.dumps({"writer": a.writer, "versions": landed, "retries": retries}))
    return 0


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("command", choices=["write", "manifest-race"])
    p.add_argument("root")
    p.add_argument("--start", type=int, default=0)
    p.add_argument("--rows", type=int, default=1000)
    p.add_argument("--days", type=int, default=3)
    p.add_argument("--mode", default="append")
    p.add_argument("--batch-id")
    p.add_argument("--max-retries", type=int, default=20)
    p.add_argument("--writer", default="0")
    p.add_argument("--commits", type=int, default=10)
    p.add_argument("--barrier", help="directory the manifest-race writers meet in after their first snapshot")
    p.add_argument("--writers", type=int, default=1, help="how many writers meet at --barrier")
    p.add_argument("--start-at", type=float, default=0.0, help="wall-clock time to begin (lines writers up)")
    p.add_argument("--wait-for", help="write once this file exists")
    a = p.parse_args()
    return write(a) if a.command == "write" else manifest_race(a)


if __name__ == "__main__":
    sys.exit(main())
