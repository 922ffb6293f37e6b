"""The ``lancepart`` console script, run as a real process (docs/guide.md "Command line").

Round trip create -> ingest -> describe -> compact -> cleanup -> partitions/explain on a real
namespace, the exit codes scripts rely on (0 ok, 1 unexpected, 2 lancepart error, 64 usage,
75 commit conflict), JSON output and the help of every command.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.csv as pcsv
import pyarrow.parquet as pq
import pytest

from lancepart.cli.commands import EXIT_LANCEPART, EXIT_OK, EXIT_RETRY, EXIT_USAGE, format_duration, parse_duration
from lancepart.util.sample import demo_events
from tests.conftest import EVENTS_SPEC, expected_keys
from tests.procs import release, wait_until_reached

_SCRIPT = Path(sys.executable).with_name("lancepart")
LANCEPART = [str(_SCRIPT)] if _SCRIPT.exists() else [sys.executable, "-m", "lancepart.cli"]
COMMANDS = ("create", "describe", "partitions", "explain", "ingest", "compact", "cleanup", "evolve", "migrate",
            "index", "search")
SCHEMA = [{"name": "id", "type": "int64", "nullable": False}, {"name": "event_date", "type": "date32"},
          {"name": "event_ts", "type": "timestamp"}, {"name": "country", "type": "utf8"},
          {"name": "user_id", "type": "int64"}, {"name": "amount", "type": "float64"}]


def lp(*args: str, code: int | None = EXIT_OK, env: dict[str, str] | None = None,
       cwd: Path | None = None) -> subprocess.CompletedProcess:
    """Run the console script; check its exit code unless ``code`` is None."""
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("LANCEPART_")}
    full_env.update(env or {})
    proc = subprocess.run([*LANCEPART, *args], capture_output=True, text=True, env=full_env, cwd=cwd, timeout=300)
    if code is not None:
        assert proc.returncode == code, f"lancepart {' '.join(args)} -> {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc


def lp_json(*args: str, **kw) -> dict | list:
    return json.loads(lp("--json", *args, **kw).stdout)


def call(capsys, *args: str) -> tuple[int, str, str]:
    """``lancepart.cli.main`` in this process (the same code as the console script, without the
    second or two a process start costs); returns (exit code, stdout, stderr)."""
    from lancepart.cli import main

    capsys.readouterr()
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def write_inputs(data: pa.Table, tmp_path: Path) -> list[str]:
    """``data`` split over one file per input format (dates and timestamps as text in CSV and JSON)."""
    parts = [data.slice(0, 2500), data.slice(2500, 1500), data.slice(4000, 1000), data.slice(5000)]
    paths = [tmp_path / "a.parquet", tmp_path / "b.csv", tmp_path / "c.jsonl", tmp_path / "d.arrows"]
    pq.write_table(parts[0], paths[0])
    pcsv.write_csv(parts[1], paths[1])
    records = parts[2].to_pylist()
    with open(paths[2], "w") as f:
        for r in records:
            f.write(json.dumps({**r, "event_date": str(r["event_date"]), "event_ts": r["event_ts"].isoformat(sep=" ")})
                    + "\n")
    with pa.OSFile(str(paths[3]), "wb") as sink, pa.ipc.new_stream(sink, parts[3].schema) as w:
        for batch in parts[3].to_batches(max_chunksize=300):
            w.write_batch(batch)
    return [str(p) for p in (paths[2], paths[0], paths[1], paths[3])]  # JSON first: its schema leads


@pytest.fixture
def made(tmp_path) -> Path:
    """An empty namespace made with ``lancepart create ROOT --schema FILE --spec JSON``."""
    root = tmp_path / "ns"
    (tmp_path / "schema.json").write_text(json.dumps(SCHEMA))
    out = lp_json("create", str(root), "--schema", str(tmp_path / "schema.json"), "--spec", json.dumps(EVENTS_SPEC))
    assert out["spec_id"] == 1 and out["columns"] == [c["name"] for c in SCHEMA]
    return root


@pytest.mark.slow
def test_round_trip(made, tmp_path, capsys):
    """create -> ingest (Parquet, CSV, JSON, Arrow IPC in one commit) -> describe -> rerun of the
    batch id -> compact -> cleanup -> partitions / explain; the data is published exactly once
    and stays identical throughout (spec "Transaction", "Partition Pruning")."""
    root = str(made)
    data = demo_events(6000, days=3)
    files = write_inputs(data, tmp_path)
    keys = Counter(expected_keys(data))

    ingest = lp("ingest", root, *files, "--batch-id", "day-1", "--chunk-rows", "2000")
    assert "published 6000 rows from 4 file(s)" in ingest.stdout
    assert "rows read" in ingest.stderr  # progress goes to stderr
    assert lp_json("ingest", root, files[0], "--batch-id", "day-1")["skipped"] is True  # exactly once

    desc = lp_json("describe", root)
    assert desc["rows"] == 6000 and desc["partitions"] == len(keys) == len(desc["tables"])
    assert sorted(t["rows"] for t in desc["tables"]) == sorted(keys.values())
    assert all(t["bytes"] > 0 and t["versions"] == 1 for t in desc["tables"])  # new tables are born with their rows
    assert desc["bytes"] == sum(t["bytes"] for t in desc["tables"]) + desc["manifest"]["bytes"]
    assert desc["versions"] == sum(t["versions"] for t in desc["tables"]) + desc["manifest"]["versions"]
    assert desc["specs"]["1"] == EVENTS_SPEC and [f["name"] for f in desc["schema"]["fields"]] == data.column_names

    compacted = lp_json("compact", root, "--target-rows-per-fragment", "100000")
    assert compacted["details"]["fragments_after"] < compacted["details"]["fragments_before"]
    assert compacted["manifest_version"] > desc["manifest_version"]
    assert lp_json("describe", root)["rows"] == 6000

    dry = lp_json("cleanup", root, "--older-than", "0", "--allow-short-retention", "--dry-run")
    assert dry["dry_run"] is True and dry["versions_removed"] > 0
    cleaned = lp_json("cleanup", root, "--older-than", "0", "--allow-short-retention")
    assert cleaned["versions_removed"] > 0 and cleaned["bytes_removed"] > 0
    after = lp_json("describe", root)
    assert after["rows"] == 6000 and all(t["versions"] == 1 for t in after["tables"])
    assert after["bytes"] < desc["bytes"]

    from lancepart import PartitionedNamespace

    got = PartitionedNamespace.open(root).to_table().sort_by("id")
    assert got.equals(data.cast(got.schema))  # every value survived four formats, compaction and cleanup

    day = data.column("event_date")[0]
    flt = f"event_date = DATE '{day}'"
    parts = lp_json("partitions", root, "--filter", flt)
    assert len(parts) == sum(1 for k in keys if k[0] == day.as_py())
    assert all(p["values"]["event_date"] == str(day) for p in parts)
    explained = lp_json("explain", root, flt)
    assert explained["kept"] and "partition_field_event_date" in explained["manifest_sql"]
    assert len(call(capsys, "partitions", root)[1].splitlines()) == len(keys)  # text: one line per partition
    assert "kept" in call(capsys, "explain", root, flt)[1]


def test_ingest_overwrite_and_config_root(made, tmp_path):
    """``--mode overwrite`` replaces exactly the partitions the input touches (docs/guide.md "Writing"),
    and ``--config`` stands in for ROOT."""
    root = str(made)
    data = demo_events(3000, days=3)
    pq.write_table(data, tmp_path / "all.parquet")
    lp("ingest", root, str(tmp_path / "all.parquet"), "-q")
    day = data.column("event_date")[0].as_py()
    one_day = data.filter(pa.compute.equal(data.column("event_date"), pa.scalar(day, pa.date32()))).slice(0, 10)
    pq.write_table(one_day, tmp_path / "day.parquet")
    (tmp_path / "job.yaml").write_text(f"namespace:\n  root: {root}\n")
    job = str(tmp_path / "job.yaml")
    out = lp_json("ingest", "--config", job, str(tmp_path / "day.parquet"), "--mode", "overwrite")
    assert out["rows_written"] == 10 and out["root"] == root
    desc = lp_json("describe", "--config", job)
    touched = set(expected_keys(one_day))  # (event_date, bucket) partitions the 10 rows fall into
    untouched = sum(1 for k in expected_keys(data) if k not in touched)
    assert 0 < untouched < data.num_rows - 10
    assert desc["rows"] == untouched + 10


def test_evolve_then_describe(made, capsys):
    """``evolve`` adds spec v2 (spec "Partition Evolution"); running it again changes nothing."""
    root = str(made)
    fields = [{"source_ids": [1], "transform": {"type": "month"}, "result_type": {"type": "int32"}}]
    out = lp_json("evolve", root, "--spec", json.dumps({"fields": fields}))
    assert out["spec_id"] == 2 and out["created"] is True
    code, again, _ = call(capsys, "--json", "evolve", root, "--spec", json.dumps(fields))
    assert code == EXIT_OK and json.loads(again)["spec_id"] == 2 and json.loads(again)["created"] is False
    code, desc, _ = call(capsys, "describe", root, "--json")
    assert json.loads(desc)["current_spec"] == 2 and set(json.loads(desc)["specs"]) == {"1", "2"}
    text = call(capsys, "describe", root)[1]
    assert "spec v2 (current)" in text and "month(event_date)" in text
    code, bad, _ = call(capsys, "--json", "evolve", root, "--spec", '{"id": 7, "fields": []}')
    assert code == EXIT_LANCEPART and "next spec version" in json.loads(bad)["message"]


def test_migrate_registers_v1_tables(made, capsys):
    """``migrate`` registers a V1 ``<name>.lance`` table in ``__manifest`` once (spec "Migration
    from V1 to V2"); a dry run changes nothing and a rerun finds it registered."""
    import lance

    root = str(made)
    lance.write_dataset(pa.table({"a": [1, 2]}), f"{root}/legacy.lance")
    code, out, _ = call(capsys, "migrate", root, "--dry-run")
    assert code == EXIT_OK and "would register 1 V1 tables" in out
    first = lp_json("migrate", root)
    assert first["registered"] == {"legacy": 1} and first["dry_run"] is False
    again = json.loads(call(capsys, "--json", "migrate", root)[1])
    assert again["already_registered"] == ["legacy"] and again["registered"] == {}
    assert again["manifest_version"] == first["manifest_version"]


def test_exit_codes_of_the_console_script(made, tmp_path):
    """The process exit codes scripts rely on: 64 usage, 2 a lancepart error naming the
    problem, and never a secret on either stream."""
    root = str(made)
    assert "usage" in lp(code=EXIT_USAGE).stderr
    assert "invalid choice" in lp("frobnicate", code=EXIT_USAGE).stderr
    assert "no_such_column" in lp("partitions", root, "--filter", "no_such_column > 1", code=EXIT_LANCEPART).stderr
    secret = "s3cr3t-value-never-printed"
    missing = lp("describe", str(tmp_path / "nope"), "--storage-option", f"aws_secret_access_key={secret}",
                 code=EXIT_LANCEPART)
    assert "NamespaceNotFoundError" in missing.stderr and str(tmp_path / "nope") in missing.stderr
    assert secret not in missing.stdout + missing.stderr
    assert secret not in lp("describe", root, "--storage-option", secret, code=EXIT_USAGE).stderr


def test_exit_codes(made, tmp_path, capsys, monkeypatch):
    """Every failure class maps to its exit code with a message that names the problem."""
    root = str(made)
    monkeypatch.delenv("LANCEPART_STORAGE_OPTIONS", raising=False)
    usage = [["describe", root, "--bogus"], ["describe"], ["cleanup", root, "--older-than", "7x"], ["ingest", root],
             ["ingest", root, "x.parquet", "--chunk-rows", "0"], ["compact", root, "--max-retries", "-1"],
             ["create", root], ["evolve", root]]
    for args in usage:
        assert call(capsys, *args)[0] == EXIT_USAGE, args
    assert "give the namespace ROOT" in call(capsys, "describe")[2]
    assert "not a duration" in call(capsys, "cleanup", root, "--older-than", "7x")[2]

    def failure(*args: str) -> str:
        code, _, err = call(capsys, *args)
        assert code == EXIT_LANCEPART, (args, err)
        return err

    assert "not a valid SQL" in failure("explain", root, "event_date = = 3")
    assert "NamespaceExistsError" in failure("create", root, "--schema", json.dumps(SCHEMA), "--spec",
                                             json.dumps(EVENTS_SPEC))
    assert "does not exist" in failure("ingest", root, str(tmp_path / "none.parquet"))
    (tmp_path / "x.txt").write_text("a,b\n")
    assert "--format" in failure("ingest", root, str(tmp_path / "x.txt"))
    pq.write_table(pa.table({"id": [1], "event_date": ["not a date"]}), tmp_path / "bad.parquet")
    mismatch = failure("ingest", root, str(tmp_path / "bad.parquet"))
    assert "SchemaMismatchError" in mismatch and "event_date" in mismatch
    pq.write_table(pa.table({"id": [1], "amount": [1.0]}), tmp_path / "other.parquet")
    pq.write_table(pa.table({"id": [1], "country": ["US"]}), tmp_path / "one.parquet")
    assert "same columns" in failure("ingest", root, str(tmp_path / "one.parquet"), str(tmp_path / "other.parquet"))
    assert "not valid JSON" in failure("evolve", root, "--spec", "{bad")
    assert "neither a file" in failure("evolve", root, "--spec", "no-such-file.json")
    assert "does not exist" in failure("compact", "--config", str(tmp_path / "none.yaml"))
    assert lp_json("describe", root, "--no-sizes")["partitions"] == 0  # none of it published anything

    secret = "s3cr3t-value-never-printed"
    monkeypatch.setenv("LANCEPART_STORAGE_OPTIONS", secret)
    code, out, err = call(capsys, "describe", root)
    assert code == EXIT_USAGE and secret not in out + err and "LANCEPART_STORAGE_OPTIONS" in err
    monkeypatch.setenv("LANCEPART_STORAGE_OPTIONS", '{"k": "v"}')
    assert call(capsys, "--json", "describe", root, "--no-sizes")[0] == EXIT_OK


def test_json_errors_are_parseable(tmp_path, capsys):
    """With ``--json`` stdout is one JSON document on failure too, carrying the exit code."""
    err = json.loads(lp("--json", "describe", str(tmp_path / "nope"), code=EXIT_LANCEPART).stdout)
    assert err["error"] == "NamespaceNotFoundError" and err["exit_code"] == EXIT_LANCEPART
    code, out, _ = call(capsys, "describe", "--json")
    assert code == EXIT_USAGE and json.loads(out)["exit_code"] == EXIT_USAGE
    code, out, _ = call(capsys, "--json", "nope")
    assert code == EXIT_USAGE and json.loads(out)["error"] == "usage"


def test_commit_conflict_exits_75(made, tmp_path):
    """Two ingests publishing at the same moment with ``--max-retries 0``: one wins, the other
    gets CommitConflictError, exit code 75 (retryable) and publishes nothing (spec "Transaction")."""
    root = str(made)
    data = demo_events(200, days=1)
    pq.write_table(data, tmp_path / "a.parquet")
    lp("ingest", root, str(tmp_path / "a.parquet"), "-q")  # the partitions exist, so no reservation races
    env = {k: v for k, v in os.environ.items() if not k.startswith("LANCEPART_")}
    go = [str(tmp_path / f"go{i}") for i in range(2)]
    procs = [subprocess.Popen([*LANCEPART, "--json", "ingest", root, str(tmp_path / "a.parquet"), "--max-retries",
                               "0", "--batch-id", f"b{i}"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, env={**env, "LANCEPART_FAULT": f"before_manifest_commit:wait:{go[i]}"})
             for i in range(2)]
    for g, p in zip(go, procs, strict=True):
        wait_until_reached(g, p)  # both committed their tables on the same snapshot and stand before publishing
    for g in go:
        release(g)
    results = []
    for p in procs:
        out, _ = p.communicate(timeout=300)
        results.append((p.returncode, out))
    assert sorted(code for code, _ in results) == [EXIT_OK, EXIT_RETRY], results
    loser = json.loads(next(out for code, out in results if code == EXIT_RETRY))
    assert loser["error"] == "CommitConflictError" and "retryable" in loser["message"]
    assert lp_json("describe", root, "--no-sizes")["partitions"] > 0
    from lancepart import PartitionedNamespace

    assert PartitionedNamespace.open(root).to_table(columns=["id"]).num_rows == 2 * data.num_rows  # one of two


@pytest.mark.parametrize("command", COMMANDS)
def test_help_for_every_command(command, capsys):
    """Every command answers ``--help`` with exit 0, its usage and the exit codes."""
    code, out, _ = call(capsys, command, "--help")
    assert code == EXIT_OK
    assert out.startswith(f"usage: lancepart {command}") and "--json" in out and "64 bad usage" in out


def test_top_level_help_and_version():
    out = lp("--help").stdout
    assert all(c in out for c in COMMANDS) and "75" in out
    from lancepart import __version__

    assert lp("--version").stdout.strip() == f"lancepart {__version__}"


@pytest.mark.parametrize(("text", "seconds"), [("7d", 604800), ("36h", 129600), ("1d12h", 129600), ("90m", 5400),
                                                ("45s", 45), ("2w", 1209600), ("0", 0), ("1.5h", 5400)])
def test_durations(text, seconds):
    assert parse_duration(text).total_seconds() == seconds
    assert parse_duration(format_duration(parse_duration(text))) == parse_duration(text)


@pytest.fixture
def broken(tmp_path) -> tuple[str, str, str]:
    """A namespace written in two batches (so compaction has work), with an index declared,
    whose first partition table's directory was then deleted by hand (``rm -rf``):
    (root, object_id, directory)."""
    import shutil

    from lancepart import PartitionedNamespace

    root = str(tmp_path / "ns")
    ns = PartitionedNamespace.create(root, demo_events(10).schema, EVENTS_SPEC)
    data = demo_events(3000, days=3)
    ns.write(data.slice(0, 1500))
    ns.write(data.slice(1500))
    ns.create_index("amount", "BTREE", min_rows=0)
    victim = ns.partitions()[0]
    gone = os.path.join(root, victim.location)
    shutil.rmtree(gone)
    return root, victim.object_id, gone


def test_maintenance_of_a_namespace_with_a_deleted_table_directory(broken, capsys):
    """A partition table directory removed by hand: compact and cleanup do the rest and exit 3
    naming the table, its path and a typed error (not Lance's raw ValueError); the commands
    that publish all or nothing (delete, index create) and describe exit 2 with a typed error
    naming the table; verify exits 3 listing it."""
    root, oid, gone = broken

    def run(*args: str) -> tuple[int, str]:
        code, out, err = call(capsys, *args)
        return code, out + err

    code, out = run("--json", "compact", root, "-q")
    assert code == 3, out
    result = json.loads(out[:out.rindex("}") + 1])
    assert list(result["failures"]) == [oid]
    assert result["failures"][oid].startswith(("CorruptTableError", "DataFilesMissingError")) and gone in out
    assert result["partitions_touched"] > 0 and "nothing was published" not in out  # the others were compacted
    code, out = run("cleanup", root)
    assert code == 3 and oid in out and gone in out and "ValueError" not in out, out
    assert "DataFilesMissingError" in out or "CorruptTableError" in out
    for args in (("delete", root, "--filter", "id = 5"), ("index", root, "create", "user_id", "BTREE"),
                 ("describe", root)):
        code, out = run(*args)
        assert code == EXIT_LANCEPART, (args, out)
        assert oid in out and gone in out and ("DataFilesMissingError" in out or "CorruptTableError" in out), out
    code, out = run("verify", root)
    assert code == 3 and "table_unreadable" in out and oid in out


@pytest.mark.parametrize("args", [
    ["describe"], ["partitions"], ["explain", "id = 1"], ["history"], ["compact"], ["cleanup"], ["verify"],
    ["verify", "--deep"], ["delete", "--filter", "id = 1"], ["drop-partitions", "--filter", "id = 1"],
    ["index", "list"], ["rollback", "--version", "1"], ["alter", "--add", "a:int64"], ["migrate"], ["repair"],
    ["evolve", "--spec", "[]"]], ids=lambda a: "-".join(a[:2]))
def test_a_namespace_that_does_not_exist_is_exit_2_for_every_command(args, tmp_path, capsys):
    """Exit 2 and NamespaceNotFoundError naming the root, whatever the command (verify exited 3,
    "found problems", for a root that does not exist at all)."""
    missing = str(tmp_path / "nope")
    code, out, err = call(capsys, args[0], missing, *args[1:])
    assert code == EXIT_LANCEPART, (args, code, out, err)
    assert f"NamespaceNotFoundError: no __manifest table at {missing}/__manifest" in err
    code, out, _ = call(capsys, "--json", args[0], missing, *args[1:])
    assert code == EXIT_LANCEPART and json.loads(out)["error"] == "NamespaceNotFoundError"


def test_explain_without_a_filter_explains_the_full_scan(made, tmp_path, capsys):
    """``lancepart explain ROOT`` (no filter) explains the unfiltered scan: every partition kept,
    none pruned (it said "give the namespace ROOT"); ``--filter`` works as in ``partitions``,
    and with ``--config`` the one positional is the filter, as before."""
    root = str(made)
    data = demo_events(2000, days=3)
    pq.write_table(data, tmp_path / "in.parquet")
    lp("ingest", root, str(tmp_path / "in.parquet"), "-q")
    total = len(set(expected_keys(data)))
    code, out, err = call(capsys, "explain", root)
    assert code == EXIT_OK, err
    assert "filter: (none)" in out and f"kept {total} of {total} partition tables, pruned 0" in out
    code, out, _ = call(capsys, "--json", "explain", root)
    doc = json.loads(out)
    assert code == EXIT_OK and doc["filter"] is None and doc["kept"] == {"1": total} and doc["pruned"] == {"1": 0}
    day = data.column("event_date")[0]
    flt = f"event_date = DATE '{day}'"
    by_option = json.loads(call(capsys, "--json", "explain", root, "--filter", flt)[1])
    assert by_option == json.loads(call(capsys, "--json", "explain", root, flt)[1])
    assert 0 < by_option["kept"]["1"] < total
    (tmp_path / "job.yaml").write_text(f"namespace:\n  root: {root}\n")
    assert json.loads(call(capsys, "--json", "explain", "--config", str(tmp_path / "job.yaml"), flt)[1]) == by_option
    assert call(capsys, "explain", root, flt, "--filter", flt)[0] == EXIT_USAGE


def test_index_takes_the_action_before_or_after_root(made, tmp_path, capsys):
    """``lancepart index list ROOT`` works as ``lancepart index ROOT list`` does (it was refused:
    "invalid choice"), for create and drop too; the usage shows both orders."""
    root = str(made)
    pq.write_table(demo_events(2000, days=2), tmp_path / "in.parquet")
    lp("ingest", root, str(tmp_path / "in.parquet"), "-q")
    code, out, err = call(capsys, "--json", "index", "create", root, "amount", "BTREE", "--min-rows", "0")
    assert code == EXIT_OK, err
    assert json.loads(out)["partitions_touched"] > 0
    listed = call(capsys, "--json", "index", "list", root)
    assert listed[0] == EXIT_OK, listed[2]
    assert listed[1] == call(capsys, "--json", "index", root, "list")[1]
    assert [d["name"] for d in json.loads(listed[1])["indexes"]] == ["amount_btree"]
    (tmp_path / "job.yaml").write_text(f"namespace:\n  root: {root}\n")
    assert call(capsys, "--json", "index", "--config", str(tmp_path / "job.yaml"), "list")[1] == listed[1]
    code, out, err = call(capsys, "index", "drop", root, "amount_btree")
    assert code == EXIT_OK, err
    assert "no index declared" in call(capsys, "index", root, "list")[1]
    code, _, err = call(capsys, "index", root, "frobnicate")
    assert code == EXIT_USAGE and "index ROOT list" in err and "index list ROOT" in err
    assert call(capsys, "index", "list", root, "extra")[0] == EXIT_USAGE
    usage = call(capsys, "index", "--help")[1]
    assert "lancepart index ROOT {create,drop,list}" in usage and "lancepart index {create,drop,list} ROOT" in usage


def test_the_readme_lists_every_command():
    """README "Ways in" shows every subcommand of the console script, one line each."""
    from lancepart.cli.commands import build_parser

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    missing = [name for name in sub.choices if f"\nlancepart {name} " not in readme]
    assert not missing, f"README.md does not show: {missing}"


def test_storage_options_on_a_local_root_are_named_as_ignored(made, caplog):
    """Lance ignores object-store options on a local path: the command says so on stderr, naming
    the keys (never the values), and lancepart's own ``lancepart_*`` options are not named."""
    err = lp("describe", str(made), "--no-sizes", "--storage-option", "aws_region=eu-west-1",
             "--storage-option", "aws_secret_access_key=hunter2").stderr
    assert "aws_region, aws_secret_access_key are ignored" in err and "local path" in err and "hunter2" not in err
    from lancepart import PartitionedNamespace

    with caplog.at_level("WARNING", logger="lancepart.manifest"):
        PartitionedNamespace.open(str(made), storage_options={"lancepart_commit_lock_dir": str(made) + ".locks"})
        assert "are ignored" not in caplog.text
        PartitionedNamespace.open(str(made), storage_options={"region": "x"})
    assert "storage options region are ignored" in caplog.text
