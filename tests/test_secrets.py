"""Secrets stay secret (issue 11 item 14): storage options can reach the ``lancepart`` command
without being on its command line (``--storage-options-file``, ``$LANCEPART_STORAGE_OPTIONS``,
``${VAR}`` in a config), and nothing lancepart prints shows URL userinfo or a secret storage
option value, also when it repeats a Lance error. Real ``lancepart`` processes against moto's S3
on loopback (tests/s3_server.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

from lancepart.errors import StorageUnavailableError
from lancepart.redact import redact, register
from lancepart.util.sample import demo_events
from tests.s3_server import S3Server, moto_s3

REPO = Path(__file__).resolve().parents[1]
CLI = str(Path(sys.executable).with_name("lancepart"))


@pytest.fixture(scope="module")
def s3() -> S3Server:
    with moto_s3(atomic=True) as server:
        yield server


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LANCEPART_")}
    env.update(extra)
    return env


def _run(argv: list[str], env: dict[str, str], secret: str, code: int = 0) -> subprocess.CompletedProcess:
    assert not any(secret in a for a in argv), "the test itself put the secret on the command line"
    proc = subprocess.run([CLI, *argv], env=env, capture_output=True, text=True, timeout=180)
    assert proc.returncode == code, proc.stdout + proc.stderr
    assert secret not in proc.stdout + proc.stderr, f"the secret leaked: {proc.stdout + proc.stderr}"
    return proc


def _config(tmp_path: Path, root: str, storage: dict[str, str], name: str = "job.yaml") -> Path:
    cfg = yaml.safe_load((REPO / "configs" / "demo.yaml").read_text())
    cfg["namespace"]["root"] = root
    cfg["namespace"]["storage"] = storage
    path = tmp_path / name
    path.write_text(yaml.safe_dump(cfg))
    return path


@pytest.mark.slow
def test_cli_takes_storage_options_off_the_command_line_and_never_echoes_them(s3, tmp_path):
    """Issue 11 item 14: create with ``--storage-options-file``, ingest with
    ``$LANCEPART_STORAGE_OPTIONS``, describe with a config whose secret is ``${VAR}``; every
    command succeeds and its output (JSON and text) holds no secret."""
    so, secret = s3.storage_options(), s3.secret
    root = s3.new_root()
    options_file = tmp_path / "s3.json"
    options_file.write_text(json.dumps(so))
    options_file.chmod(0o600)
    public = {k: v for k, v in so.items() if k != "aws_secret_access_key"}
    config = _config(tmp_path, root, {**public, "aws_secret_access_key": "${LP_TEST_S3_SECRET}"})

    created = _run(["--json", "create", "--config", str(_config(tmp_path, root, {}, "create.yaml")),
                    "--storage-options-file", str(options_file)], _env(), secret)
    assert json.loads(created.stdout)["spec_id"] == 1

    data = tmp_path / "events.parquet"
    pq.write_table(demo_events(500, days=2), data)
    ingested = _run(["--json", "ingest", root, str(data), "--batch-id", "b1"],
                    _env(LANCEPART_STORAGE_OPTIONS=json.dumps(so)), secret)
    assert json.loads(ingested.stdout)["rows_written"] == 500

    described = _run(["--json", "describe", "--config", str(config)], _env(LP_TEST_S3_SECRET=secret), secret)
    assert json.loads(described.stdout)["rows"] == 500
    _run(["describe", "--config", str(config)], _env(LP_TEST_S3_SECRET=secret), secret)  # the text form too

    # Lance ignores userinfo in an s3 URL: the root works, and every output shows it masked
    url_root = root.replace("s3://", f"s3://AKIAEXAMPLE:{secret}@")
    for as_json in ([], ["--json"]):
        proc = subprocess.run([CLI, *as_json, "describe", url_root], env=_env(LANCEPART_STORAGE_OPTIONS=json.dumps(so)),
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0 and secret not in proc.stdout + proc.stderr, proc.stdout + proc.stderr
        assert "s3://***@" in proc.stdout


@pytest.mark.slow
def test_failures_never_echo_a_secret(s3, tmp_path):
    """A dead endpoint, credentials in the root URL or in the endpoint URL, and a secret given to
    an option Lance cannot parse: each command fails (exit 2) with a message naming the
    problem, and the secret appears on neither stream, in JSON or text."""
    so, secret = s3.storage_options(), s3.secret
    dead = {**so, "aws_endpoint": "http://127.0.0.1:9", "client_max_retries": "0", "client_retry_timeout": "1"}
    dead_file = tmp_path / "dead.json"
    dead_file.write_text(json.dumps(dead))
    for as_json in ([], ["--json"]):
        failed = _run([*as_json, "describe", s3.new_root(), "--storage-options-file", str(dead_file)], _env(), secret,
                      code=2)
        assert "StorageUnavailableError" in failed.stdout + failed.stderr

        url_root = f"s3://AKIAEXAMPLE:{secret}@{s3.bucket}/ns"  # userinfo in the root (only the test's argv holds it)
        proc = subprocess.run([CLI, *as_json, "describe", url_root], env=_env(LANCEPART_STORAGE_OPTIONS=json.dumps(so)),
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode != 0 and secret not in proc.stdout + proc.stderr, proc.stdout + proc.stderr
        assert "s3://***@" in proc.stdout + proc.stderr

        endpoint = {**dead, "aws_endpoint": f"http://admin:{secret}@127.0.0.1:9"}
        _run([*as_json, "describe", s3.new_root()], _env(LANCEPART_STORAGE_OPTIONS=json.dumps(endpoint)), secret,
             code=2)

        parsed = {**so, "allow_http": secret}  # Lance: failed to parse "<value>" as boolean
        out = _run([*as_json, "describe", s3.new_root()], _env(LANCEPART_STORAGE_OPTIONS=json.dumps(parsed)), secret,
                   code=2)
        assert "failed to parse" in out.stdout + out.stderr


def test_secret_is_not_in_the_process_list(s3, tmp_path):
    """What ``ps -o args`` shows of a running ``lancepart`` given its secret in a file: no secret,
    sampled from its start until it ends (it reads the file, then waits on an endpoint that
    does not answer)."""
    so, secret = s3.storage_options(), s3.secret
    slow = {**so, "aws_endpoint": "http://10.255.255.1:9", "client_max_retries": "0", "connect_timeout": "3s"}
    options_file = tmp_path / "s3.json"
    options_file.write_text(json.dumps(slow))
    proc = subprocess.Popen([CLI, "describe", s3.new_root(), "--storage-options-file", str(options_file)], env=_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        samples = []
        deadline = time.monotonic() + 60
        while proc.poll() is None and time.monotonic() < deadline:
            args = subprocess.run(["ps", "-ww", "-o", "args=", "-p", str(proc.pid)], capture_output=True,
                                  text=True).stdout
            assert secret not in args, args
            samples.append(args)
            time.sleep(0.05)
        assert any("--storage-options-file" in a for a in samples), samples
    finally:
        out, err = proc.communicate(timeout=60)
    assert secret not in out + err


def test_redact_masks_userinfo_and_registered_secrets():
    register({"aws_secret_access_key": 'k3y"with/quote', "aws_region": "us-east-1"})
    assert redact("at s3://AKIA:pw@bucket/x and file:/u:p@localhost/x") == \
        "at s3://***@bucket/x and file:/***@localhost/x"
    assert redact('{"v": "k3y\\"with/quote"} k3y"with/quote') == '{"v": "***"} ***'
    assert redact("region us-east-1, http://host:9/p?a=b@c") == "region us-east-1, http://host:9/p?a=b@c"
    assert redact('Generic Config error: failed to parse "hunter22" as boolean') == \
        'Generic Config error: failed to parse "***" as boolean'


def test_typed_errors_never_hold_a_secret(s3):
    """A lancepart error built from a Lance error text that repeats the endpoint's userinfo."""
    from lancepart import PartitionedNamespace

    secret = "pw-" + s3.secret
    so = {**s3.storage_options(), "aws_endpoint": f"http://admin:{secret}@127.0.0.1:9", "client_max_retries": "0",
          "client_retry_timeout": "1"}
    with pytest.raises(StorageUnavailableError) as e:
        PartitionedNamespace.open(s3.new_root(), storage_options=so)
    assert secret not in str(e.value) and secret not in repr(e.value) and "admin" not in str(e.value)


