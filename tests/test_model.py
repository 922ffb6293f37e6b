"""Model-based test of the public operations of PartitionedNamespace taken together (issue 21).

Each operation is tested alone elsewhere; this module runs them in random sequences against an
in-memory oracle and checks, after every step, that what is published is what the oracle says:

* a Hypothesis ``RuleBasedStateMachine`` (:class:`NamespaceModel`) whose rules are the public
  operations (write append / overwrite with and without batch ids and reruns, replace-where,
  merge by id, by a float and by (id, float) keys, delete, update_schema, evolve, compact,
  cleanup at zero retention, rollback and roll-forward, drop_partitions, create/drop_index, a
  foreign ``DirectoryNamespace`` strip then repair, and a fault right before the ``__manifest``
  commit). The oracle is the list of published rows (by field id, each with the partition it
  belongs to), the expected schema and specs, and the rows of every ``__manifest`` version seen.
* after every commit, the change feed of that commit (``ns.changes(v - 1, v)``) must turn the
  rows the previous version read into the rows this one reads.
* its concurrent twin (:func:`test_model_concurrent`, ``--stress``): real processes running
  random operations on one namespace; the oracle is rebuilt afterwards from the operations that
  reported success, in the commit order ``ns.history()`` gives.

Published rows are read with plain pylance: ``__manifest`` rows give each partition table's
``location`` and ``read_version``; each table is read at that version and its columns placed by
field id (``lancepart.field_ids``), then compared partition by partition with the oracle.

Filters mean what DataFusion says they mean, so the oracle evaluates them with DataFusion on its
own rows. Merge keys compare like SQL equality: ``-0.0`` and ``0.0`` are the same key.

``LANCEPART_MODEL_KNOWN=1`` keeps away from defects known on main while they are being fixed
(:data:`KNOWN_DEFECTS`): merge and replace-where after a schema change, and ``-0.0`` values.
``LANCEPART_MODEL_SEED=N`` runs with a random seed instead of the derandomized default, and
``LANCEPART_MODEL_STATS=path`` appends one JSON line per failing step (example and step number)
to ``path``: how long the search took to find a failure.
"""

from __future__ import annotations

import datetime as dt
import itertools
import json
import math
import os
import re
import shutil
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import datafusion
import lance
import mmh3
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis import seed as hypothesis_seed
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from lancepart import PartitionedNamespace
from lancepart.errors import (
    AmbiguousMatchError,
    ConstraintViolationError,
    CorruptNamespaceError,
    DuplicateKeyError,
    InvalidArgumentError,
    InvalidSpecError,
    LancepartError,
    RowsOutsideFilterError,
    SchemaMismatchError,
)
from lancepart.evolution.schema_evolution import table_field_ids
from lancepart.storage.manifest import join_uri
from lancepart.util import faults

# --------------------------------------------------------------------------- known defects
#: Defects on main being fixed (issue 21), by name: what each breaks, and how the model keeps away
#: from it when it is masked. By default none is masked: the model exercises them all and fails on
#: main until they are fixed. ``LANCEPART_MODEL_KNOWN=1`` masks them all (a green run meanwhile),
#: or a comma-separated list of names masks those.
KNOWN = {
    # (a) merge and replace-where after any add/rename/widen raise a raw OSError "Append with
    # different schema": no merge or replace-where after such a change
    "merge_after_schema_change": "merge and replace-where after a schema change",
    # (b) -0.0 and 0.0 are two merge keys: no -0.0 anywhere
    "negative_zero": "-0.0 values",
    # a partition table created after a schema change has no field-id record: its added and
    # renamed columns read as NULL: no rows for new partitions after a change
    "new_table_after_change": "new partitions after a schema change",
    # a rollback to a version whose partition was dropped (or rolled back) and made again since keeps
    # the new table instead of the version's: no such rollback
    "rollback_recreated_partition": "rollback to a version whose partition was made again since",
    # after a rename or drop of a column with a declared index, overwrite and compaction (after a
    # drop, every write) raise a raw KeyError: indexed columns are not renamed or dropped
    "index_column_changed": "renaming or dropping an indexed column",
    # concurrent twin: (c) a schema change beside writes and deletes publishes a delete's deletions
    # before its own commit, and an append racing a schema change raises a raw OSError: no schema
    # change there
    "concurrent_schema_change": "schema changes in the concurrent twin",
    # concurrent twin: two compactions at once raise a raw OSError (CreateIndex preempted): one
    # compacting worker
    "concurrent_compaction": "concurrent compactions",
}
ALL_KNOWN = frozenset(KNOWN)
_KNOWN_ENV = os.environ.get("LANCEPART_MODEL_KNOWN", "")
KNOWN_DEFECTS: frozenset[str] = (ALL_KNOWN if _KNOWN_ENV == "1" else
                                 frozenset(x.strip() for x in _KNOWN_ENV.split(",") if x.strip()) & ALL_KNOWN)

NAMESPACE_WRITER_FLAGS_KEY = "lance.namespace.manifest.writer_feature_flags"
FIELD_ID = b"lance:field_id"

# --------------------------------------------------------------------------- the schema
ID, COUNTRY, F, V, TS, STATUS = 0, 1, 2, 3, 4, 5  # field ids of the starting schema


@dataclass
class Col:
    fid: int
    name: str
    type: pa.DataType
    nullable: bool = True

    def arrow(self) -> pa.Field:
        return pa.field(self.name, self.type, nullable=self.nullable)


BASE = [Col(ID, "id", pa.int64(), False), Col(COUNTRY, "Country", pa.utf8()), Col(F, "f", pa.float64()),
        Col(V, "v", pa.int64()), Col(TS, "ts", pa.timestamp("us")), Col(STATUS, "Status Code", pa.utf8())]

# partition fields by kind: (field_id, source field id, JSON); every spec keeps identity(country)
PFIELDS = {
    "country": ("country", COUNTRY, {"field_id": "country", "source_ids": [COUNTRY], "transform": {"type": "identity"},
                                     "result_type": {"type": "utf8"}}),
    "bucket": ("id_b2", ID, {"field_id": "id_b2", "source_ids": [ID], "transform": {"type": "bucket", "num_buckets": 2},
                             "result_type": {"type": "int32"}}),
    "day": ("ts_day", TS, {"field_id": "ts_day", "source_ids": [TS], "transform": {"type": "day"},
                           "result_type": {"type": "int32"}}),
}
SPEC_CHOICES = [("country",), ("country", "bucket"), ("country", "day"), ("country", "bucket", "day")]

COUNTRIES = ["US", "FR", "DE", None]
FLOATS = [0.0, -0.0, 1.5, -2.5, 3.25, None]
INTS = [None, 0, 1, 5, 9, -3]
TIMES = [dt.datetime(2025, 12, 1, 8), dt.datetime(2025, 12, 2, 9, 30), dt.datetime(2025, 11, 15), None]
# new and renamed columns include names a filter must quote (docs/reading.md "Filters and pruning"):
# mixed case, a space, a digit first, a reserved word, non-ASCII, a quote inside
NEW_NAMES = ["score", "region", "note", "Amount", "my col", "select", "tag"]
RENAME_NAMES = ["id2", "country", "Country Two", "2nd", "ünï", "it's", "f2", "v2", "ts2"]
RESERVED = {"select", "from", "where", "and", "or", "not", "order", "group", "table", "user", "null"}


def qn(name: str) -> str:
    """``name`` as a filter writes it: plain when DataFusion reads it as is, else double-quoted."""
    import re

    if re.fullmatch(r"[a-z_][a-z0-9_]*", name) and name not in RESERVED:
        return name
    return '"' + name.replace('"', '""') + '"'
# a nullable struct nested in a nullable struct (Lance once panicked on such sliced arrays)
NESTED = pa.struct([pa.field("a", pa.int32()), pa.field("b", pa.struct([pa.field("c", pa.utf8())]))])
ADD_TYPES = {"int32": pa.int32(), "float32": pa.float32(), "string": pa.utf8(), "nested struct": NESTED}
WIDER = {pa.int32(): pa.int64(), pa.float32(): pa.float64(), pa.utf8(): pa.large_utf8()}


def no_negative_zero(values: list) -> list:
    if "negative_zero" not in KNOWN_DEFECTS:
        return values
    return [x for x in values if not (isinstance(x, float) and x == 0 and math.copysign(1, x) < 0)]


def pool(col: Col) -> list:
    """The values a generated row may hold in ``col`` (small pools: keys repeat, partitions are shared)."""
    t = col.type
    if col.fid == COUNTRY:
        return COUNTRIES
    if col.fid == F:
        return no_negative_zero(FLOATS)
    if col.fid == TS:
        return TIMES
    if pa.types.is_integer(t):
        return INTS if col.fid == V else [None, -1, 0, 7]
    if pa.types.is_floating(t):
        return no_negative_zero([None, 0.5, -0.0, 2.0])
    if pa.types.is_struct(t):
        return [None, {"a": 1, "b": None}, {"a": None, "b": {"c": "x"}}, {"a": 2, "b": {"c": None}}]
    return [None, "a", "b", "it's"]


