"""The data-quality gate (lancepart.ops.quality): real great_expectations 1.x on real Spark and pandas.

Every batch is built with known violations, so each count and example below is exact.
"""

from __future__ import annotations

import datetime
import subprocess
import sys

import pandas as pd
import pyarrow as pa
import pytest

from lancepart.errors import ConfigError, ExpectationFailedError, InvalidArgumentError
from lancepart.ops.quality import DRIVER_MAX_ROWS, Expectation, QualityReport, check, parse_expectations, validate

N = 1000
COUNTRIES = ["US", "FR", "DE", "JP", "BR"]

NOT_NULL = {"type": "not_null", "column": "id"}
BETWEEN = {"type": "between", "column": "amount", "min": 0, "max": 10000}
IN_SET = {"type": "in_set", "column": "country", "values": COUNTRIES}
REGEX = {"type": "regex", "column": "country", "pattern": "^[A-Z]{2}$"}
UNIQUE = {"type": "unique", "column": "id"}
ROW_COUNT = {"type": "row_count", "min": 1, "max": 10_000_000}
GX_LENGTHS = {"type": "great_expectations", "expectation": "expect_column_value_lengths_to_be_between",
              "kwargs": {"column": "country", "min_value": 2, "max_value": 2}}
BASIC = [NOT_NULL, BETWEEN, IN_SET, REGEX, UNIQUE, ROW_COUNT]
ALL = [*BASIC, GX_LENGTHS]


def clean_table() -> pa.Table:
    """N rows that satisfy every expectation above."""
    return pa.table({
        "id": pa.array(range(N), pa.int64()),
        "amount": pa.array([float(i) for i in range(N)], pa.float64()),
        "country": pa.array([COUNTRIES[i % 5] for i in range(N)], pa.utf8()),
    })


def dirty_table() -> pa.Table:
    """N rows with these violations (nulls only violate not_null):

    id:      None at rows 10, 20, 30; row 40 repeats 7 (so two rows hold 7)
    amount:  -5.0 at row 5, 12000.0 at row 6, None at row 8
    country: 'XX' at row 1 (not in set), 'fr' at row 2 and 'USA' at row 3 (neither), None at row 4
    """
    ids: list[int | None] = list(range(N))
    for r in (10, 20, 30):
        ids[r] = None
    ids[40] = 7
    amounts: list[float | None] = [float(i) for i in range(N)]
    amounts[5], amounts[6], amounts[8] = -5.0, 12000.0, None
    countries: list[str | None] = [COUNTRIES[i % 5] for i in range(N)]
    countries[1], countries[2], countries[3], countries[4] = "XX", "fr", "USA", None
    return pa.table({"id": pa.array(ids, pa.int64()), "amount": pa.array(amounts, pa.float64()),
                     "country": pa.array(countries, pa.utf8())})


# (expectation, unexpected_count, examples) on dirty_table(); row_count's is table-level.
FAILURES = [
    (NOT_NULL, 3, [None]),
    (BETWEEN, 2, [-5.0, 12000.0]),
    (IN_SET, 3, ["XX", "fr", "USA"]),
    (REGEX, 2, ["fr", "USA"]),
    (UNIQUE, 2, [7]),
    (GX_LENGTHS, 1, ["USA"]),
]

EXPECTED_MESSAGE = (
    "5 of 6 expectations failed: "
    "not_null(id): 3 of 1000 rows unexpected, e.g. [None]; "
    "between(amount, 0..10000): 2 of 1000 rows unexpected, e.g. [-5.0, 12000.0]; "
    "in_set(country, [US, FR, DE, JP, BR]): 3 of 1000 rows unexpected, e.g. ['XX', 'fr', 'USA']; "
    "regex(country, ^[A-Z]{2}$): 2 of 1000 rows unexpected, e.g. ['fr', 'USA']; "
    "unique(id): 2 of 1000 rows unexpected, e.g. [7]"
)


def _ids(params: list) -> list[str]:
    return [p[0]["type"] if p[0]["type"] != "great_expectations" else p[0]["expectation"] for p in params]


