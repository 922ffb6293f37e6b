"""CHECK constraints (docs/constraints.md): ``ns.add_constraint(name, sql_expr)`` declares a
condition every row of the namespace must make TRUE, kept in ``__manifest`` root properties so
that every writer sees it in the snapshot it commits on (spec "Transaction / Commit Behavior":
the one ``__manifest`` commit is where a write becomes visible, so that is where the check must
hold). Adding one that published rows break is refused; every write path (write, merge, update,
replace-where, Spark, rollback) refuses rows that break one with nothing published; a writer
that read its snapshot before the constraint was declared is rebased onto one that has it. Real
Lance tables and real processes."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import date

import pyarrow as pa
import pytest

from lancepart import PartitionedNamespace
from lancepart.cli import main
from lancepart.errors import ConstraintViolationError, InvalidArgumentError
from lancepart.stats import describe
from lancepart.util.sample import demo_events
from tests.conftest import copy_ns, create_events_ns, manifest_version
from tests.procs import child_env, release, wait_until_reached

NONNEG = "amount >= 0"


@pytest.fixture(scope="module")
def template(tmp_path_factory) -> str:
    root = str(tmp_path_factory.mktemp("constraints") / "ns")
    ns = create_events_ns(root)
    ns.write(demo_events(400, seed=1, days=3))
    return root


@pytest.fixture
def ns(template, tmp_path) -> PartitionedNamespace:
    return copy_ns(template, tmp_path / "ns")


def bad_rows(ids: list[int], amount: float | None = -1.0) -> pa.Table:
    rows = demo_events(len(ids), seed=9, days=3)
    rows = rows.set_column(0, "id", pa.array(ids, pa.int64()))
    return rows.set_column(rows.schema.get_field_index("amount"), "amount", pa.array([amount] * len(ids), pa.float64()))


def state(ns: PartitionedNamespace) -> tuple[int, list[int]]:
    ns.refresh()
    return ns.manifest_version, sorted(ns.to_table(columns=["id"]).column("id").to_pylist())


def test_add_constraint_is_kept_in_manifest_and_refuses_a_breaking_write(ns):
    """The declaration is a root property of ``__manifest`` (``describe`` lists it); a write of
    rows that break it raises ConstraintViolationError naming the constraint, the count and the
    rows, and publishes nothing; rows that meet it are written as before."""
    result = ns.add_constraint("amount_nonneg", NONNEG)
    assert result.details["rows_checked"] == 400 and result.details["tables"] == len(ns.partitions())
    assert ns.list_constraints() == {"amount_nonneg": NONNEG}
    assert ns.manifest.dataset().metadata["lancepart.constraint.amount_nonneg"] == NONNEG
    assert describe(ns, sizes=False)["constraints"] == {"amount_nonneg": NONNEG}
    before = state(ns)
    broken = (r"write: 2 row\(s\) break constraint 'amount_nonneg' \(amount >= 0\), e\.g\. \(id=9000.*"
              r"nothing was published")
    with pytest.raises(ConstraintViolationError, match=broken) as e:
        ns.write(pa.concat_tables([demo_events(5, start_id=8000), bad_rows([9000, 9001])]))
    assert (e.value.constraint, e.value.count, [r["id"] for r in e.value.rows]) == ("amount_nonneg", 2, [9000, 9001])
    assert state(ns) == before
    ns.write(demo_events(5, start_id=8000))
    assert len(state(ns)[1]) == 405


def test_null_breaks_a_constraint_unless_it_lets_nulls_through(ns):
    """A row meets a constraint when the expression is TRUE: NULL (``NULL >= 0``) breaks it, as
    in Delta Lake; ``amount IS NULL OR amount >= 0`` lets NULLs through."""
    ns.add_constraint("amount_nonneg", NONNEG)
    with pytest.raises(ConstraintViolationError, match="amount=None"):
        ns.write(bad_rows([9000], amount=None))
    ns.drop_constraint("amount_nonneg")
    ns.add_constraint("amount_nonneg_or_null", f"amount IS NULL OR {NONNEG}")
    ns.write(bad_rows([9000], amount=None))
    with pytest.raises(ConstraintViolationError):
        ns.write(bad_rows([9001]))


def test_adding_a_constraint_the_published_rows_break_is_refused(ns):
    """Published rows that break it are named; nothing is declared and no commit is made."""
    ns.write(bad_rows([9000, 9001, 9002]))
    v0 = manifest_version(ns.root)
    with pytest.raises(ConstraintViolationError, match=r"3 row\(s\) (of|in \d) partition tables? .* break "
                                                       r"constraint 'amount_nonneg'.*id=900.*was not added") as e:
        ns.add_constraint("amount_nonneg", NONNEG)
    assert sorted(r["id"] for r in e.value.rows) == [9000, 9001, 9002] and e.value.count == 3
    assert manifest_version(ns.root) == v0
    assert ns.refresh().list_constraints() == {}
    ns.write(bad_rows([9003]))  # no constraint: accepted


@pytest.mark.parametrize("name, expr, message", [
    ("amount nonneg", NONNEG, "letters, digits and '_'"),
    ("1st", NONNEG, "letters, digits and '_'"),
    ("c", "", "non-empty"),
    ("c", 5, "non-empty"),
    ("c", "amount * 2", "gives double, not a boolean"),
    ("c", "no_such_column > 0", "cannot plan"),
    ("c", "amount > random()", "random"),
    ("c", "sum(amount) > 0", "aggregate|cannot plan"),
    ("c", "amount > (SELECT 1)", "subquer|cannot plan|cannot parse"),
    ("c", "amount >= 0; DROP TABLE t", "cannot parse|cannot plan"),
])
def test_bad_declarations_are_typed_errors_before_any_commit(ns, name, expr, message):
    v0 = manifest_version(ns.root)
    with pytest.raises(InvalidArgumentError, match=message):
        ns.add_constraint(name, expr)
    assert manifest_version(ns.root) == v0


def test_a_name_keeps_its_definition_and_drop_names_what_is_declared(ns):
    ns.add_constraint("amount_nonneg", NONNEG)
    again = ns.add_constraint("amount_nonneg", f"  {NONNEG} ")  # the same definition: finishes, no error
    assert again.details["expression"] == NONNEG
    with pytest.raises(InvalidArgumentError, match=r"declared already as 'amount >= 0'; drop it first"):
        ns.add_constraint("amount_nonneg", "amount > 0")
    with pytest.raises(InvalidArgumentError, match=r"no constraint named 'nope'.*declared: \['amount_nonneg'\]"):
        ns.drop_constraint("nope")
    ns.drop_constraint("amount_nonneg")
    assert ns.list_constraints() == {}
    ns.write(bad_rows([9000]))


def test_merge_update_and_replace_where_are_checked(ns):
    """Each write path that adds rows: the rows it would publish are checked on the snapshot it
    commits on; a breaking one publishes nothing."""
    ns.add_constraint("amount_nonneg", NONNEG)
    before = state(ns)
    with pytest.raises(ConstraintViolationError, match="update"):
        ns.update({"amount": "amount - 1000"}, "id < 10")
    with pytest.raises(ConstraintViolationError, match="merge"):
        ns.merge(bad_rows([1, 2, 9000]), on="id")
    new_day = bad_rows([9001]).set_column(1, "event_date", pa.array([date(2030, 1, 1)], pa.date32()))
    with pytest.raises(ConstraintViolationError, match="merge"):  # a new partition: refused before it is reserved
        ns.merge(new_day, on="id")
    day = "event_date = DATE '2025-12-01'"
    rows = ns.to_table(day)
    with pytest.raises(ConstraintViolationError):
        ns.overwrite(bad_rows(rows.column("id").to_pylist()[:3]).set_column(
            1, "event_date", rows.column("event_date").slice(0, 3)), where=day)
    assert state(ns) == before
    ns.update({"amount": "amount + 1"}, "id < 10")  # rows that meet it: published
    assert state(ns)[0] == before[0] + 1


def test_rollback_does_not_bring_back_rows_that_break_a_constraint(ns):
    """Rows deleted before the constraint was added stay deleted: a rollback to a version that
    holds them is refused (drop the constraint to roll back to it)."""
    ns.write(bad_rows([9000]))
    with_bad = manifest_version(ns.root)
    ns.delete("id = 9000")
    ns.add_constraint("amount_nonneg", NONNEG)
    before = state(ns)
    with pytest.raises(ConstraintViolationError, match="9000"):
        ns.rollback(with_bad)
    assert state(ns) == before


def test_schema_changes_that_would_orphan_a_constraint_are_refused(ns):
    """A constraint names columns by name: dropping or renaming one of them is refused until the
    constraint is dropped; other schema changes pass."""
    ns.add_constraint("amount_nonneg", NONNEG)
    with pytest.raises(InvalidArgumentError, match=r"constraint 'amount_nonneg'.*drop it first"):
        ns.update_schema(rename={"amount": "value"})
    with pytest.raises(InvalidArgumentError, match="constraint 'amount_nonneg'"):
        ns.update_schema(drop=["amount"])
    ns.update_schema(add=[pa.field("note", pa.utf8())])
    with pytest.raises(ConstraintViolationError):
        ns.write(bad_rows([9000]))


def _write_bad_in_a_process(root: str, fault: str) -> subprocess.Popen:
    code = ("import sys, pyarrow as pa; from lancepart import PartitionedNamespace; from tests.test_constraints "
            "import bad_rows; ns = PartitionedNamespace.open(sys.argv[1]); ns.write(bad_rows([9000, 9001]))")
    return subprocess.Popen([sys.executable, "-c", code, root], env=child_env(fault), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def test_a_write_that_read_its_snapshot_before_the_constraint_is_rebased_and_refused(ns, tmp_path):
    """A writer process reads its snapshot, writes its breaking rows and stands before its
    ``__manifest`` commit; meanwhile the constraint is added (checked, declared, sealed). Lance
    would rebase the stale row commit over the declaration alone; the seal is a row commit it
    conflicts with, so the writer is rebased onto a snapshot that has the constraint: refused,
    nothing published."""
    go = str(tmp_path / "go")
    proc = _write_bad_in_a_process(ns.root, f"before_manifest_commit:wait:{go}")
    wait_until_reached(go, proc)
    before = state(ns)
    ns.add_constraint("amount_nonneg", NONNEG)
    release(go)
    _, err = proc.communicate(timeout=180)
    assert proc.returncode != 0 and "ConstraintViolationError" in err and "amount_nonneg" in err, err[-2000:]
    after = state(ns)
    assert after[1] == before[1] and 9000 not in after[1]
    assert ns.list_constraints() == {"amount_nonneg": NONNEG}


def test_rows_published_between_declaration_and_seal_withdraw_the_constraint(ns, tmp_path):
    """The one window the seal cannot close: a writer that read its snapshot before the
    declaration commits right after it (Lance rebases it over the declaration). The seal checks
    what tables gained since the published rows were checked, finds those rows, withdraws the
    declaration and raises; the namespace is left without the constraint, as if never added."""
    writer_go, adder_go = str(tmp_path / "w"), str(tmp_path / "a")
    writer = _write_bad_in_a_process(ns.root, f"before_manifest_commit:wait:{writer_go}")
    wait_until_reached(writer_go, writer)
    adder = subprocess.Popen(
        [sys.executable, "-c", "import sys; from lancepart.cli.commands import main; sys.exit(main(sys.argv[1:]))",
         "constraint", "add", ns.root, "amount_nonneg", NONNEG, "--json", "-q"],
        env=child_env(f"before_constraint_seal:wait:{adder_go}"), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True)
    wait_until_reached(adder_go, adder)
    release(writer_go)
    _, err = writer.communicate(timeout=180)
    assert writer.returncode == 0, err[-2000:]  # rebased over the declaration without a conflict
    release(adder_go)
    out, err = adder.communicate(timeout=180)
    assert adder.returncode != 0 and "was not added" in err and "9000" in err, (out, err[-2000:])
    assert ns.refresh().list_constraints() == {}
    assert {9000, 9001} <= set(state(ns)[1])


def test_cli_constraint_add_list_drop(ns, capsys):
    assert main(["constraint", "add", ns.root, "amount_nonneg", NONNEG, "--json", "-q"]) == 0
    assert json.loads(capsys.readouterr().out)["details"]["constraint"] == "amount_nonneg"
    assert main(["constraint", "list", ns.root, "--json", "-q"]) == 0
    assert json.loads(capsys.readouterr().out) == {"amount_nonneg": NONNEG}
    assert main(["constraint", "add", ns.root, "amount_pos", "amount * 2", "-q"]) != 0
    assert "not a boolean" in capsys.readouterr().err
    assert main(["describe", ns.root, "--no-sizes", "-q"]) == 0
    assert "constraint amount_nonneg: CHECK (amount >= 0)" in capsys.readouterr().out
    assert main(["constraint", "drop", ns.root, "amount_nonneg", "-q"]) == 0
    assert ns.refresh().list_constraints() == {}


@pytest.mark.spark
def test_spark_writes_are_checked_before_they_publish(ns, spark):
    """``lps.write`` and ``lps.merge``: each task checks its rows against the constraints of the
    snapshot the job planned on before it writes them (the driver then reads nothing back);
    ``lps.update`` is checked by the driver's publish; the data source's
    batch write (``format("lancepart")``) is checked by the driver's publish, which reads back the
    constraint's columns of what the tasks wrote (Spark wraps the typed error its commit raised).
    Either way nothing is published."""
    from pyspark.sql import functions as F

    from lancepart import spark as lps

    ns.add_constraint("amount_nonneg", NONNEG)
    before = state(ns)
    rows = pa.concat_tables([demo_events(20, start_id=7000), bad_rows([9000])])
    df = spark.createDataFrame(rows.to_pandas()).withColumn("event_ts", F.col("event_ts").cast("timestamp_ntz"))
    broken = r"lps\.write: 1 row\(s\) break constraint 'amount_nonneg'.*9000"
    with pytest.raises(ConstraintViolationError, match=broken):
        lps.write(df, ns.root)
    assert state(ns) == before
    with pytest.raises(Exception, match=r"ConstraintViolationError.*1 row\(s\) of partition table .*break constraint"):
        df.write.format("lancepart").mode("append").save(ns.root)  # Spark wraps what the data source's commit raised
    assert state(ns) == before
    with pytest.raises(ConstraintViolationError, match=r"lps\.merge: 1 row\(s\) break constraint"):
        lps.merge(df, ns.root, on=["id"])
    assert state(ns) == before
    good = df.where("amount >= 0")
    assert lps.write(good, ns.root).rows_written == 20
    assert len(state(ns)[1]) == len(before[1]) + 20
    with pytest.raises(ConstraintViolationError, match="amount_nonneg"):
        lps.update(spark, ns.root, {"amount": "-amount"}, "id >= 7000")  # rows rewritten on the driver's plan