# --------------------------------------------------------------------------- canonical rows
def _enc(x: Any) -> tuple:
    """A sort key that tells every value apart, -0.0 from 0.0 included (compared exactly)."""
    if x is None:
        return (0,)
    if isinstance(x, float):
        return (1, x, math.copysign(1.0, x))
    if isinstance(x, dict):  # a struct: its fields in order, each told apart the same way
        return (2, tuple((k, _enc(v)) for k, v in x.items()))
    return (1, x)


def canon(rows: list[tuple]) -> list[tuple]:
    return sorted(rows, key=lambda r: tuple(_enc(x) for x in r))


def show(rows: list[tuple], limit: int = 8) -> str:
    def fmt(x: Any) -> str:
        return "-0.0" if isinstance(x, float) and x == 0 and math.copysign(1, x) < 0 else repr(x)
    out = ["(" + ", ".join(fmt(x) for x in r) + ")" for r in rows[:limit]]
    return "[" + ", ".join(out) + (", ..." if len(rows) > limit else "") + "]"


def multiset_diff(got: list[tuple], want: list[tuple]) -> str:
    g = Counter(tuple(_enc(x) for x in r) for r in got)
    w = Counter(tuple(_enc(x) for x in r) for r in want)
    back = {tuple(_enc(x) for x in r): r for r in [*got, *want]}
    extra = [back[k] for k, n in (g - w).items() for _ in range(n)]
    missing = [back[k] for k, n in (w - g).items() for _ in range(n)]
    return f"published but not in the oracle: {show(extra)}; in the oracle but not published: {show(missing)}"


def added_rows(old: list[dict], new: list[dict], fids: list[int]) -> list[dict]:
    """The rows of ``new`` that ``old`` does not have (as multisets over ``fids``): what an
    operation going from ``old`` to ``new`` publishes that was not published."""
    have = Counter(tuple(_enc(r.get(f)) for f in fids) for r in old)
    out = []
    for r in new:
        k = tuple(_enc(r.get(f)) for f in fids)
        if have[k]:
            have[k] -= 1
        else:
            out.append(r)
    return out


def nested_fields(t: pa.DataType) -> int:
    """How many field ids the fields nested in type ``t`` take."""
    if pa.types.is_struct(t):
        return sum(1 + nested_fields(t.field(i).type) for i in range(t.num_fields))
    return 0


def fids_of(schema: pa.Schema) -> list[int]:
    return [int(f.metadata[FIELD_ID]) for f in schema]


# --------------------------------------------------------------------------- the oracle
@dataclass
class State:
    """The published rows (``{field id: value, "_part": (spec id, partition values)}``) and the
    batch ids a rerun must skip."""

    rows: list[dict] = field(default_factory=list)
    batches: frozenset = frozenset()
    parts: frozenset = frozenset()  # (partition, table number): the partitions that have a table, empty too

    def keys(self) -> set:
        return {k for k, _ in self.parts}

    def with_rows(self, rows: list[dict], batch: str | None = None) -> State:
        """Rows ``rows`` (new ones' partitions get a table), the batch id published with them."""
        return State(rows, self.batches | {batch} if batch else self.batches,
                     self.parts | {(k, next(_TABLES)) for k in {r["_part"] for r in rows} - self.keys()})

    def render(self, fids: list[int]) -> list[tuple]:
        return canon([tuple(r.get(f) for f in fids) for r in self.rows])


@dataclass
class Rec:
    """A ``__manifest`` version seen published: the state it holds and what reading it gave."""

    state: State
    fids: list[int]
    view: list[tuple]


def bucket(x: int | None, n: int) -> int | None:
    if x is None:
        return None
    return abs(mmh3.hash(int(x).to_bytes(8, "little", signed=True), 0, signed=True)) % n


def datafusion_mask(table: pa.Table, filter: str) -> list[bool]:
    """Which rows of ``table`` ``filter`` is TRUE on, as DataFusion evaluates it."""
    idx = "__model_row"
    t = table.append_column(idx, pa.array(range(table.num_rows), pa.int64()))
    ctx = datafusion.SessionContext()
    ctx.register_record_batches("t", [t.to_batches()] if t.num_rows else [[pa.RecordBatch.from_pylist([], t.schema)]])
    hit = set(ctx.sql(f"SELECT {idx} FROM t WHERE {filter}").to_arrow_table().column(idx).to_pylist())
    return [i in hit for i in range(table.num_rows)]


def read_published(root: str, schema: pa.Schema) -> dict[tuple, list[tuple]]:
    """With plain pylance: ``{(spec id, partition values): rows}`` of every partition table the
    latest ``__manifest`` publishes, each read at its ``read_version``, columns placed by field id
    (``lancepart.field_ids``, docs/schema-evolution.md) as the columns of ``schema``."""
    mds = lance.dataset(join_uri(root, "__manifest"))
    md = mds.metadata
    fids = fids_of(schema)
    specs = {int(k[len("partition_spec_v"):]): json.loads(v) for k, v in md.items() if k.startswith("partition_spec_v")}
    got: dict[tuple, list[tuple]] = {}
    seen: dict[tuple, str] = {}
    for r in mds.to_table().to_pylist():
        head = r["object_id"].split("$")[0]
        if r["object_type"] != "table" or not (head[:1] == "v" and head[1:].isdigit()):
            continue  # a root-level table of another tool, not a partition
        sid = int(head[1:])
        if r["read_version"] is None or r.get("read_branch") or r.get("read_tag"):
            raise ModelFailure(f"partition table {r['object_id']} is not pinned to a read_version: {r}")
        key = (sid, tuple(r[f"partition_field_{f['field_id']}"] for f in specs[sid]["fields"]))
        if key in seen:
            raise ModelFailure(f"two partition tables for partition {key}: {seen[key]} and {r['object_id']}")
        seen[key] = r["object_id"]
        ds = lance.dataset(join_uri(root, r["location"]), version=r["read_version"])
        t = ds.to_table()
        by_id = {fid: n for n, fid in table_field_ids(ds.schema, md, schema).items()}
        cols = [t.column(by_id[f]).to_pylist() if f in by_id else [None] * t.num_rows for f in fids]
        got[key] = list(zip(*cols, strict=True)) if cols else []
    return got


_TABLES = itertools.count(1)


class ModelFailure(AssertionError):
    pass


_STATS: dict[str, Any] = {"examples": 0, "ops": Counter()}