# ---------------------------------------------------------------------------------------------
# pandas / Arrow input


@pytest.mark.parametrize("item", ALL, ids=_ids([(i,) for i in ALL]))
def test_each_type_passes_on_clean_data(item: dict) -> None:
    report = validate(clean_table(), [item])
    (o,) = report.results
    assert report.success and o.success, o.message
    assert o.element_count == N
    assert o.examples == []
    if item["type"] == "row_count":
        assert (o.unexpected_count, o.observed_value, o.message) == (None, N, "1000 rows")
    else:
        assert (o.unexpected_count, o.message) == (0, "0 of 1000 rows unexpected")


@pytest.mark.parametrize(("item", "unexpected", "examples"), FAILURES, ids=_ids(FAILURES))
def test_each_type_fails_with_exact_counts_and_examples(item: dict, unexpected: int, examples: list) -> None:
    report = validate(dirty_table(), [item])
    (o,) = report.results
    assert not report.success and not o.success
    assert (o.unexpected_count, o.element_count, o.examples) == (unexpected, N, examples)
    assert o.message == f"{unexpected} of 1000 rows unexpected, e.g. {examples!r}"
    assert o.unexpected_percent is not None and o.unexpected_percent > 0


def test_row_count_fails_with_observed_value() -> None:
    (o,) = validate(dirty_table(), [{"type": "row_count", "max": 999}]).results
    assert not o.success
    assert (o.observed_value, o.element_count, o.unexpected_count) == (N, N, None)
    assert o.message == "observed 1000 rows, expected at most 999"


def test_between_one_sided_and_strict_bounds() -> None:
    # amount 0.0 (row 0) violates a strict minimum of 0; -5.0 (row 5) violates it anyway.
    strict = {"type": "between", "column": "amount", "min": 0, "strict_min": True}
    upper = {"type": "between", "column": "amount", "max": 999, "strict_max": True}
    a, b = validate(dirty_table(), [strict, upper]).results
    assert (a.name, a.unexpected_count, a.examples) == ("between(amount, >0)", 2, [0.0, -5.0])
    assert (b.name, b.unexpected_count, b.examples) == ("between(amount, <999)", 2, [12000.0, 999.0])


def test_between_dates_and_timestamps() -> None:
    t = pa.table({"d": pa.array([datetime.date(2025, 1, 1), datetime.date(2024, 12, 31), None], pa.date32()),
                  "ts": pa.array([datetime.datetime(2025, 1, 1, 1), datetime.datetime(2024, 1, 1), None],
                                 pa.timestamp("us"))})
    a, b = validate(t, [{"type": "between", "column": "d", "min": datetime.date(2025, 1, 1)},
                        {"type": "between", "column": "ts", "min": "2025-01-01T00:00:00"}]).results
    assert (a.unexpected_count, a.examples) == (1, [datetime.date(2024, 12, 31)])
    assert (b.unexpected_count, b.examples) == (1, [datetime.datetime(2024, 1, 1)])


def test_pandas_dataframe_input() -> None:
    df = pd.DataFrame({"id": [1, 2, 2, None], "country": ["US", "fr", "FR", "US"]})
    a, b, c = validate(df, [UNIQUE, REGEX, IN_SET]).results
    assert (a.unexpected_count, a.examples) == (2, [2.0])  # pandas made the column float64
    assert (b.unexpected_count, b.examples) == (1, ["fr"])
    assert (c.unexpected_count, c.element_count, c.examples) == (1, 4, ["fr"])


def test_check_lists_each_failed_expectation_with_counts_and_examples() -> None:
    with pytest.raises(ExpectationFailedError) as info:
        check(dirty_table(), BASIC)
    assert str(info.value) == EXPECTED_MESSAGE
    report = info.value.report
    assert isinstance(report, QualityReport) and not report.success
    assert [o.success for o in report.results] == [False, False, False, False, False, True]
    text = str(report)
    assert text.splitlines()[0].startswith("quality gate FAILED: 1 of 6 expectations passed (pandas, ")
    assert "  FAILED not_null(id): 3 of 1000 rows unexpected, e.g. [None]" in text
    assert "  ok     row_count(1..10000000): 1000 rows" in text
    d = report.to_dict()
    assert d["success"] is False and d["results"][4]["examples"] == [7]


