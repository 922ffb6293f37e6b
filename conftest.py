"""Globals of the docstring examples (``pytest --doctest-modules`` over lancepart/).

Every doctest that names them gets its own fresh copies, so an example may change them freely:

* ``tmp``: an empty temporary directory (a str).
* ``ns``: an open :class:`~lancepart.PartitionedNamespace` at ``<tmp>/events``, partitioned by
  ``event_date`` (identity), holding :data:`EVENTS`: 4 rows published with batch id ``"2025-12-10"``
  (event dates 2025-12-09 and 2025-12-10), then 2 rows with ``"2025-12-11"`` (2025-12-11).
* ``docs``: an open namespace at ``<tmp>/docs``, partitioned by ``tenant`` (identity), holding
  :data:`DOCS` (4 rows: ``body`` text with an INVERTED index, ``embedding`` 4-dim float vectors).
* ``orders`` and ``customers``: two namespaces at ``<tmp>/orders`` and ``<tmp>/customers`` to
  join on ``orders.customer_id = customers.id``: :data:`ORDERS` partitioned by
  ``bucket(customer_id, 4)``, :data:`CUSTOMERS` by ``bucket(id, 2)`` (compatible: 2 divides 4).
* ``pa`` (pyarrow), ``lancepart``, ``PartitionedNamespace``, ``date``, ``timedelta``.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
from datetime import date, timedelta
from pathlib import Path

import pyarrow as pa
import pytest

# A pytest-xdist worker runs with a __main__ that has neither __spec__ nor __file__, which
# pyspark.sql.connect (imported by great_expectations) takes for a doctest run, and it calls
# sys.exit(0). Give that __main__ a file: one that does nothing if a spawned process runs it
# (as tests/conftest.py does; `pytest lancepart` does not load that one).
if os.environ.get("PYTEST_XDIST_WORKER"):
    _main = sys.modules["__main__"]
    if getattr(_main, "__spec__", None) is None and not hasattr(_main, "__file__"):
        _main.__file__ = str(Path(__file__).parent / "tests" / "xdist_main.py")

EVENTS_SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), ("event_date", pa.date32()),
                           ("country", pa.utf8()), ("user_id", pa.int32()), ("amount", pa.float64())])
EVENTS_SPEC = {"id": 1, "fields": [{"field_id": "event_date", "source_ids": [1], "transform": {"type": "identity"},
                                    "result_type": {"type": "date32"}}]}
EVENTS = pa.table({
    "id": [1, 2, 3, 4, 5, 6],
    "event_date": [date(2025, 12, 9), date(2025, 12, 9), date(2025, 12, 10), date(2025, 12, 10),
                   date(2025, 12, 11), date(2025, 12, 11)],
    "country": ["US", "FR", "US", "DE", "US", "FR"],
    "user_id": [42, 7, 42, 8, 42, 9],
    "amount": [10.0, 20.0, 30.0, 5.5, 12.0, 1.0],
}, schema=EVENTS_SCHEMA)

DOCS_SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), ("tenant", pa.utf8()), ("body", pa.utf8()),
                         ("embedding", pa.list_(pa.float32(), 4))])
DOCS_SPEC = {"id": 1, "fields": [{"field_id": "tenant", "source_ids": [1], "transform": {"type": "identity"},
                                  "result_type": {"type": "utf8"}}]}
DOCS = pa.table({
    "id": [1, 2, 3, 4],
    "tenant": ["acme", "acme", "acme", "globex"],
    "body": ["lance partition tables", "spark batch jobs", "partitioned lance namespaces", "lance on s3"],
    "embedding": [[1, 0, 0, 0], [0, 1, 0, 0], [0.9, 0.1, 0, 0], [1, 0, 0, 0.1]],
}, schema=DOCS_SCHEMA)

ORDERS = pa.table({"order_id": [1, 2, 3, 4, 5], "customer_id": [10, 11, 12, 10, 13],
                   "amount": [5.0, 7.5, 1.0, 3.0, 9.0]})
CUSTOMERS = pa.table({"id": [10, 11, 12, 13], "name": ["ana", "bo", "cy", "di"]})


def _bucket_spec(field_id: str, source_id: int, n: int) -> dict:
    return {"id": 1, "fields": [{"field_id": field_id, "source_ids": [source_id],
                                 "transform": {"type": "bucket", "num_buckets": n}, "result_type": {"type": "int32"}}]}


def _build_events(root: str) -> None:
    from lancepart import PartitionedNamespace

    ns = PartitionedNamespace.create(root, EVENTS_SCHEMA, EVENTS_SPEC)
    ns.write(EVENTS.slice(0, 4), batch_id="2025-12-10")
    ns.write(EVENTS.slice(4), batch_id="2025-12-11")


def _build_docs(root: str) -> None:
    from lancepart import PartitionedNamespace

    ns = PartitionedNamespace.create(root, DOCS_SCHEMA, DOCS_SPEC)
    ns.write(DOCS)
    ns.create_index("body", "INVERTED", min_rows=1)


def _build_orders(root: str) -> None:
    from lancepart import PartitionedNamespace

    PartitionedNamespace.create(root, ORDERS.schema, _bucket_spec("customer_bucket", 1, 4)).write(ORDERS)


def _build_customers(root: str) -> None:
    from lancepart import PartitionedNamespace

    PartitionedNamespace.create(root, CUSTOMERS.schema, _bucket_spec("id_bucket", 0, 2)).write(CUSTOMERS)


_TEMPLATES = {"ns": ("events", _build_events), "docs": ("docs", _build_docs), "orders": ("orders", _build_orders),
              "customers": ("customers", _build_customers)}


@pytest.fixture(scope="session")
def _doctest_templates(tmp_path_factory):
    """The namespaces the doctests copy, each built once per process when first asked for."""
    base = tmp_path_factory.mktemp("doctest_templates")
    built: dict[str, str] = {}

    def template(name: str) -> str:
        if name not in built:
            dirname, build = _TEMPLATES[name]
            build(str(base / dirname))
            built[name] = str(base / dirname)
        return built[name]

    return template


@pytest.fixture(autouse=True)
def _doctest_globals(request, doctest_namespace):
    """Fresh ``tmp`` and namespaces (``ns``, ``docs``, ...) for each doctest that names them (no cost elsewhere)."""
    dtest = getattr(request.node, "dtest", None)  # a doctest item (pytest's DoctestItem)
    if dtest is None:
        return
    import lancepart
    from lancepart import PartitionedNamespace

    doctest_namespace.update(pa=pa, lancepart=lancepart, PartitionedNamespace=PartitionedNamespace, date=date,
                             timedelta=timedelta)
    for name in ("tmp", *_TEMPLATES):  # never a previous doctest's
        doctest_namespace.pop(name, None)
    source = "".join(ex.source for ex in dtest.examples)
    used = {name for name in ("tmp", *_TEMPLATES) if re.search(rf"\b{name}\b", source)}
    if not used:
        return
    tmp = request.getfixturevalue("tmp_path")
    doctest_namespace["tmp"] = str(tmp)
    for name in used & _TEMPLATES.keys():
        dirname, _ = _TEMPLATES[name]
        shutil.copytree(request.getfixturevalue("_doctest_templates")(name), tmp / dirname)
        doctest_namespace[name] = PartitionedNamespace.open(str(tmp / dirname))