# --------------------------------------------------------------------------- the machine
class NamespaceModel(RuleBasedStateMachine):
    """One namespace, one oracle; every rule is a public operation of PartitionedNamespace."""

    def __init__(self) -> None:
        super().__init__()
        _STATS["examples"] += 1
        self.example = _STATS["examples"]
        self.steps = 0
        self.full_check = 0
        self.dir = tempfile.mkdtemp(prefix="lancepart-model-")
        self.root = os.path.join(self.dir, "ns")
        self.cols = [Col(c.fid, c.name, c.type, c.nullable) for c in BASE]
        self.max_fid = STATUS
        self.specs: dict[int, tuple[str, ...]] = {1: ("country",)}
        self.schema_changed = False
        self.renamed = False  # a column was renamed (search must read it by field id)
        self.next_id = 100
        self.batch_seq = 0
        self.used_batches: list[str] = []
        self.foreign_seq = 0
        self.state = State()
        self.recorded: dict[int, Rec] = {}
        self.unreadable: set[int] = set()  # stripped versions: not lancepart snapshots
        # declared indexes verify may find missing (docs/indexes.md): after a build that died between
        # its two commits, and after a rollback (the older table versions lack them), until rebuilt
        self.index_gaps: set[str] = set()
        # the CHECK constraints declared (docs/constraints.md): name -> (expression, the field ids it names)
        self.constraints: dict[str, tuple[str, frozenset[int]]] = {}
        self.ns = PartitionedNamespace.create(self.root, self.schema(), {"id": 1, "fields": [PFIELDS["country"][2]]})
        for v in range(1, self.latest() + 1):
            try:
                self.check_version(v, (self.state,), must=self.state)
            except InvalidArgumentError:  # versions made while the namespace was being created
                continue

    def teardown(self) -> None:
        try:
            if not getattr(self, "_failed", False):
                self.check_recorded_versions()
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)

    # ------------------------------------------------------------------ helpers
    def fail(self, msg: str) -> None:
        self._failed = True
        path = os.environ.get("LANCEPART_MODEL_STATS")
        if path:
            with open(path, "a") as f:
                f.write(json.dumps({"example": self.example, "step": self.steps, "message": msg[:3000]}) + "\n")
        raise ModelFailure(msg)

    def schema(self) -> pa.Schema:
        return pa.schema([pa.field(c.name, c.type, nullable=c.nullable, metadata={FIELD_ID: str(c.fid).encode()})
                          for c in self.cols])

    def plain_schema(self) -> pa.Schema:
        return pa.schema([c.arrow() for c in self.cols])

    def col(self, fid: int) -> Col | None:
        return next((c for c in self.cols if c.fid == fid), None)

    def name(self, fid: int) -> str | None:
        c = self.col(fid)
        return c.name if c else None

    def fids(self) -> list[int]:
        return [c.fid for c in self.cols]

    def latest(self) -> int:
        return lance.dataset(join_uri(self.root, "__manifest")).version

    def current_spec(self) -> int:
        return max(self.specs)

    def part(self, row: dict) -> tuple:
        sid = self.current_spec()
        values = []
        for kind in self.specs[sid]:
            _, src, _ = PFIELDS[kind]
            # a dropped source reads as NULL (spec "Column removal resistant"), though the oracle's
            # rows written before the drop still hold its old value
            x = row.get(src) if self.col(src) is not None else None
            values.append(x if kind == "country" else bucket(x, 2) if kind == "bucket" else (x.day if x else None))
        return (sid, tuple(values))

    def table(self, rows: list[dict]) -> pa.Table:
        """Rows as the current namespace schema (an input, or the oracle's rows for a filter)."""
        return pa.table({c.name: pa.array([r.get(c.fid) for r in rows], c.type) for c in self.cols},
                        schema=self.plain_schema())

    def matches(self, rows: list[dict], filter: str) -> list[bool]:
        return datafusion_mask(self.table(rows), filter)

    def draw_rows(self, data, lo: int = 1, hi: int = 6, ids: str = "mixed") -> list[dict]:
        """Input rows in the current schema: fresh ids, or ids already published (``ids``)."""
        n = data.draw(st.integers(lo, hi), label="rows")
        published = sorted({r[ID] for r in self.state.rows if r.get(ID) is not None})
        out = []
        for _ in range(n):
            row = {}
            for c in self.cols:
                if c.fid == ID:
                    reuse = ids == "existing" or (ids == "mixed" and published and data.draw(st.booleans()))
                    if reuse and published:
                        row[ID] = data.draw(st.sampled_from(published))
                    else:
                        row[ID] = self.next_id
                        self.next_id += 1
                else:
                    row[c.fid] = data.draw(st.sampled_from(pool(c)))
            out.append(row)
        return out

    def existing_partitions_only(self, rows: list[dict]) -> list[dict]:
        """With the new-table defect masked: after a schema change, no rows for partitions that have
        no table yet (a table created then has no field-id record and reads its new columns as NULL)."""
        if "new_table_after_change" not in KNOWN_DEFECTS or not self.schema_changed:
            return rows
        return [r for r in rows if self.part(r) in self.state.keys()]

    def draw_filter(self, data, depth: int = 0) -> str:
        choices = []
        for c in self.cols:
            n, t = qn(c.name), c.type
            if c.fid == ID:
                choices += [f"{n} % 3 = 0", f"{n} < 103", f"{n} >= 105"]
            elif c.fid == COUNTRY:
                choices += [f"{n} = 'US'", f"{n} IN ('FR', 'DE')", f"{n} IS NULL", f"{n} <> 'US'"]
            elif c.fid == F:
                choices += [f"{n} < 0.5", f"{n} = 0.0", f"{n} = -0.0", f"{n} IS NULL", f"{n} > 1.0"]
            elif c.fid == TS:
                choices += [f"{n} < TIMESTAMP '2025-12-02 00:00:00'", f"{n} IS NULL"]
            elif c.fid == V:
                choices += [f"{n} > 1", f"{n} IS NULL", f"{n} = 5"]
            elif pa.types.is_integer(t):
                choices += [f"{n} > 0", f"{n} IS NOT NULL"]
            elif pa.types.is_floating(t):
                choices += [f"{n} < 1.0", f"{n} IS NULL"]
            elif pa.types.is_struct(t):
                choices += [f"{n} IS NULL", f"{n} IS NOT NULL"]
            else:
                choices += [f"{n} = 'a'", f"{n} IS NOT NULL", f"{n} IN ('b', 'it''s')", f"{n} LIKE 'i%'"]
        choices.append("TRUE")
        f = data.draw(st.sampled_from(choices), label="filter")
        if depth == 0 and data.draw(st.integers(0, 3), label="combine") == 0:
            op = data.draw(st.sampled_from(["AND", "OR"]))
            f = f"({f}) {op} ({self.draw_filter(data, 1)})"
        return f

    def draw_batch(self, data) -> str | None:
        kind = data.draw(st.sampled_from(["none", "new", "rerun"] if self.used_batches else ["none", "new"]),
                         label="batch")
        if kind == "none":
            return None
        if kind == "rerun":
            return data.draw(st.sampled_from(self.used_batches))
        self.batch_seq += 1
        b = f"batch-{self.batch_seq}"
        self.used_batches.append(b)
        return b

    # ------------------------------------------------------------------ running one operation
    def run(self, what: str, call, new_state: State | None, expect: tuple = (), may: tuple = (),
            fault: bool = False, skipped: bool = False) -> Any:
        """Run ``call``; ``new_state`` is the oracle after it (None: unchanged). ``expect``: typed
        errors the oracle says it must raise (one of them); ``may``: typed errors it may raise.
        A ``fault`` run sets ``before_manifest_commit:raise`` around the call."""
        self.steps += 1
        _STATS["ops"][what.split(" ")[0].split("(")[0] + (" (fault)" if fault else "")] += 1
        if self.constraints and new_state is not None and not skipped:
            broken = self.broken(added_rows(self.state.rows, new_state.rows, self.fids()))
            if broken:  # the rows it would publish break a constraint: refused, nothing published
                _STATS["ops"][f"refused by constraint {broken}"] += 1
                new_state = None
                if expect or fault:
                    may = (*may, ConstraintViolationError)
                else:
                    expect = (ConstraintViolationError,)
        if os.environ.get("LANCEPART_MODEL_TRACE"):
            print(f"[{self.example}.{self.steps}] v{self.latest()} {what}{' (fault)' if fault else ''} "
                  f"batches={sorted(self.state.batches)}")
        old = self.state
        before = self.latest()
        if fault:
            faults.reset()
            os.environ[faults.ENV] = "before_manifest_commit:raise"
        try:
            result = call()
        except Exception as e:
            after = self.latest()
            if fault and isinstance(e, faults.InjectedFault):
                pass
            elif isinstance(e, LancepartError) and isinstance(e, expect + may):
                if after != before:
                    self.fail(f"{what}: raised {type(e).__name__} ({e}) but __manifest moved from version {before} "
                              f"to {after}: a refused operation must publish nothing")
            else:
                why = ("an untyped error" if not isinstance(e, LancepartError)
                       else "a typed error the oracle did not expect")
                self.fail(f"{what}: {why}: {type(e).__name__}: {e}")
            # nothing published: every version it made reads as before
            for v in range(before + 1, after + 1):
                self.check_version(v, (old,), must=old if v == after else None, what=f"{what} (failed)")
            return None
        finally:
            if fault:
                os.environ.pop(faults.ENV, None)
                faults.reset()
        if expect:
            self.fail(f"{what}: the oracle expected {'/'.join(e.__name__ for e in expect)}, it succeeded: {result!r}")
        new = new_state if new_state is not None else old
        after = self.latest()
        if skipped:
            if not getattr(result, "skipped", False):
                self.fail(f"{what}: a rerun of a published batch id must be skipped, got {result!r}")
            if after != before:
                self.fail(f"{what}: a skipped rerun moved __manifest from version {before} to {after}")
        if after == before and new is not old and new.render(self.fids()) != old.render(self.fids()):
            self.fail(f"{what}: published nothing ({result!r}), the oracle expected a change: "
                      f"{multiset_diff(old.render(self.fids()), new.render(self.fids()))}")
        for v in range(before + 1, after + 1):
            self.check_version(v, (old, new), must=new if v == after else None, what=what)
        self.state = new
        return result

    def check_version(self, v: int, states: tuple, must: State | None = None, what: str = "create") -> None:
        """Read ``__manifest`` version ``v`` (time travel) and record which state it holds: ``must``
        if given, else one of ``states`` (no version may show half an operation)."""
        try:
            h = PartitionedNamespace.open(self.root, version=v)
        except CorruptNamespaceError:
            if v in self.unreadable:
                return
            raise
        fids = fids_of(h.schema)
        t = h.to_table()
        if h.to_table(columns=[]).num_rows != t.num_rows:  # an empty projection keeps the row count
            self.fail(f"{what}: __manifest version {v}: to_table(columns=[]) gives "
                      f"{h.to_table(columns=[]).num_rows} rows, to_table() {t.num_rows}")
        got = canon([tuple(r) for r in zip(*[t.column(i).to_pylist() for i in range(t.num_columns)], strict=True)]) \
            if t.num_columns else []
        if must is not None:
            want = must.render(fids)
            if got != want:
                self.fail(f"{what}: __manifest version {v} reads other rows than the oracle: "
                          f"{multiset_diff(got, want)}")
            self.recorded[v] = Rec(must, fids, got)
            self.check_change_feed(v, h, what)
            return
        for s in states:
            if s.render(fids) == got:
                self.recorded[v] = Rec(s, fids, got)
                self.check_change_feed(v, h, what)
                return
        self.fail(f"{what}: intermediate __manifest version {v} shows neither the state before nor after it: "
                  f"{multiset_diff(got, states[-1].render(fids))}")

    def check_change_feed(self, v: int, h: PartitionedNamespace, what: str = "") -> None:
        """The change feed of commit ``v`` (``h.changes(v - 1, v)``) turns what version ``v - 1``
        read into what ``v`` reads: every row it deletes was published at ``v - 1``. A commit that
        changed the schema changes no row (the views of both versions are compared in their own
        columns, so only when the columns are the same). A rollback reports no row both deleted
        and inserted: a row it publishes again as it was (one a compaction rewrote) is no change."""
        prev = self.recorded.get(v - 1)
        if prev is None:
            return
        feed = h.changes(v - 1, v).read_all()
        kinds = feed.column("_change_type").to_pylist()
        data = feed.drop_columns(["_change_type", "_commit_version", "_commit_timestamp"])
        rows = [tuple(r) for r in zip(*[data.column(i).to_pylist() for i in range(data.num_columns)], strict=True)] \
            if data.num_columns else []
        if prev.fids != self.recorded[v].fids:
            if feed.num_rows:
                self.fail(f"change feed of version {v}: a schema change changed no row, the feed has {feed.num_rows}")
            return
        key = lambda r: tuple(_enc(x) for x in r)  # noqa: E731
        state = Counter(key(r) for r in prev.view)
        deleted = Counter(key(r) for r, k in zip(rows, kinds, strict=True) if k in ("delete", "update_preimage"))
        inserted = Counter(key(r) for r, k in zip(rows, kinds, strict=True) if k in ("insert", "update_postimage"))
        if deleted - state:
            self.fail(f"change feed of version {v}: deletes rows version {v - 1} did not publish: "
                      f"{show(list(deleted - state))}")
        if what.startswith("rollback") and deleted & inserted:
            self.fail(f"change feed of version {v} ({what}): rows both deleted and inserted, republished unchanged: "
                      f"{show(list(deleted & inserted))}")
        if state - deleted + inserted != Counter(key(r) for r in self.recorded[v].view):
            back = {key(r): r for r in [*rows, *self.recorded[v].view, *prev.view]}
            got = [back[k] for k, n in (state - deleted + inserted).items() for _ in range(n)]
            self.fail(f"change feed of version {v}: version {v - 1} with its deletes and inserts is not version {v}: "
                      f"{multiset_diff(got, self.recorded[v].view)}")

    def check_recorded_versions(self) -> None:
        retained = {int(x["version"]) for x in lance.dataset(join_uri(self.root, "__manifest")).versions()}
        for v in sorted(self.recorded):
            if v not in retained:
                del self.recorded[v]
                continue
            rec = self.recorded[v]
            t = PartitionedNamespace.open(self.root, version=v).to_table()
            got = canon([tuple(r) for r in zip(*[t.column(i).to_pylist() for i in range(t.num_columns)], strict=True)])
            if got != rec.view:
                self.fail(f"__manifest version {v} no longer reads what it read when it was published: "
                          f"{multiset_diff(got, rec.view)}")

    # ------------------------------------------------------------------ writes
    def new_rows(self, rows: list[dict]) -> list[dict]:
        return [{**r, "_part": self.part(r)} for r in rows]

    def do_write(self, data, mode: str, fault: bool = False) -> None:
        rows = self.existing_partitions_only(self.draw_rows(data))
        if not rows:
            return
        batch = self.draw_batch(data)
        bad = data.draw(st.integers(0, 9), label="bad input") == 0
        table = self.table(rows)
        if bad:  # a column of the wrong type: SchemaMismatchError before anything is written
            i = data.draw(st.integers(0, len(self.cols) - 1))
            table = table.set_column(i, self.cols[i].name, pa.array(["x"] * len(rows)))
            if self.cols[i].type in (pa.utf8(), pa.large_utf8()):
                table = table.set_column(i, self.cols[i].name, pa.array([1] * len(rows), pa.int64()))
            self.run(f"write({mode}) of a mistyped column {self.cols[i].name}",
                     lambda: self.ns.write(table, mode=mode, batch_id=batch), None, expect=(SchemaMismatchError,),
                     fault=fault)
            return
        if batch is not None and batch in self.state.batches:
            self.run(f"write({mode}, rerun of {batch})", lambda: self.ns.write(table, mode=mode, batch_id=batch),
                     None, skipped=True, fault=fault)
            return
        new = self.new_rows(rows)
        kept = self.state.rows
        if mode == "overwrite":
            touched = {r["_part"] for r in new}
            kept = [r for r in kept if r["_part"] not in touched]
        self.run(f"write({mode}, batch_id={batch!r}, {len(rows)} rows)",
                 lambda: self.ns.write(table, mode=mode, batch_id=batch), self.state.with_rows(kept + new, batch),
                 fault=fault)

    @rule(data=st.data())
    def append(self, data) -> None:
        self.do_write(data, "append")

    @rule(data=st.data())
    def overwrite(self, data) -> None:
        self.do_write(data, "overwrite")

    def schema_guard(self) -> bool:
        return not ("merge_after_schema_change" in KNOWN_DEFECTS and self.schema_changed)

    def do_replace_where(self, data, fault: bool = False) -> None:
        filter = self.draw_filter(data)
        rows = self.existing_partitions_only(self.draw_rows(data, lo=0, hi=5))
        inside = self.matches(rows, filter) if rows else []
        if data.draw(st.integers(0, 4), label="outside rows") != 0:
            rows = [r for r, ok in zip(rows, inside, strict=True) if ok]
            inside = [True] * len(rows)
        table = self.table(rows)
        call = lambda: self.ns.write(table, mode="overwrite", where=filter)  # noqa: E731
        what = f"replace-where {filter!r} with {len(rows)} rows"
        if not all(inside):
            self.run(what, call, None, expect=(RowsOutsideFilterError,), fault=fault)
            return
        mask = self.matches(self.state.rows, filter)
        kept = [r for r, hit in zip(self.state.rows, mask, strict=True) if not hit]
        self.run(what, call, self.state.with_rows(kept + self.new_rows(rows)), fault=fault)

    @precondition(lambda self: self.schema_guard())
    @rule(data=st.data())
    def replace_where(self, data) -> None:
        self.do_replace_where(data)

    # ------------------------------------------------------------------ merge
    def merge_oracle(self, rows: list[dict], key: list[int], when_matched: str, when_not_matched: str
                     ) -> tuple[State | None, tuple]:
        def k(r: dict) -> tuple | None:
            vals = tuple(r.get(f) for f in key)
            if any(x is None for x in vals):
                return None
            return tuple(0.0 if isinstance(x, float) and x == 0 else x for x in vals)  # SQL equality

        errors: list = []
        keys = [k(r) for r in rows]
        if any(x is None for x in keys):
            errors.append(InvalidArgumentError)
        if len({x for x in keys if x is not None}) < len([x for x in keys if x is not None]):
            errors.append(DuplicateKeyError)
        published: dict[tuple, list[int]] = {}
        for i, r in enumerate(self.state.rows):
            pk = k(r)
            if pk is not None:
                published.setdefault(pk, []).append(i)
        if any(len(published.get(x, [])) > 1 for x in keys if x is not None):
            errors.append(AmbiguousMatchError)
        if errors:
            return None, tuple(errors)
        gone: set[int] = set()
        out: list[dict] = []
        for r, x in zip(rows, keys, strict=True):
            hit = published.get(x, [])
            if hit and when_matched == "update":
                gone.update(hit)
                out.append(r)
            elif not hit and when_not_matched == "insert":
                out.append(r)
        kept = [r for i, r in enumerate(self.state.rows) if i not in gone]
        return self.state.with_rows(kept + self.new_rows(out)), ()

    def do_merge(self, data, keys: str = "id", fault: bool = False) -> None:
        key = {"id": [ID], "f": [F], "id,f": [ID, F]}[keys]
        if any(self.col(f) is None for f in key):
            return
        if keys == "id":
            rows = self.draw_rows(data, hi=5)
        else:  # keys of published rows, a zero key sometimes with the other sign, and new ones
            rows = self.draw_rows(data, hi=4)
            published = [r for r in self.state.rows if all(r.get(f) is not None for f in key)]
            for r in rows:
                if published and data.draw(st.booleans(), label="existing key"):
                    src = data.draw(st.sampled_from(published))
                    for f in key:
                        r[f] = src[f]
                    if (r[F] == 0 and "negative_zero" not in KNOWN_DEFECTS
                            and data.draw(st.booleans(), label="flip zero")):
                        r[F] = -r[F] if math.copysign(1, r[F]) > 0 else 0.0
        rows = self.existing_partitions_only(rows)
        if not rows:
            return
        when_matched = data.draw(st.sampled_from(["update", "update", "ignore"]), label="when_matched")
        when_not_matched = data.draw(st.sampled_from(["insert", "insert", "ignore"]), label="when_not_matched")
        batch = self.draw_batch(data)
        on = [self.name(f) for f in key]
        table = self.table(rows)
        call = lambda: self.ns.merge(table, on=on, when_matched=when_matched,  # noqa: E731
                                     when_not_matched=when_not_matched, batch_id=batch)
        shown = show([tuple(r.get(f) for f in self.fids()) for r in rows])
        what = f"merge on {on} ({when_matched}/{when_not_matched}, batch_id={batch!r}) of {shown}"
        new, errors = self.merge_oracle(rows, key, when_matched, when_not_matched)
        invalid = tuple(e for e in errors if e is not AmbiguousMatchError)  # the input alone says so
        if invalid:
            self.run(what, call, None, expect=errors, fault=fault)
            return
        if batch is not None and batch in self.state.batches:  # a rerun is skipped before it is evaluated
            self.run(what + " (rerun)", call, None, skipped=True, fault=fault)
            return
        if errors:
            self.run(what, call, None, expect=errors, fault=fault)
            return
        if batch is not None and new.rows != self.state.rows:
            new = new.with_rows(new.rows, batch)
        self.run(what, call, new, fault=fault)

    @precondition(lambda self: self.schema_guard())
    @rule(data=st.data())
    def merge_by_id(self, data) -> None:
        self.do_merge(data, "id")

    @precondition(lambda self: self.schema_guard())
    @rule(data=st.data(), keys=st.sampled_from(["f", "id,f"]))
    def merge_by_float(self, data, keys) -> None:
        self.do_merge(data, keys)

    # ------------------------------------------------------------------ update
    def do_update(self, data, fault: bool = False) -> None:
        """``ns.update`` of ``f`` (an expression over its old value) or ``Country`` (a partition
        source in every spec: the rows move), the oracle computing the same in Python."""
        choices = []
        if self.col(F) is not None:
            f = qn(self.name(F))
            choices += [(F, f"{f} * 2", lambda x: None if x is None else x * 2),
                        (F, f"coalesce({f}, 1.5)", lambda x: 1.5 if x is None else x)]
        if self.col(COUNTRY) is not None:
            c = qn(self.name(COUNTRY))
            choices += [(COUNTRY, "'FR'", lambda x: "FR"),
                        (COUNTRY, f"CASE WHEN {c} = 'US' THEN 'DE' ELSE {c} END", lambda x: "DE" if x == "US" else x)]
        if not choices:
            return
        fid, expr, py = data.draw(st.sampled_from(choices), label="set")
        filter = None if data.draw(st.integers(0, 3), label="every row") == 0 else self.draw_filter(data)
        batch = self.draw_batch(data)
        mask = self.matches(self.state.rows, filter or "TRUE")
        updated = [{**r, fid: py(r.get(fid))} for r, hit in zip(self.state.rows, mask, strict=True) if hit]
        updated = [{**r, "_part": self.part(r)} for r in updated]
        if len(self.existing_partitions_only(updated)) < len(updated):
            return  # a row would move to a partition the masked new-table defect forbids
        call = lambda: self.ns.update({self.name(fid): expr}, filter, batch_id=batch)  # noqa: E731
        what = f"update set {self.name(fid)} = {expr} where {filter!r} (batch_id={batch!r})"
        if batch is not None and batch in self.state.batches:
            self.run(what + " (rerun)", call, None, skipped=True, fault=fault)
            return
        kept = [r for r, hit in zip(self.state.rows, mask, strict=True) if not hit]
        new = self.state.with_rows(kept + updated, batch if updated else None)
        self.run(what, call, new if updated else None, fault=fault)

    @precondition(lambda self: self.schema_guard())
    @rule(data=st.data())
    def update(self, data) -> None:
        self.do_update(data)

    # ------------------------------------------------------------------ delete, drop
    def do_delete(self, data, fault: bool = False) -> None:
        filter = self.draw_filter(data)
        mask = self.matches(self.state.rows, filter)
        kept = [r for r, hit in zip(self.state.rows, mask, strict=True) if not hit]
        self.run(f"delete {filter!r}", lambda: self.ns.delete(filter), self.state.with_rows(kept), fault=fault)

    @rule(data=st.data())
    def delete(self, data) -> None:
        self.do_delete(data)

    @precondition(lambda self: self.col(COUNTRY) is not None)
    @rule(data=st.data())
    def drop_partitions(self, data) -> None:
        n, q = self.name(COUNTRY), qn(self.name(COUNTRY))
        filter = data.draw(st.sampled_from([f"{q} = 'US'", f"{q} IN ('FR', 'DE')", f"{q} IS NULL", f"{q} <> 'FR'"]))
        # identity(country) is a field of every spec: a partition goes when its value matches
        parts = sorted(self.state.keys(), key=repr)
        values = pa.table({n: pa.array([p[1][0] for p in parts], pa.utf8())})
        gone = {p for p, hit in zip(parts, datafusion_mask(values, filter), strict=True) if hit}
        kept = [r for r in self.state.rows if r["_part"] not in gone]
        self.run(f"drop_partitions {filter!r}", lambda: self.ns.drop_partitions(filter),
                 State(kept, self.state.batches, frozenset(p for p in self.state.parts if p[0] not in gone)))

    # ------------------------------------------------------------------ schema and spec
    @rule(data=st.data())
    def update_schema(self, data) -> None:
        names = {c.name for c in self.cols}
        add, rename, drop, widen = [], {}, [], {}
        used: set[int] = set()
        from lancepart.index import declared_indexes

        indexed = {d.column for d in declared_indexes(self.ns.refresh())}
        if "index_column_changed" in KNOWN_DEFECTS:  # (new) writes then fail with a raw KeyError
            used |= {c.fid for c in self.cols if c.name in indexed}
        kinds = data.draw(st.lists(st.sampled_from(["add", "rename", "drop", "widen"]), min_size=1, max_size=2,
                                   unique=True), label="changes")
        final_names = set(names)
        for kind in kinds:
            if kind == "rename":
                free_names = [n for n in [*NEW_NAMES, *RENAME_NAMES] if n not in final_names]
                if not free_names:
                    continue
                free = [c for c in self.cols if c.fid not in used]
                if not free:
                    continue
                c = data.draw(st.sampled_from(free))
                new = data.draw(st.sampled_from(free_names))
                rename[c.name] = new
                used.add(c.fid)
                final_names = (final_names - {c.name}) | {new}
            elif kind == "drop":
                free = [c for c in self.cols if c.fid != ID and c.fid not in used]
                if len(self.cols) - len(drop) <= 2 or not free:
                    continue
                c = data.draw(st.sampled_from(free))
                drop.append(c.name)
                used.add(c.fid)
                final_names -= {c.name}
            elif kind == "widen":
                free = [c for c in self.cols if c.type in WIDER and c.fid not in used and c.fid != COUNTRY]
                if not free:
                    continue
                c = data.draw(st.sampled_from(free))
                widen[c.name] = WIDER[c.type]
                used.add(c.fid)
        if "add" in kinds and any(n not in final_names for n in NEW_NAMES):
            new = data.draw(st.sampled_from([n for n in NEW_NAMES if n not in final_names]))
            t = data.draw(st.sampled_from(sorted(ADD_TYPES)))
            add.append(pa.field(new, ADD_TYPES[t]))
        made = [f.name for f in add] + list(rename.values())
        _STATS["ops"]["names made that need quotes"] += sum(qn(n) != n for n in made)
        _STATS["ops"]["nested structs added"] += sum(pa.types.is_struct(f.type) for f in add)
        if not (add or rename or drop or widen):
            return
        # the oracle: new columns NULL, renames keep values, drops go, widenings cast
        cols = []
        for c in self.cols:
            if c.name in drop:
                continue
            cols.append(Col(c.fid, rename.get(c.name, c.name), widen.get(c.name, c.type), c.nullable))
        top = self.max_fid
        for f in add:
            top += 1
            cols.append(Col(top, f.name, f.type))
            top += nested_fields(f.type)  # a struct's fields take the ids after its own, depth first

        def call():
            return self.ns.update_schema(add=add or None, rename=rename or None, drop=drop or None,
                                         widen=widen or None)

        named = {f for _, fids in self.constraints.values() for f in fids}
        if any(c.fid in named and (c.name in drop or c.name in rename) for c in self.cols):
            # a constraint names columns by name: refused until it is dropped (docs/constraints.md)
            self.run(f"update_schema(rename={rename}, drop={drop}) of a constraint's column", call, None,
                     expect=(InvalidArgumentError,))
            return
        if set(drop) & indexed:  # dropping a column with a declared index is refused: drop the index first
            self.run(f"update_schema(drop={drop}) of an indexed column", call, None, expect=(InvalidArgumentError,))
            return
        result = self.run(f"update_schema(add={[(f.name, str(f.type)) for f in add]}, rename={rename}, drop={drop}, "
                          f"widen={ {k: str(v) for k, v in widen.items()} })", call, None)
        self.cols, self.max_fid = cols, top
        self.schema_changed |= bool(add or rename or widen)  # (a) does not follow a drop
        self.renamed |= bool(rename) and result is not None
        got = [(f.name, f.type, int(f.metadata[FIELD_ID])) for f in self.ns.schema]
        want = [(c.name, c.type, c.fid) for c in self.cols]
        if got != want:
            self.fail(f"update_schema: the namespace schema is {got}, the oracle's {want} ({result!r})")

    @rule(data=st.data())
    def bad_schema_change(self, data) -> None:
        """Changes the rules refuse, each with its typed error; nothing is committed."""
        options = [("add an existing name", dict(add=[pa.field(self.cols[0].name, pa.int32())]), InvalidArgumentError),
                   ("add a non-nullable column", dict(add=[pa.field("nn", pa.int32(), nullable=False)]),
                    SchemaMismatchError),
                   ("drop an unknown column", dict(drop=["no_such_column"]), InvalidArgumentError),
                   ("rename onto another column", dict(rename={self.cols[0].name: self.cols[1].name}),
                    InvalidArgumentError)]
        if self.col(COUNTRY) is not None:
            options.append(("widen an identity partition source", dict(widen={self.name(COUNTRY): pa.large_utf8()}),
                            SchemaMismatchError))
        what, kwargs, error = data.draw(st.sampled_from(options))
        self.run(f"update_schema: {what}", lambda: self.ns.update_schema(**kwargs), None, expect=(error,))

    @rule(choice=st.sampled_from(SPEC_CHOICES))
    def evolve(self, choice) -> None:
        current = self.specs[self.current_spec()]
        fields = [PFIELDS[k][2] for k in choice]
        sources_gone = any(self.col(PFIELDS[k][1]) is None for k in choice)
        # a field on a dropped column: refused, or accepted (it reads NULL): both are typed behaviour
        result = self.run(f"evolve to {choice}", lambda: self.ns.evolve(fields), None,
                          may=(InvalidSpecError, SchemaMismatchError, InvalidArgumentError) if sources_gone else ())
        if result is None:
            return
        want = self.current_spec() if tuple(choice) == current else self.current_spec() + 1
        if result.spec.id != want:
            self.fail(f"evolve to {choice}: spec id {result.spec.id}, the oracle expected {want}")
        self.specs[result.spec.id] = tuple(choice)

    # ------------------------------------------------------------------ maintenance
    def do_compact(self, data, fault: bool = False) -> None:
        filter = None
        if self.col(COUNTRY) is not None and data.draw(st.booleans(), label="compact filter"):
            filter = f"{qn(self.name(COUNTRY))} = 'US'"
        result = self.run(f"compact({filter!r})", lambda: self.ns.compact(filter, min_small_fragments=2), None,
                          fault=fault)
        if result is not None and result.failures:
            self.fail(f"compact: tables left out: {result.failures}")
        if result is not None and filter is None:  # its index maintenance builds every missing index
            self.index_gaps.clear()
        if result is not None:
            self.check_grown_tables_compressed(None if filter is None else "US")

    def check_grown_tables_compressed(self, country: str | None) -> None:
        """After a compaction, no published table it selected (all, or those of ``country``) that
        holds MODEL_SMALL_TABLE_ROWS live rows or more keeps the ``compression=none`` lancepart gave
        it when it was created small (the namespace schema never names one here): compaction
        re-encoded it, whatever came before."""
        from lancepart.evolution.file_format import COMPRESSION_KEY, table_data_storage_version

        for r in lance.dataset(join_uri(self.root, "__manifest")).to_table().to_pylist():
            if r["object_type"] != "table" or r["read_version"] is None:
                continue
            if country is not None and r.get("partition_field_country") != country:
                continue
            ds = lance.dataset(join_uri(self.root, r["location"]), version=r["read_version"])
            if ds.count_rows() < MODEL_SMALL_TABLE_ROWS or table_data_storage_version(ds) in (None, "2.0"):
                continue
            left = [f.name for f in ds.schema if (f.metadata or {}).get(COMPRESSION_KEY.encode()) == b"none"]
            if left:
                self.fail(f"compact: table {r['object_id']} ({ds.count_rows()} rows, version {ds.version}) still "
                          f"stores {left} uncompressed")

    @rule(data=st.data())
    def compact(self, data) -> None:
        self.do_compact(data)

    @rule()
    def cleanup(self) -> None:
        stats = self.run("cleanup(0, allow_short_retention)",
                         lambda: self.ns.cleanup(older_than=timedelta(0), allow_short_retention=True), None)
        if stats is not None and (stats.skipped or stats.errors):
            self.fail(f"cleanup skipped {stats.skipped}: {stats.errors}")
        self.check_recorded_versions()

    def rollback_targets(self) -> list[int]:
        return sorted(self.recorded)

    def do_rollback(self, data, fault: bool = False) -> None:
        retained = {int(x["version"]) for x in lance.dataset(join_uri(self.root, "__manifest")).versions()}
        targets = [v for v in self.rollback_targets() if v in retained]
        if "rollback_recreated_partition" in KNOWN_DEFECTS:  # (new) its new table would stay
            targets = [v for v in targets
                       if all(p in self.state.parts or k not in self.state.keys() for p in self.recorded[v].state.parts
                              for k in [p[0]])]
        if not targets:
            return
        v = data.draw(st.sampled_from(targets), label="rollback to")
        rec = self.recorded[v]
        before, batches = self.latest(), self.state.batches
        result = self.run(f"rollback to {v} (latest {before})", lambda: self.ns.rollback(v),
                          State(list(rec.state.rows), rec.state.batches, rec.state.parts), fault=fault)
        if result is not None and self.latest() == before:
            # a rollback to a version that reads as the current one publishes nothing (docs/history.md),
            # so it undoes no batch id either: one published since v and deleted or dropped stays published
            self.state = State(self.state.rows, batches, self.state.parts)
        if result is not None:
            from lancepart.index import declared_indexes

            self.index_gaps |= {d.name for d in declared_indexes(self.ns.refresh())}

    @precondition(lambda self: len(self.recorded) > 1)
    @rule(data=st.data())
    def rollback(self, data) -> None:
        self.do_rollback(data)

    @rule(data=st.data())
    def index(self, data) -> None:
        from lancepart.index import declared_indexes

        declared = {d.name: d for d in declared_indexes(self.ns.refresh())}
        action = data.draw(st.sampled_from(["create", "create", "drop"]), label="index action")
        if action == "drop":
            name = data.draw(st.sampled_from([*sorted(declared), "ix_none"]))
            self.run(f"drop_index {name}", lambda: self.ns.drop_index(name), None,
                     expect=() if name in declared else (InvalidArgumentError,))
            return
        options = [("ix_id", ID, "BTREE"), ("ix_country", COUNTRY, "BITMAP"), ("ix_country_fts", COUNTRY, "INVERTED")]
        name, fid, kind = data.draw(st.sampled_from(options))
        if self.col(fid) is None:
            return
        min_rows = data.draw(st.sampled_from([1, 3, 10_000]), label="min_rows")
        replace = data.draw(st.booleans(), label="replace")
        column = self.name(fid)
        d = declared.get(name)
        differs = d is not None and (d.column, d.index_type.upper(), d.min_rows) != (column, kind, min_rows)
        result = self.run(f"create_index {name} on {column} {kind} min_rows={min_rows} replace={replace}",
                          lambda: self.ns.create_index(column, kind, name=name, replace=replace, min_rows=min_rows),
                          None, expect=(InvalidArgumentError,) if differs and not replace else ())
        if result is not None:
            self.index_gaps.discard(name)

    def broken(self, rows: list[dict]) -> str | None:
        """The first declared constraint a row of ``rows`` does not make TRUE, else None."""
        if not rows:
            return None
        for name, (expr, _) in sorted(self.constraints.items()):
            if not all(self.matches(rows, f"coalesce(({expr}), false)")):
                return name
        return None

    def constraint_choices(self) -> list[tuple[str, frozenset[int]]]:
        out = []
        for c in self.cols:
            n = qn(c.name)
            if c.fid == ID:
                out += [(f"{n} >= 0", frozenset({ID})), (f"{n} % 5 <> 2", frozenset({ID}))]
            elif c.fid == COUNTRY:
                out += [(f"{n} IS NULL OR {n} <> 'DE'", frozenset({COUNTRY})),
                        (f"{n} IS NOT NULL", frozenset({COUNTRY}))]
            elif c.fid == F:
                out.append((f"{n} IS NULL OR {n} < 1.0", frozenset({F})))
            elif c.fid == V:
                out.append((f"{n} IS NULL OR {n} > 0", frozenset({V})))
        if self.col(ID) is not None and self.col(V) is not None:
            out.append((f"{qn(self.name(ID))} > 100 OR {qn(self.name(V))} IS NULL", frozenset({ID, V})))
        return out

    @rule(data=st.data())
    def add_constraint(self, data) -> None:
        """A CHECK constraint (docs/constraints.md): refused when a published row breaks it (the
        oracle's rows decide), and from then on every operation whose rows break it is refused
        with nothing published (:meth:`run`)."""
        choices = self.constraint_choices()
        if not choices:
            return
        name = data.draw(st.sampled_from(["c1", "c2", "c3"]), label="constraint")
        expr, fids = data.draw(st.sampled_from(choices), label="constraint expression")
        have = self.constraints.get(name)
        if have is not None and have[0] != expr:
            self.run(f"add_constraint {name} {expr!r} over {have[0]!r}", lambda: self.ns.add_constraint(name, expr),
                     None, expect=(InvalidArgumentError,))
            return
        breaking = not all(self.matches(self.state.rows, f"coalesce(({expr}), false)")) if self.state.rows else False
        result = self.run(f"add_constraint {name} {expr!r}", lambda: self.ns.add_constraint(name, expr), None,
                          expect=(ConstraintViolationError,) if breaking else ())
        if result is not None:
            self.constraints[name] = (expr, fids)

    @rule(data=st.data())
    def drop_constraint(self, data) -> None:
        name = data.draw(st.sampled_from(sorted({*self.constraints, "c_none"})), label="constraint")
        result = self.run(f"drop_constraint {name}", lambda: self.ns.drop_constraint(name), None,
                          expect=() if name in self.constraints else (InvalidArgumentError,))
        if result is not None:
            self.constraints.pop(name, None)

    @rule(data=st.data())
    def read_filtered(self, data) -> None:
        """``to_table`` and ``to_batches`` with a filter and a projection (empty, one column, a
        few) give the oracle's rows that DataFusion says match, projected; an empty projection
        keeps the row count, as Lance does."""
        self.steps += 1
        _STATS["ops"]["read_filtered"] += 1
        filter = self.draw_filter(data)
        names = [c.name for c in self.cols]
        cols = data.draw(st.lists(st.sampled_from(names), unique=True, max_size=3), label="projection")
        hit = [r for r, m in zip(self.state.rows, self.matches(self.state.rows, filter), strict=True) if m]
        fids = [next(c.fid for c in self.cols if c.name == n) for n in cols]
        want = canon([tuple(r.get(f) for f in fids) for r in hit])
        ns = PartitionedNamespace.open(self.root)
        for how, read in (("to_table", lambda: ns.to_table(filter=filter, columns=cols)),
                          ("to_batches", lambda: pa.Table.from_batches(
                              list(ns.to_batches(filter=filter, columns=cols)),
                              schema=ns.to_table(filter="FALSE", columns=cols).schema))):
            try:
                t = read()
            except Exception as e:
                self.fail(f"{how}(filter={filter!r}, columns={cols}): {type(e).__name__}: {e}")
            if t.num_rows != len(hit):
                self.fail(f"{how}(filter={filter!r}, columns={cols}): {t.num_rows} rows, the oracle {len(hit)}")
            got = canon(list(zip(*[t.column(n).to_pylist() for n in cols], strict=True))) if cols else want
            if got != want:
                self.fail(f"{how}(filter={filter!r}, columns={cols}): {multiset_diff(got, want)}")

    @precondition(lambda self: self.col(COUNTRY) is not None)
    @rule()
    def search_text(self) -> None:
        """Full-text search on country for 'US' returns the published rows holding it, every column
        read by field id (after a rename too), or refuses with a typed error naming a table that has
        no INVERTED index yet (declared with a higher min_rows, or not built after a lost race)."""
        self.steps += 1
        _STATS["ops"]["search_text"] += 1
        column, names = self.name(COUNTRY), [c.name for c in self.cols]
        try:
            got = self.ns.refresh().search_text(column, "US", k=10_000, columns=names)
        except InvalidArgumentError as e:
            if "has no INVERTED index" not in str(e):
                self.fail(f"search_text on {column!r}: {e}")
            _STATS["ops"]["search_text refused: a table without the index"] += 1
            return
        except Exception as e:
            self.fail(f"search_text on {column!r}: {type(e).__name__}: {e}")
        rows = canon([tuple(r) for r in zip(*[got.column(n).to_pylist() for n in names], strict=True)]) \
            if got.num_rows else []
        want = canon([tuple(r.get(c.fid) for c in self.cols) for r in self.state.rows if r.get(COUNTRY) == "US"])
        if rows != want:
            self.fail(f"search_text {column!r} 'US' with columns {names}: {multiset_diff(rows, want)}")
        _STATS["ops"]["search_text answered" + (" after a rename" if self.renamed else "")] += 1

    @rule(op=st.sampled_from(["create_namespace", "create_table", "declare_table", "register_table"]),
          via_root=st.booleans())
    def strip_and_repair(self, op, via_root) -> None:
        """A namespace without the writer flag (made before lancepart set it) is rewritten by
        Lance's DirectoryNamespace with its five columns; repair restores it, rows unchanged."""
        import io

        import lance.namespace as lns

        self.steps += 1
        _STATS["ops"]["strip_and_repair"] += 1
        self.foreign_seq += 1
        oid = f"foreign_{op}_{self.foreign_seq}"
        before = self.latest()
        mds = lance.dataset(join_uri(self.root, "__manifest"))
        mds.update_metadata({NAMESPACE_WRITER_FLAGS_KEY: None})
        d = lns.DirectoryNamespace(root=self.root)
        if op == "create_namespace":
            d.create_namespace(lns.CreateNamespaceRequest(id=[oid]))
        elif op == "create_table":
            sink = io.BytesIO()
            with pa.ipc.new_stream(sink, pa.schema([("a", pa.int64())])) as w:
                w.write_table(pa.table({"a": [1, 2]}))
            d.create_table(lns.CreateTableRequest(id=[oid]), sink.getvalue())
        elif op == "declare_table":
            d.declare_table(lns.DeclareTableRequest(id=[oid]))
        else:
            lance.write_dataset(pa.table({"a": [1]}), join_uri(self.root, f"{oid}.lance"))
            d.register_table(lns.RegisterTableRequest(id=[oid], location=f"{oid}.lance"))
        stripped = self.latest()
        self.unreadable.update(range(before + 2, stripped + 1))
        if set(lance.dataset(join_uri(self.root, "__manifest")).schema.names) >= {"read_version"}:
            self.fail(f"DirectoryNamespace.{op} did not strip __manifest: the scenario is not what it claims")
        try:
            if via_root:
                from lancepart.ops.repair import repair_root

                report = repair_root(self.root)
            else:
                report = self.ns.repair()
        except Exception as e:
            self.fail(f"repair after DirectoryNamespace.{op}: {type(e).__name__}: {e}")
        if not report.needed or report.new_version is None:
            self.fail(f"repair after DirectoryNamespace.{op}: {report!r}")
        self.ns = PartitionedNamespace.open(self.root)
        for v in range(before + 1, self.latest() + 1):
            if v not in self.unreadable:
                self.check_version(v, (self.state,), must=self.state, what=f"strip ({op}) and repair")

    @rule(data=st.data(), op=st.sampled_from(["append", "overwrite", "replace_where", "merge", "delete", "compact",
                                               "rollback", "create_index", "update"]))
    def fault_before_commit(self, data, op) -> None:
        """The operation dies right before its ``__manifest`` commit (an InjectedFault from
        lancepart/util/faults.py): nothing published, the oracle unchanged."""
        if op in ("append", "overwrite"):
            self.do_write(data, op, fault=True)
        elif op == "replace_where" and self.schema_guard():
            self.do_replace_where(data, fault=True)
        elif op == "merge" and self.schema_guard():
            self.do_merge(data, "id", fault=True)
        elif op == "delete":
            self.do_delete(data, fault=True)
        elif op == "update" and self.schema_guard():
            self.do_update(data, fault=True)
        elif op == "compact":
            self.do_compact(data, fault=True)
        elif op == "rollback":
            self.do_rollback(data, fault=True)
        elif op == "create_index" and self.col(ID) is not None:
            name = self.name(ID)
            ix = "ix_fault_" + re.sub(r"\W", "_", name)  # an index name is letters, digits and '_'
            result = self.run("create_index (fault)", lambda: self.ns.create_index(
                name, "BTREE", name=ix, min_rows=1), None, fault=True)
            if result is None:  # the declaration is committed, the build was not published
                self.index_gaps.add(ix)

    @rule()
    def reopen(self) -> None:
        self.ns = PartitionedNamespace.open(self.root)

    # ------------------------------------------------------------------ invariants
    @invariant()
    def published_rows_are_the_oracle(self) -> None:
        """Plain pylance: every partition table of the latest ``__manifest`` at its
        ``read_version``, columns placed by field id, equals the oracle partition by partition."""
        fids = self.fids()
        try:
            got = read_published(self.root, self.schema())
        except ModelFailure as e:
            self.fail(str(e))
        seen = set(got)
        want: dict[tuple, list[tuple]] = {}
        for r in self.state.rows:
            want.setdefault(r["_part"], []).append(tuple(r.get(f) for f in fids))
        problems = []
        if seen != self.state.keys():
            problems.append(f"partition tables {sorted(seen, key=repr)}, the oracle has "
                            f"{sorted(self.state.keys(), key=repr)}")
        for key in sorted(set(got) | set(want), key=repr):
            g, w = canon(got.get(key, [])), canon(want.get(key, []))
            if g != w:
                problems.append(f"partition {key}: {multiset_diff(g, w)}")
        if problems:
            self.fail(f"after step {self.steps}, the published rows differ from the oracle (columns "
                      f"{[c.name for c in self.cols]}):\n  " + "\n  ".join(problems))

    @invariant()
    def constraints_hold(self) -> None:
        """The declared constraints are the oracle's, and every published row meets each (the
        published rows are the oracle's: :meth:`published_rows_are_the_oracle`)."""
        if not self.constraints and "lancepart.constraint." not in str(lance.dataset(
                join_uri(self.root, "__manifest")).metadata):
            return
        got = PartitionedNamespace.open(self.root).list_constraints()
        want = {n: e for n, (e, _) in self.constraints.items()}
        if got != want:
            self.fail(f"declared constraints {got}, the oracle's {want}")
        name = self.broken(self.state.rows)
        if name is not None:
            self.fail(f"a published row breaks constraint {name!r} ({want[name]})")

    @invariant()
    def reads_and_verify(self) -> None:
        ns = PartitionedNamespace.open(self.root)
        got_schema = [(f.name, f.type, int(f.metadata[FIELD_ID])) for f in ns.schema]
        want_schema = [(c.name, c.type, c.fid) for c in self.cols]
        if got_schema != want_schema:
            self.fail(f"the namespace schema is {got_schema}, the oracle's {want_schema}")
        t = ns.to_table()
        got = canon(list(zip(*[t.column(c.name).to_pylist() for c in self.cols], strict=True)))
        want = self.state.render(self.fids())
        if got != want:
            self.fail(f"ns.to_table() differs from the oracle: {multiset_diff(got, want)}")
        report = ns.verify()
        problems = [p for p in report.problems
                    if not (p.kind == "index_missing" and any(f"'{n}'" in p.message for n in self.index_gaps))]
        if problems:
            self.fail(f"verify found problems: {[(p.kind, p.object_id, p.message) for p in problems]}")
        if self.steps - self.full_check >= 6:
            self.full_check = self.steps
            self.check_recorded_versions()