def test_check_returns_the_report_when_everything_passes() -> None:
    report = check(clean_table(), ALL)
    assert report.success and len(report.results) == 7 and report.engine == "pandas"
    assert report.failure_message() == ""


def test_name_is_used_in_messages() -> None:
    item = {**NOT_NULL, "name": "every event has an id"}
    with pytest.raises(ExpectationFailedError, match=r"^1 of 1 expectations failed: every event has an id: 3 of 1000"):
        check(dirty_table(), [item])


def test_duplicate_expectations_each_get_a_result() -> None:
    # A great_expectations suite keeps only one of two equal expectations; both must still report.
    report = validate(dirty_table(), [NOT_NULL, {**NOT_NULL, "name": "again"}, NOT_NULL])
    assert [(o.name, o.unexpected_count) for o in report.results] == [
        ("not_null(id)", 3), ("again", 3), ("not_null(id)", 3)]


def test_missing_column_is_a_failed_expectation() -> None:
    items = [{"type": "not_null", "column": "nope"}, NOT_NULL,
             {"type": "great_expectations", "expectation": "expect_column_values_to_be_null",
              "kwargs": {"column": "also_missing"}}]
    a, b, c = validate(clean_table(), items).results
    assert not a.success and a.message == "column 'nope' does not exist (columns: id, amount, country)"
    assert b.success  # the others still ran
    assert not c.success and "'also_missing' does not exist" in c.message
    with pytest.raises(ExpectationFailedError, match=r"not_null\(nope\): column 'nope' does not exist"):
        check(clean_table(), items)


def test_escape_hatch_with_a_table_level_expectation() -> None:
    item = {"type": "great_expectations", "expectation": "expect_column_max_to_be_between",
            "kwargs": {"column": "amount", "max_value": 10000}}
    (o,) = validate(dirty_table(), [item]).results
    assert not o.success and o.observed_value == 12000.0 and o.unexpected_count is None
    assert o.name == "expect_column_max_to_be_between(amount)" and o.message == "observed 12000.0"
    (ok,) = validate(clean_table(), [item]).results
    assert ok.success and ok.observed_value == 999.0


def test_empty_input_fails_row_count_min_1() -> None:
    empty = clean_table().slice(0, 0)
    report = validate(empty, [ROW_COUNT, NOT_NULL, UNIQUE])
    rc, nn, uq = report.results
    assert not report.success
    assert (rc.success, rc.observed_value, rc.message) == (False, 0, "observed 0 rows, expected between 1 and 10000000")
    assert (nn.success, nn.unexpected_count, nn.element_count) == (True, 0, 0)
    assert uq.success
    with pytest.raises(ExpectationFailedError) as info:
        check(empty, [ROW_COUNT, NOT_NULL, UNIQUE])
    assert str(info.value) == ("1 of 3 expectations failed: row_count(1..10000000): observed 0 rows, "
                               "expected between 1 and 10000000")


def test_record_batch_input_and_unsupported_inputs() -> None:
    batch = dirty_table().to_batches()[0]
    assert validate(batch, [NOT_NULL]).results[0].unexpected_count == 3
    with pytest.raises(InvalidArgumentError, match="read_all"):
        validate(pa.RecordBatchReader.from_batches(batch.schema, [batch]), [NOT_NULL])
    with pytest.raises(InvalidArgumentError, match="got list"):
        validate([1, 2], [NOT_NULL])


def test_no_expectations_is_a_pass() -> None:
    report = check(dirty_table(), [])
    assert report.success and report.results == []


def test_no_files_and_no_progress_bars(tmp_path, monkeypatch, capfd) -> None:
    monkeypatch.chdir(tmp_path)
    validate(dirty_table(), ALL)
    assert list(tmp_path.iterdir()) == []
    out, err = capfd.readouterr()
    assert "Calculating Metrics" not in out + err


