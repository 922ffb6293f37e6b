"""Job configs checked in full (issue 11 item 13): an unknown key anywhere is a ConfigError naming
the key, where it is and the nearest valid key; YAML dates and numbers given for ``batch_id``
become the text as written or a clear error; wrong types are named. Also ``${VAR}`` in storage
values and storage options kept off the command line (item 14)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from lancepart.config import JobConfig
from lancepart.errors import ConfigError

REPO = Path(__file__).resolve().parents[1]


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "job.yaml"
    path.write_text(text)
    return path


@pytest.mark.parametrize(("data", "key", "where", "nearest"), [
    ({"namespace": {"root": "/x", "storage_options": {"aws_secret_access_key": "s3cr3t-value"}}},
     "storage_options", "in namespace", "'storage'"),
    ({"namespace": {"root": "/x"}, "storage_options": {}}, "storage_options", "at the top level",
     "'namespace.storage'"),
    ({"namespace": {"root": "/x"}, "storage": {}}, "storage", "at the top level", "'namespace.storage'"),
    ({"root": "/x", "namespace": {"root": "/x"}}, "root", "at the top level", "'namespace.root'"),
    ({"namespace": {"root": "/x"}, "bacth_id": "b1"}, "bacth_id", "at the top level", "'batch_id'"),
    ({"namespace": {"root": "/x", "schema": [{"name": "a", "type": "int64", "nulable": False}]}},
     "nulable", "in namespace.schema[0]", "'nullable'"),
    ({"namespace": {"root": "/x", "spec": {"id": 1, "feilds": []}}}, "feilds", "in namespace.spec", "'fields'"),
    ({"namespace": {"root": "/x", "spec": {"id": 1, "fields": [{"field_id": "a", "source_id": [1]}]}}},
     "source_id", "in namespace.spec.fields[0]", "'source_ids'"),
    ({"namespace": {"root": "/x"}, "source": {"kind": "parquet", "pth": "/in"}}, "pth", "in source", "'path'"),
    ({"namespace": {"root": "/x"}, "spark": {"confs": {}}}, "confs", "in spark", "'conf'"),
    ({"namespace": {"root": "/x"}, "compact": {"target_rows": 5}}, "target_rows", "in compact",
     "'target_rows_per_fragment'"),
])
def test_unknown_keys_anywhere_name_the_key_where_and_the_nearest(data, key, where, nearest):
    """Issue 11 item 13: ``storage_options:`` instead of ``storage:`` silently dropped the
    credentials; every section (nested ones too) now refuses a key it does not know."""
    with pytest.raises(ConfigError) as exc:
        JobConfig.from_dict(data)
    msg = str(exc.value)
    assert f"unknown key {key!r} {where}; did you mean {nearest}?" in msg, msg
    assert "s3cr3t-value" not in msg


def test_unknown_key_in_a_yaml_file_names_the_file(tmp_path):
    path = _write(tmp_path, "namespace:\n  root: /x\n  storage_options:\n    aws_region: us-east-1\n")
    with pytest.raises(ConfigError, match=r"job\.yaml: unknown key 'storage_options' in namespace; did you mean"):
        JobConfig.load(path)


@pytest.mark.parametrize(("data", "message"), [
    ({"namespace": {"root": 5}}, "namespace.root must be a path or URI string, got int 5"),
    ({"namespace": {"root": "/x", "storage": ["a"]}}, "namespace.storage must be a mapping, got list"),
    ({"namespace": {"root": "/x", "storage": {"k": ["v"]}}}, "namespace.storage.k must be a string, number or bool"),
    ({"namespace": {"root": "/x"}, "source": {"rows": "10"}}, "source.rows must be an integer, got str '10'"),
    ({"namespace": {"root": "/x"}, "source": {"rows": True}}, "source.rows must be an integer, got bool True"),
    ({"namespace": {"root": "/x"}, "source": "data.parquet"}, "source must be a mapping, got str"),
    ({"namespace": {"root": "/x"}, "spark": {"conf": ["a=b"]}}, "spark.conf must be a mapping, got list"),
    ({"namespace": {"root": "/x"}, "expectations": {"type": "unique"}}, "expectations must be a list"),
    ({"namespace": {"root": "/x", "schema": [{"name": "a", "type": "int64", "nullable": "no"}]}},
     "namespace.schema[0].nullable must be true or false, got str 'no'"),
    ({"namespace": {"root": "/x"}, "batch_id": 1.5}, "batch_id must be a string, got float"),
    ({"namespace": {"root": "/x"}, "batch_id": True}, "batch_id must be a string, got bool"),
])
def test_wrong_types_are_named(data, message):
    """Issue 11 item 13: the key, the expected type and what was given."""
    with pytest.raises(ConfigError) as exc:
        JobConfig.from_dict(data)
    assert message in str(exc.value)


@pytest.mark.parametrize(("written", "expected"), [
    ("2025-12-01", "2025-12-01"),           # YAML: a date
    ("20251201", "20251201"),               # YAML: an int
    ("2025-12-01 10:00:00", "2025-12-01 10:00:00"),  # YAML: a timestamp
    ("2025-12-01T10:00:00Z", "2025-12-01T10:00:00Z"),
    ("'0123'", "0123"),                     # quoted: a string already
    ("nightly-7", "nightly-7"),
    ("1e3", "1e3"),                         # YAML 1.1: a string
])
def test_batch_id_is_the_text_as_written(tmp_path, written, expected):
    """Issue 11 item 13: ``batch_id: 2025-12-01`` is the string ``"2025-12-01"`` (YAML made it a
    date, and ``str(date)`` happened to match, but ``20251201`` or a timestamp did not)."""
    path = _write(tmp_path, f"namespace: {{root: /x}}\nbatch_id: {written}\n")
    assert JobConfig.load(path).batch_id == expected


@pytest.mark.parametrize("written", ["0123", "0x1f", "1_000", "+5", "1.5", "yes", "off", ".inf"])
def test_ambiguous_batch_ids_are_refused(tmp_path, written):
    """Numbers YAML reads otherwise than they look (``0123`` is 83) and booleans are refused
    with the fix: quote the value."""
    path = _write(tmp_path, f"namespace: {{root: /x}}\nbatch_id: {written}\n")
    with pytest.raises(ConfigError) as exc:
        JobConfig.load(path)
    assert "batch_id" in str(exc.value) and f'quote it: batch_id: "{written}"' in str(exc.value)


def test_batch_id_template_is_rendered_with_the_logical_date(tmp_path):
    """Issue item 9: one rule for a batch id. ``{logical_date}`` in ``batch_id`` is the config's own
    ``logical_date`` (YYYY-MM-DD), or the run's date when one is given (the Airflow DAG passes
    the run's logical date); a batch id without a placeholder is that id wherever it runs."""
    template = _write(tmp_path, "namespace: {root: /x}\nlogical_date: 2025-12-01\nbatch_id: demo-{logical_date}\n")
    assert JobConfig.load(template).batch_id == "demo-2025-12-01"
    assert JobConfig.load(template, logical_date="2025-12-02").batch_id == "demo-2025-12-02"
    literal = tmp_path / "literal.yaml"
    literal.write_text("namespace: {root: /x}\nbatch_id: demo-2025-12-01\n")
    assert JobConfig.load(literal, logical_date="2025-12-02").batch_id == "demo-2025-12-01"
    other_braces = {"namespace": {"root": "/x"}, "batch_id": "a{1}b{"}  # not a placeholder: literal text
    assert JobConfig.from_dict(other_braces, logical_date="2025-12-02").batch_id == "a{1}b{"
    shipped = JobConfig.load(REPO / "configs" / "demo.yaml")
    assert shipped.batch_id == "demo-2025-12-01"  # what `make demo` has always published