def test_job_main_redacts_what_it_prints(capfd):
    """The jobs' entry point: a failure that is not a lancepart error is printed (traceback),
    redacted, with exit code 1."""
    from lancepart.job_runner import job_main

    def boom() -> dict:
        raise RuntimeError("cannot reach s3://AKIAJOB:job-secret-123@bucket/ns")

    assert job_main("ingest", boom) == 1
    out, err = capfd.readouterr()
    assert "job-secret-123" not in out + err and "s3://***@bucket/ns" in err


def test_namespace_repr_hides_userinfo(s3):
    """``repr(ns)`` (notebooks, logs) shows a root without its URL userinfo."""
    from lancepart import PartitionedNamespace
    from tests.conftest import EVENTS_SPEC

    schema, root = demo_events(1).schema, s3.new_root()
    PartitionedNamespace.create(root, schema.set(0, schema.field("id").with_nullable(False)), EVENTS_SPEC,
                                storage_options=s3.storage_options())
    with_userinfo = root.replace("s3://", "s3://AKIAREPR:repr-secret-99@")
    try:
        ns = PartitionedNamespace.open(with_userinfo, storage_options=s3.storage_options())
    except Exception as e:  # Lance may refuse userinfo in an s3 URL; then the error must not show it
        assert "repr-secret-99" not in str(e)
        pytest.skip(f"Lance does not open {type(e).__name__}")
    assert "repr-secret-99" not in repr(ns) and "s3://***@" in repr(ns)