def test_import_does_not_import_great_expectations() -> None:
    code = "import sys, lancepart.ops.quality; sys.exit('great_expectations' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


# ---------------------------------------------------------------------------------------------
# parsing


def test_parse_builds_labels_and_gx_kwargs() -> None:
    parsed = parse_expectations(ALL)
    assert all(isinstance(e, Expectation) for e in parsed)
    assert [e.label for e in parsed] == [
        "not_null(id)", "between(amount, 0..10000)", "in_set(country, [US, FR, DE, JP, BR])",
        "regex(country, ^[A-Z]{2}$)", "unique(id)", "row_count(1..10000000)",
        "expect_column_value_lengths_to_be_between(country)"]
    assert parsed[1].gx_kwargs == {"column": "amount", "min_value": 0, "max_value": 10000}
    assert parsed[5].gx_expectation == "expect_table_row_count_to_be_between"
    assert parse_expectations(None) == []


@pytest.mark.parametrize(("items", "expected"), [
    ([NOT_NULL, {"type": "not_nul", "column": "id"}], "expectations[1]: unknown type 'not_nul'"),
    ([{"column": "id"}], "expectations[0]: missing key 'type'"),
    ([NOT_NULL, NOT_NULL, {"type": "unique"}], "expectations[2] (unique): missing key 'column'"),
    ([{"type": "not_null", "column": ""}], "expectations[0] (not_null): key 'column' must be a non-empty string"),
    ([{"type": "between", "column": "a", "min": 10, "max": 5}],
     "expectations[0] (between): 'min' (10) is greater than 'max' (5)"),
    ([{"type": "between", "column": "a"}], "expectations[0] (between): needs 'min', 'max' or both"),
    ([{"type": "between", "column": "a", "maximum": 5}], "expectations[0] (between): unknown key 'maximum'"),
    ([{"type": "between", "column": "a", "min": "low"}], "expectations[0] (between): key 'min' must be a number"),
    ([{"type": "between", "column": "a", "min": 0, "strict_min": "yes"}],
     "expectations[0] (between): key 'strict_min' must be true or false"),
    ([{"type": "row_count", "min": -1}], "expectations[0] (row_count): key 'min' must be a non-negative integer"),
    ([{"type": "row_count", "min": 5, "max": 1}], "expectations[0] (row_count): 'min' (5) is greater than 'max' (1)"),
    ([{"type": "regex", "column": "c", "pattern": "([A-Z"}],
     "expectations[0] (regex): key 'pattern' '([A-Z' is not a valid regular expression"),
    ([{"type": "in_set", "column": "c", "values": "US"}], "expectations[0] (in_set): key 'values' must be a list"),
    ([{"type": "in_set", "column": "c", "values": ["US", False]}], "expectations[0] (in_set): key 'values' mixes"),
    ([{"type": "great_expectations", "expectation": "expect_column_values_to_be_nul"}],
     "expectations[0] (great_expectations): key 'expectation': unknown great_expectations expectation "
     "'expect_column_values_to_be_nul'; did you mean 'expect_column_values_to_be_null'?"),
    ([{"type": "great_expectations", "expectation": "expect_column_values_to_be_null", "kwargs": {"colum": "x"}}],
     "expectations[0] (great_expectations): kwargs for expect_column_values_to_be_null: column: field required; "
     "colum: extra fields not permitted"),
    ([NOT_NULL, "not_null"], "expectations[1] must be a mapping"),
    ({"type": "not_null"}, "expectations must be a list of mappings, got dict"),
])
def test_parse_errors_name_item_and_key(items, expected: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_expectations(items)
    assert str(info.value).startswith(expected), str(info.value)


def test_validate_and_check_parse_first() -> None:
    with pytest.raises(ConfigError, match=r"expectations\[0\] \(regex\): missing key 'pattern'"):
        check(clean_table(), [{"type": "regex", "column": "country"}])


# ---------------------------------------------------------------------------------------------
# Spark


@pytest.mark.spark
@pytest.mark.parametrize(("driver_max_rows", "gx_engine"), [(DRIVER_MAX_ROWS, "pandas"), (0, "spark")],
                         ids=["collected", "spark-engine"])
def test_spark_failures_with_exact_counts_and_message(spark, driver_max_rows: int, gx_engine: str) -> None:
    df = spark.createDataFrame(dirty_table())
    items = [*BASIC, GX_LENGTHS, {"type": "not_null", "column": "nope"}]
    with pytest.raises(ExpectationFailedError) as info:
        check(df, items, driver_max_rows=driver_max_rows)
    report = info.value.report
    assert (report.engine, report.gx_engine) == ("spark", gx_engine)
    by_name = {o.name: o for o in report.results}
    for item, unexpected, examples in FAILURES:
        o = report.results[items.index(item)]
        assert (o.success, o.unexpected_count, o.element_count) == (False, unexpected, N), o.name
        # Spark does not promise which unexpected rows come first: compare as sets.
        assert sorted(o.examples, key=repr) == sorted(examples, key=repr), o.name
    rc = by_name["row_count(1..10000000)"]
    assert (rc.success, rc.observed_value) == (True, N)
    missing = by_name["not_null(nope)"]
    assert not missing.success and missing.message == "column 'nope' does not exist (columns: id, amount, country)"
    message = str(info.value)
    assert message.startswith("7 of 8 expectations failed: not_null(id): 3 of 1000 rows unexpected, e.g. [None]; ")
    for part in ("between(amount, 0..10000): 2 of 1000 rows unexpected", "unique(id): 2 of 1000 rows unexpected, "
                 "e.g. [7]", "expect_column_value_lengths_to_be_between(country): 1 of 1000 rows unexpected, "
                 "e.g. ['USA']", "not_null(nope): column 'nope' does not exist"):
        assert part in message
    assert not df.is_cached  # persisted for the validation only


@pytest.mark.spark
def test_spark_clean_data_passes(spark) -> None:
    df = spark.createDataFrame(clean_table())
    report = check(df, ALL)
    assert report.success and report.engine == "spark"
    assert [(o.unexpected_count, o.element_count) for o in report.results] == [(0, N)] * 5 + [(None, N), (0, N)]


@pytest.mark.spark
def test_spark_empty_input_fails_row_count_min_1(spark) -> None:
    df = spark.createDataFrame(clean_table().slice(0, 0)).cache()
    try:
        report = validate(df, [ROW_COUNT, NOT_NULL, IN_SET])
        assert df.is_cached  # a DataFrame the caller cached stays cached
    finally:
        df.unpersist()
    rc, nn, s = report.results
    assert not report.success
    assert (rc.success, rc.observed_value, rc.message) == (False, 0, "observed 0 rows, expected between 1 and 10000000")
    assert (nn.success, nn.unexpected_count, nn.element_count) == (True, 0, 0)
    assert (s.success, s.unexpected_count) == (True, 0)


def _spark_jobs(spark, group: str) -> int:
    return len(spark.sparkContext.statusTracker().getJobIdsForGroup(group))


@pytest.mark.spark
def test_spark_gate_is_one_pass_and_agrees_with_the_spark_engine(spark) -> None:
    """Issue 12 item 4: the gate reads a small Spark batch with a fixed number of Spark jobs (a
    count and one Arrow collect of the named columns), not ~2 Spark jobs per expectation;
    great_expectations' pandas engine evaluates every expectation on the driver, and each outcome
    (success, counts, examples, message) is the one great_expectations' Spark engine gives on the
    same DataFrame."""
    t = dirty_table()
    t = t.append_column("ts", pa.array([datetime.datetime(2025, 1, 1 + i % 28) for i in range(N - 1)]
                                       + [datetime.datetime(2024, 12, 31)], pa.timestamp("us")))
    df = spark.createDataFrame(t)
    items = [*ALL, {"type": "between", "column": "ts", "min": "2025-01-01T00:00:00"},
             {"type": "great_expectations", "expectation": "expect_column_max_to_be_between",
              "kwargs": {"column": "amount", "max_value": 10000}},
             {"type": "great_expectations", "expectation": "expect_table_columns_to_match_set",
              "kwargs": {"column_set": ["id", "amount"], "exact_match": True}},
             {"type": "not_null", "column": "nope"}]
    sc = spark.sparkContext
    try:
        sc.setJobGroup("lancepart-gate-one", "gate")
        validate(df, [NOT_NULL])
        sc.setJobGroup("lancepart-gate-collected", "gate")
        fast = validate(df, items)
        sc.setJobGroup("lancepart-gate-spark", "gate")
        slow = validate(df, items, driver_max_rows=0)
    finally:
        sc.setLocalProperty("spark.jobGroup.id", None)
    assert (fast.gx_engine, slow.gx_engine) == ("pandas", "spark")
    one, many, spark_engine = (_spark_jobs(spark, f"lancepart-gate-{g}") for g in ("one", "collected", "spark"))
    assert many == one <= 4 < spark_engine, (one, many, spark_engine)
    for a, b in zip(fast.results, slow.results, strict=True):
        assert (a.name, a.success, a.unexpected_count, a.element_count, a.observed_value) == \
            (b.name, b.success, b.unexpected_count, b.element_count, b.observed_value), a.name
        assert sorted(a.examples, key=repr) == sorted(b.examples, key=repr), a.name
        assert a.message.split(", e.g.")[0] == b.message.split(", e.g.")[0], a.name
    assert [o.success for o in fast.results][-5:] == [False, False, False, False, False]
    assert str(fast).startswith("quality gate FAILED: 1 of 11 expectations passed (spark -> pandas, ")
    assert not df.is_cached


@pytest.mark.spark
def test_spark_gate_keeps_nan_apart_from_null(spark) -> None:
    """Spark's meaning survives the collect: NaN is a value (not_null passes it), outside any
    range (between counts it), and a null is still only a null."""
    df = spark.createDataFrame(pa.table({"amount": pa.array([1.0, float("nan"), None, -1.0])}))
    items = [{"type": "not_null", "column": "amount"}, {"type": "between", "column": "amount", "min": 0, "max": 10}]
    for report in (validate(df, items), validate(df, items, driver_max_rows=0)):
        nn, bt = report.results
        assert (nn.unexpected_count, nn.examples) == (1, [None]), report.gx_engine
        assert bt.unexpected_count == 2 and -1.0 in bt.examples, report.gx_engine


@pytest.mark.spark
def test_spark_table_level_only_and_empty_input_on_the_driver(spark) -> None:
    """row_count alone collects no column; an empty batch fails row_count min 1 either way."""
    df = spark.createDataFrame(clean_table())
    (rc,) = validate(df, [ROW_COUNT]).results
    assert (rc.success, rc.observed_value, rc.message) == (True, N, "1000 rows")
    empty = spark.createDataFrame(clean_table().slice(0, 0))
    report = validate(empty, [ROW_COUNT, NOT_NULL, IN_SET])
    assert report.gx_engine == "pandas"
    rc, nn, s = report.results
    assert (rc.success, rc.message) == (False, "observed 0 rows, expected between 1 and 10000000")
    assert (nn.success, nn.unexpected_count, nn.element_count) == (True, 0, 0)
    assert (s.success, s.unexpected_count) == (True, 0)


@pytest.mark.spark
def test_spark_batch_arrow_cannot_carry_goes_to_the_spark_engine(spark) -> None:
    """A column type Arrow cannot carry (an interval) makes the collect fail: the gate then runs
    great_expectations' Spark engine, as it always did, instead of failing."""
    df = spark.range(5).selectExpr("id", "make_interval(0, 0, 0, 1) AS gap")
    items = [{"type": "great_expectations", "expectation": "expect_table_column_count_to_equal",
              "kwargs": {"value": 2}}, {"type": "row_count", "min": 1}]
    report = validate(df, items)
    assert report.gx_engine == "spark" and report.success, str(report)
    assert not df.is_cached