# --------------------------------------------------------------------------- the tests
def _settings(stress: bool) -> settings:
    seed = os.environ.get("LANCEPART_MODEL_SEED")
    phases = None if os.environ.get("LANCEPART_MODEL_SHRINK", "1") != "0" else [
        Phase.explicit, Phase.reuse, Phase.generate]  # LANCEPART_MODEL_SHRINK=0: report the first failure as found
    return settings(phases=phases or list(Phase), max_examples=250 if stress else 20,
                    stateful_step_count=40 if stress else 25, deadline=None,
                    derandomize=seed is None, database=None, print_blob=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much,
                                           HealthCheck.data_too_large])


# Tables created with fewer rows store their strings uncompressed (SMALL_TABLE_ROWS, 100 000 in
# production): the model's writes of 1-6 rows create tables both ways (one row: small), and compaction re-encodes
# the small ones that grew, beside every other operation.
MODEL_SMALL_TABLE_ROWS = 2


@pytest.mark.slow
def test_model(stress, monkeypatch) -> None:
    """Random sequences of every public operation against the oracle (20 examples of up to 25
    steps, about a minute, every rule at least once; ``--stress``: 250 of up to 40)."""
    from lancepart.evolution import file_format

    monkeypatch.setattr(file_format, "SMALL_TABLE_ROWS", MODEL_SMALL_TABLE_ROWS)
    seed = os.environ.get("LANCEPART_MODEL_SEED")
    machine = hypothesis_seed(int(seed))(NamespaceModel) if seed is not None else NamespaceModel
    started = time.monotonic()
    try:
        run_state_machine_as_test(machine, settings=_settings(stress))
    finally:
        print(f"\nmodel: {_STATS['examples']} examples, {sum(_STATS['ops'].values())} operations in "
              f"{time.monotonic() - started:.0f} s: {dict(sorted(_STATS['ops'].items()))}")


