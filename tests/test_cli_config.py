"""The `lancepart` command and job configs (docs/guide.md "Command line")."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from lancepart.cli.commands import EXIT_LANCEPART, EXIT_OK, EXIT_USAGE, main
from lancepart.config import JobConfig
from lancepart.errors import ConfigError

REPO = Path(__file__).resolve().parents[1]


def test_demo_config_parses():
    cfg = JobConfig.load(REPO / "configs" / "demo.yaml")
    assert cfg.namespace.spec.id == 1
    assert [f.field_id for f in cfg.namespace.spec.fields] == ["event_date", "country", "user_bucket"]
    assert cfg.namespace.schema.names == ["id", "event_date", "event_ts", "country", "user_id", "amount"]
    assert cfg.mode == "append" and cfg.source.kind == "generate"


@pytest.mark.parametrize(
    ("patch", "message"),
    [
        ({"mode": "upsert"}, "mode must be 'append' or 'overwrite'"),
        ({"bogus": 1}, "unknown key 'bogus' at the top level"),
        ({"namespace": {"root": ""}}, "namespace.root is required"),
        ({"source": {"kind": "xml"}}, "source.kind must be"),
        ({"namespace": {"root": "/x", "schema": [{"name": "a", "type": "nope"}]}}, "namespace.schema[0] (a)"),
        ({"namespace": {"root": "/x", "spec": {"id": 1, "fields": []}}}, "namespace.spec: partition spec v1 has no"),
    ],
)
def test_bad_configs_name_the_key(patch, message):
    base = {"namespace": {"root": "/tmp/x"}}
    base.update(patch)
    with pytest.raises(ConfigError) as exc:
        JobConfig.from_dict(base)
    assert message in str(exc.value)


def test_cli_create_describe_partitions(tmp_path, capsys):
    cfg = yaml.safe_load((REPO / "configs" / "demo.yaml").read_text())
    cfg["namespace"]["root"] = str(tmp_path / "ns")
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump(cfg))
    assert main(["--json", "create", "--config", str(path)]) == EXIT_OK
    created = json.loads(capsys.readouterr().out)
    assert created["spec_id"] == 1
    assert main(["create", "--config", str(path)]) == EXIT_LANCEPART
    assert "NamespaceExistsError" in capsys.readouterr().err
    assert main(["--json", "describe", str(tmp_path / "ns")]) == EXIT_OK
    desc = json.loads(capsys.readouterr().out)
    assert desc["partitions"] == 0 and desc["specs"]["1"]["fields"][2]["transform"]["num_buckets"] == 4
    assert main(["--json", "partitions", str(tmp_path / "ns")]) == EXIT_OK
    assert json.loads(capsys.readouterr().out) == []
    assert main(["describe", str(tmp_path / "missing")]) == EXIT_LANCEPART
    assert "NamespaceNotFoundError" in capsys.readouterr().err
    assert main(["frobnicate"]) == EXIT_USAGE


def test_console_script_help():
    out = subprocess.run([sys.executable, "-m", "lancepart.cli", "--help"], capture_output=True, text=True, check=True)
    assert "create" in out.stdout and "describe" in out.stdout