@pytest.mark.parametrize(("data", "run_date", "message"), [
    ({"batch_id": "x-{day}", "logical_date": "2025-12-01"}, None, "unknown placeholder(s) {day}"),
    ({"batch_id": "x-{logical_date}-{run_id}"}, "2025-12-01", "unknown placeholder(s) {run_id}"),
    ({"batch_id": "x-{logical_date}"}, None, "no logical date is given"),
    ({"batch_id": "x-{logical_date}", "logical_date": "12/01/2025"}, None, "logical_date must be a date YYYY-MM-DD"),
    ({"batch_id": "x", "logical_date": "2025-13-01"}, None, "logical_date must be a date YYYY-MM-DD"),
    ({"batch_id": "x-{logical_date}"}, "2025-12-01T00:00:00", "the run's logical date must be a date"),
])
def test_bad_batch_id_templates_are_refused(data, run_date, message):
    with pytest.raises(ConfigError) as exc:
        JobConfig.from_dict({"namespace": {"root": "/x"}, **data}, logical_date=run_date)
    assert message in str(exc.value)


def test_batch_id_from_python_values():
    import datetime as dt

    assert JobConfig.from_dict({"namespace": {"root": "/x"}, "batch_id": dt.date(2025, 12, 1)}).batch_id == "2025-12-01"
    assert JobConfig.from_dict({"namespace": {"root": "/x"}, "batch_id": 20251201}).batch_id == "20251201"