# --------------------------------------------------------------------------- the concurrent twin
CONCURRENT_SPEC = {"id": 1, "fields": [PFIELDS["country"][2]]}
DATA_OPERATIONS = {"append", "overwrite", "merge", "delete", "replace_where", "drop_partitions"}


def _apply(rows: dict[int, tuple], rec: dict) -> dict[int, tuple]:
    """The oracle: ``rows`` (id -> (id, country, f, v)) after the operation ``rec`` a worker reported."""
    out = dict(rows)
    if rec["op"] in ("append", "merge"):  # ids are unique: a merge replaces the rows of its keys
        for r in rec["rows"]:
            out[r["id"]] = (r["id"], r["country"], r["f"], r["v"])
    elif rec["op"] == "delete":
        table = pa.table({n: [r[i] for r in out.values()] for i, n in enumerate(["id", "country", "f", "v"])},
                         schema=pa.schema([("id", pa.int64()), ("country", pa.utf8()), ("f", pa.float64()),
                                           ("v", pa.int64())]))
        for r, hit in zip(list(out.values()), datafusion_mask(table, rec["filter"]), strict=True):
            if hit:
                del out[r[0]]
    return out


@pytest.mark.stress
def test_model_concurrent(tmp_path) -> None:
    """The concurrent twin: 3 processes run random operations on one namespace (append with unique
    ids, merge, delete, update_schema add, compact) for 60 s, each recording what returned success
    and its ``manifest_version``. The oracle is rebuilt from those in commit order; every retained
    ``__manifest`` version must read as the oracle at that point, the latest one with plain pylance
    too; an operation that raised published nothing (no history entry of its batch id, no data
    commit no success claims); no untyped error; ``verify`` is clean."""
    import subprocess
    import sys
    from pathlib import Path

    from tests.model_proc import SCHEMA

    workers, seconds = 3, float(os.environ.get("LANCEPART_MODEL_SECONDS", "60"))
    root = str(tmp_path / "ns")
    ns = PartitionedNamespace.create(root, SCHEMA, CONCURRENT_SPEC)
    seed_rows = [{"id": i, "country": COUNTRIES[i % 4], "f": [0.0, 1.5, None][i % 3], "v": i % 10}
                 for i in range(1, 21)]
    first = ns.write(pa.Table.from_pylist(seed_rows, schema=SCHEMA), batch_id="seed")
    here = Path(__file__).resolve().parent
    env = {**os.environ, "PYTHONPATH": str(here.parent)}
    env.pop(faults.ENV, None)
    def flags(w: int) -> list[str]:
        return ((["--no-merge-after-change"] if "merge_after_schema_change" in KNOWN_DEFECTS else []) +
                (["--no-add-column"] if "concurrent_schema_change" in KNOWN_DEFECTS else []) +
                (["--no-compact"] if "concurrent_compaction" in KNOWN_DEFECTS and w > 1 else []))

    procs = [subprocess.Popen([sys.executable, str(here / "model_proc.py"), root, str(w), str(seconds), str(1000 + w),
                               str(tmp_path / f"w{w}.jsonl"), *flags(w)], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for w in range(1, workers + 1)]
    for p in procs:
        _, err = p.communicate(timeout=seconds + 600)
        assert p.returncode == 0, err[-3000:]
    records = [json.loads(line) for w in range(1, workers + 1) for line in open(tmp_path / f"w{w}.jsonl")]
    ok = [r for r in records if r["ok"]]
    failed = [r for r in records if not r["ok"]]
    problems: list[str] = []

    problems += [f"worker {r['worker']} {r['op']} raised an untyped {r['error']}: {r['message']}"
                 for r in failed if not r["typed"]]
    history = {e.version: e for e in ns.refresh().history()}
    # the commits that changed rows, each claimed by exactly one operation that reported success
    claimed: dict[int, dict] = {first.manifest_version: {"op": "append", "rows": seed_rows, "batch_id": "seed"}}
    for r in ok:
        if r["skipped"]:
            problems.append(f"{r} was skipped: every batch id is new")
        if r["op"] in ("append", "merge") or (r["op"] == "delete" and r["touched"]):
            if r["version"] in claimed:
                problems.append(f"__manifest version {r['version']} claimed by {claimed[r['version']]} and {r}")
            claimed[r["version"]] = r
            e = history.get(r["version"])
            if e is None:
                problems.append(f"{r} reported __manifest version {r['version']}, which history does not list")
            elif e.operation != r["op"] or e.batch_id != r.get("batch_id"):
                problems.append(f"{r} reported version {r['version']}, history says {e.operation} {e.batch_id!r}")
    for v, e in sorted(history.items()):
        if e.operation in DATA_OPERATIONS and v not in claimed:
            problems.append(f"__manifest version {v} ({e.operation}, batch {e.batch_id!r}) changed rows, and no "
                            f"operation that reported success made it: a failed one published")
    failed_batches = {r["batch_id"] for r in failed if r.get("batch_id")}
    problems += [f"version {v}: the batch {e.batch_id} of a failed operation was published"
                 for v, e in history.items() if e.batch_id in failed_batches]

    # every retained version reads as the oracle after the claimed commits up to it
    state: dict[int, tuple] = {}
    expected: dict[int, dict[int, tuple]] = {}
    for v in sorted(v for v in history if v >= first.manifest_version):
        if v in claimed:
            state = _apply(state, claimed[v])
        expected[v] = state
    for v, want in expected.items():
        t = PartitionedNamespace.open(root, version=v).to_table(columns=["id", "country", "f", "v"])
        got = canon(list(zip(*[t.column(c).to_pylist() for c in ("id", "country", "f", "v")], strict=True)))
        if got != canon(list(want.values())):
            op = claimed.get(v, {"op": history[v].operation})
            what = f"{op.get('op')} {op.get('filter') or op.get('batch_id') or ''}"
            problems.append(f"__manifest version {v} (after {what}) reads other rows than the oracle: "
                            f"{multiset_diff(got, canon(list(want.values())))}")
            break  # later versions follow from this one
    # the latest version with plain pylance, every added column NULL, and the schema
    ns.refresh()
    added = {r["column"] for r in ok if r["op"] == "add_column"}
    if set(ns.schema.names) != set(SCHEMA.names) | added:
        problems.append(f"schema {ns.schema.names}: columns added by successful changes {sorted(added)}")
    published = read_published(root, ns.schema)
    names = ns.schema.names
    rows = [r for part in published.values() for r in part]
    if any(r[names.index(c)] is not None for r in rows for c in added):
        problems.append("an added column holds values: nothing wrote any")
    base = canon([tuple(r[names.index(c)] for c in ("id", "country", "f", "v")) for r in rows])
    if base != canon(list(state.values())):
        problems.append(f"plain pylance, latest version: {multiset_diff(base, canon(list(state.values())))}")
    report = ns.verify()
    problems += [f"verify: {p.kind} {p.object_id} {p.message}" for p in report.problems]
    summary = Counter((r["op"], "ok" if r["ok"] else r["error"]) for r in records)
    print(f"\nconcurrent model: {len(records)} operations, {len(claimed)} row commits, "
          f"{len(history)} versions: {dict(sorted(summary.items()))}")
    assert not problems, "\n".join(problems[:30])
