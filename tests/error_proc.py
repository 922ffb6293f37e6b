"""Runs one lancepart operation and prints the error it raised as JSON (for the storage-error
tests, which run it with reduced privileges): ``error_proc.py create|open|write ROOT``."""

from __future__ import annotations

import json
import sys

from lancepart import PartitionedNamespace
from lancepart.util.sample import demo_events
from tests.conftest import EVENTS_SPEC


def main() -> int:
    what, root = sys.argv[1], sys.argv[2]
    schema = demo_events(1).schema
    try:
        if what == "create":
            PartitionedNamespace.create(root, schema.set(0, schema.field("id").with_nullable(False)), EVENTS_SPEC)
        elif what == "open":
            PartitionedNamespace.open(root)
        elif what == "write":
            PartitionedNamespace.open(root).write(demo_events(int(sys.argv[3]) if len(sys.argv) > 3 else 100))
        elif what == "read":
            PartitionedNamespace.open(root).to_table()
    except Exception as e:
        print(json.dumps({"error": type(e).__name__, "bases": [c.__name__ for c in type(e).__mro__],
                          "message": str(e)}))
        return 1
    print(json.dumps({"error": None}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