def test_storage_values_from_the_environment(monkeypatch):
    """``${VAR}`` in a storage value is the environment variable (secrets stay out of the file);
    a missing one is named, no value shown; booleans become Lance's ``true``/``false``."""
    monkeypatch.setenv("LP_TEST_SECRET", "s3cr3t-from-env")
    cfg = JobConfig.from_dict({"namespace": {"root": "/x", "storage": {
        "aws_secret_access_key": "${LP_TEST_SECRET}", "aws_endpoint": "http://localhost:9", "allow_http": True,
        "client_max_retries": 0}}})
    assert cfg.namespace.storage_options == {"aws_secret_access_key": "s3cr3t-from-env",
                                             "aws_endpoint": "http://localhost:9", "allow_http": "true",
                                             "client_max_retries": "0"}
    monkeypatch.delenv("LP_TEST_SECRET")
    with pytest.raises(ConfigError, match=r"namespace.storage.aws_secret_access_key refers to \$\{LP_TEST_SECRET\}"):
        JobConfig.from_dict({"namespace": {"root": "/x", "storage": {"aws_secret_access_key": "${LP_TEST_SECRET}"}}})


def test_shipped_configs_are_valid():
    for path in sorted((REPO / "configs").glob("*.yaml")):
        JobConfig.load(path)


def test_cli_refuses_a_config_with_an_unknown_key(tmp_path):
    """The ``lancepart`` command reads ``--config`` through the same checks (it used to read
    only ``namespace.root`` and ``namespace.storage`` and ignore everything else)."""
    cfg = yaml.safe_load((REPO / "configs" / "compact-demo.yaml").read_text())
    cfg["namespace"]["root"] = str(tmp_path / "ns")
    cfg["namespace"]["storage_options"] = cfg["namespace"].pop("storage")
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(cfg))
    cli = Path(sys.executable).with_name("lancepart")
    proc = subprocess.run([str(cli), "--json", "describe", "--config", str(path)], capture_output=True, text=True)
    assert proc.returncode == 2, proc
    err = json.loads(proc.stdout)
    assert err["error"] == "ConfigError" and "unknown key 'storage_options' in namespace" in err["message"]


def test_storage_options_file_and_environment_under_the_config(tmp_path, monkeypatch):
    """Issue 11 item 14: storage options for the jobs without the command line:
    ``$LANCEPART_STORAGE_OPTIONS``, then ``--storage-options-file``, then the config's own
    ``namespace.storage`` (later ones win); a bad file or variable is named, its content never."""
    monkeypatch.setenv("LANCEPART_STORAGE_OPTIONS", json.dumps({"aws_region": "env", "aws_access_key_id": "env-key"}))
    options = tmp_path / "so.yaml"
    options.write_text("aws_access_key_id: file-key\naws_secret_access_key: file-secret-value\nallow_http: true\n")
    path = _write(tmp_path, "namespace:\n  root: /x\n  storage: {aws_region: eu-west-3}\n")
    assert JobConfig.load(path, options).namespace.storage_options == {
        "aws_region": "eu-west-3", "aws_access_key_id": "file-key", "aws_secret_access_key": "file-secret-value",
        "allow_http": "true"}
    options.write_text("- file-secret-value\n")
    with pytest.raises(ConfigError, match="must hold a mapping") as exc:
        JobConfig.load(path, options)
    assert "file-secret-value" not in str(exc.value)
    monkeypatch.setenv("LANCEPART_STORAGE_OPTIONS", "not json file-secret-value")
    with pytest.raises(ConfigError, match=r"\$LANCEPART_STORAGE_OPTIONS must be a JSON object") as exc:
        JobConfig.load(path)
    assert "file-secret-value" not in str(exc.value)


def test_cli_storage_options_order(tmp_path, monkeypatch):
    """The CLI merges $LANCEPART_STORAGE_OPTIONS, then --storage-options-file, then the config's
    namespace.storage, then --storage-option; later ones win (docs/configuration.md)."""
    from lancepart.cli.commands import _merge_common, _target, build_parser

    monkeypatch.setenv("LANCEPART_STORAGE_OPTIONS", json.dumps({"a": "env", "b": "env", "c": "env", "d": "env"}))
    options = tmp_path / "so.json"
    options.write_text(json.dumps({"b": "file", "c": "file", "d": "file"}))
    path = _write(tmp_path, "namespace:\n  root: /x\n  storage: {c: config, d: config}\n")
    args = build_parser().parse_args(["describe", "--config", str(path), "--storage-options-file", str(options),
                                      "--storage-option", "d=flag"])
    _merge_common(args)
    assert _target(args) == ("/x", {"a": "env", "b": "file", "c": "config", "d": "flag"})
