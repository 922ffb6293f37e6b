"""moto's S3 in server mode on loopback, for the object-store tests (tests/test_object_store.py).

The server runs in its own process (``python tests/s3_server.py``): it binds 127.0.0.1 on a
free port, prints ``PORT <n>`` and serves until it is terminated. Running it out of
process keeps Lance's blocking HTTP calls in the test process from ever contending with the
server for the GIL, and lets writer subprocesses and Spark executors reach the same store.

Lance commits a table version by writing ``_versions/<n>.manifest`` with ``If-None-Match: *``
and relies on the store to let exactly one of two racing writers create it. moto 5.2 checks
the header and then stores the object in two steps that nothing serialises (S3Response.put_object:
``get_object`` ... ``backend.put_object``), so two racing conditional puts can both succeed
(docs/object-storage.md has the evidence). Options:

``--atomic``: serialise every conditional request (``If-None-Match``/``If-Match``) under one
lock, which gives moto the put-if-absent semantics AWS S3, MinIO, R2 and GCS guarantee;
the fixtures use it unless a test is about the race itself.
``--put-delay S``: sleep S seconds inside moto's check-then-store window for
``_versions/`` keys. ``S3Server.stall(delay=, meet=, once=)`` changes this at run time;
``meet`` holds a put in the window until a second put of the same key joins it (or the time
is up), so racing commits overlap deterministically.
``--log FILE``: append one JSON line per mutating request (method, path, conditional headers,
response status): the evidence that Lance commits with ``If-None-Match: *`` and which of two
racing conditional puts the server refused.
``--switch-interval S``: ``sys.setswitchinterval`` for the server (more preemption).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

REGION = "us-east-1"
ACCESS_KEY = "lancepart-test-access-key"


def _logging_app(app, path: str):
    lock = threading.Lock()

    def wrapped(environ, start_response):
        method = environ.get("REQUEST_METHOD")
        if method not in ("PUT", "POST", "DELETE"):
            return app(environ, start_response)
        record = {"start": round(time.time(), 3), "method": method, "path": environ.get("PATH_INFO"),
                  "query": environ.get("QUERY_STRING", ""),
                  "if_none_match": environ.get("HTTP_IF_NONE_MATCH"), "if_match": environ.get("HTTP_IF_MATCH")}

        def start(status, headers, exc_info=None):
            record["status"], record["done"] = int(status.split()[0]), round(time.time(), 3)
            with lock, open(path, "a") as f:
                f.write(json.dumps(record) + "\n")
            return start_response(status, headers, exc_info)

        return app(environ, start)

    return wrapped


def _atomic_app(app):
    """Run conditional requests one at a time: moto's check and store then act as one step."""
    lock = threading.Lock()

    def wrapped(environ, start_response):
        if environ.get("HTTP_IF_NONE_MATCH") is None and environ.get("HTTP_IF_MATCH") is None:
            return app(environ, start_response)
        with lock:
            return list(app(environ, start_response))

    return wrapped


# Stalls of _versions/ puts, inside moto's window between the If-None-Match check and the
# store; set at start (--put-delay) or at any time with GET /_lancepart/stall?delay=S&meet=S.
STALL = {"delay": 0.0, "meet": 0.0, "once": 0.0}


def _stall_version_puts() -> None:
    """``delay``: sleep that long. ``meet``: wait up to that long until a second put of the same
    key is in the window too, so two racing commits overlap whatever the machine's load;
    ``once``: stop meeting after the first pair met.

    After a meeting the put that waited stores one second after the other: moto disposes the
    body of an object it replaces, and if that happens while the other request is still
    computing its response (the ETag) it answers 500 ("I/O operation on closed file"); the
    client retries, gets 412 and the race looks lost for a reason that has nothing to do
    with conditional writes."""
    from moto.s3.models import S3Backend

    put_object = S3Backend.put_object
    arrived: Counter = Counter()
    cond = threading.Condition()

    def stalled_put_object(self, bucket_name, key_name, *args, **kwargs):
        if "/_versions/" in key_name:
            if STALL["delay"]:
                time.sleep(STALL["delay"])
            if STALL["meet"]:
                key = (bucket_name, key_name)
                with cond:
                    arrived[key] += 1
                    first = arrived[key] == 1
                    cond.notify_all()
                    met = cond.wait_for(lambda: arrived[key] >= 2, timeout=STALL["meet"])
                    if met and STALL["once"]:
                        STALL["meet"] = 0.0
                if met and first:
                    time.sleep(1.0)
        return put_object(self, bucket_name, key_name, *args, **kwargs)

    S3Backend.put_object = stalled_put_object


def _control_app(app):
    def wrapped(environ, start_response):
        if environ.get("PATH_INFO") != "/_lancepart/stall":
            return app(environ, start_response)
        for k, v in urllib.parse.parse_qs(environ.get("QUERY_STRING", "")).items():
            if k in STALL:
                STALL[k] = float(v[0])
        start_response("200 OK", [("Content-Type", "application/json")])
        return [json.dumps(STALL).encode()]

    return wrapped


def serve(log: str | None = None, atomic: bool = False, put_delay: float = 0.0,
          switch_interval: float | None = None) -> None:
    from moto.moto_server.werkzeug_app import DomainDispatcherApplication, MotoRequestHandler, create_backend_app
    from werkzeug.serving import make_server

    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    if switch_interval:  # preempt request threads more often: exposes check-then-act races sooner
        sys.setswitchinterval(switch_interval)
    STALL["delay"] = put_delay
    _stall_version_puts()
    app = DomainDispatcherApplication(create_backend_app)
    if atomic:
        app = _atomic_app(app)
    if log:
        app = _logging_app(app, log)
    app = _control_app(app)
    server = make_server("127.0.0.1", 0, app, threaded=True, request_handler=MotoRequestHandler)
    print(f"PORT {server.server_address[1]}", flush=True)
    os.dup2(os.open(os.devnull, os.O_WRONLY), 1)  # nobody reads the pipe after the port line
    server.serve_forever()


@dataclass
class S3Server:
    """A running S3 server process and one bucket in it: moto (``kind="moto"``, here) or
    SeaweedFS (``kind="seaweedfs"``, tests/seaweedfs_server.py; no request log, no stalls)."""

    proc: subprocess.Popen
    endpoint: str
    bucket: str
    secret: str  # random per server: the tests grep for it to prove it never leaks
    log: str | None = None
    kind: str = "moto"

    def storage_options(self) -> dict[str, str]:
        """Lance (object_store) options for this endpoint: static keys, plain HTTP, path-style URLs."""
        return {
            "aws_endpoint": self.endpoint,
            "aws_access_key_id": ACCESS_KEY,
            "aws_secret_access_key": self.secret,
            "aws_region": REGION,
            "allow_http": "true",
            "aws_virtual_hosted_style_request": "false",
        }

    def stall(self, delay: float = 0.0, meet: float = 0.0, once: bool = False) -> None:
        """Set the server's stalls of ``_versions/`` puts (0 turns them off); moto only."""
        assert self.kind == "moto", "only the moto test server can stall puts"
        query = urllib.parse.urlencode({"delay": delay, "meet": meet, "once": float(once)})
        with urllib.request.urlopen(f"{self.endpoint}/_lancepart/stall?{query}", timeout=10) as r:
            assert json.loads(r.read()) == {"delay": delay, "meet": meet, "once": float(once)}

    def client(self):
        import boto3

        return boto3.client("s3", endpoint_url=self.endpoint, aws_access_key_id=ACCESS_KEY,
                            aws_secret_access_key=self.secret, region_name=REGION)

    def new_root(self) -> str:
        """A fresh namespace root in the bucket: ``s3://<bucket>/ns-<uuid>``."""
        return f"s3://{self.bucket}/ns-{uuid.uuid4().hex[:12]}"

    def requests(self) -> list[dict]:
        if not self.log or not os.path.exists(self.log):
            return []
        return [json.loads(line) for line in Path(self.log).read_text().splitlines() if line]


@contextmanager
def moto_s3(*, atomic: bool = True, log: str | None = None, put_delay: float = 0.0,
            switch_interval: float | None = None, timeout: float = 60.0) -> Iterator[S3Server]:
    """Start the server, create a bucket, yield; terminate the server at the end."""
    cmd = [sys.executable, str(Path(__file__).resolve()), *(["--atomic"] if atomic else []),
           *(["--log", log] if log else []), *(["--put-delay", str(put_delay)] if put_delay else []),
           *(["--switch-interval", str(switch_interval)] if switch_interval else [])]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        line = ""
        timer = threading.Timer(timeout, proc.kill)
        timer.start()
        try:
            line = proc.stdout.readline() if proc.stdout else ""
        finally:
            timer.cancel()
        if not line.startswith("PORT "):
            raise RuntimeError(f"moto server did not start (exit code {proc.poll()})")
        server = S3Server(proc=proc, endpoint=f"http://127.0.0.1:{int(line.split()[1])}",
                          bucket=f"lancepart-{uuid.uuid4().hex[:8]}", secret=f"SECRET-{uuid.uuid4().hex}", log=log)
        server.client().create_bucket(Bucket=server.bucket)
        yield server
    finally:
        if proc.stdout:
            proc.stdout.close()
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--atomic", action="store_true", help="serialise conditional requests (S3 semantics)")
    p.add_argument("--log", help="append one JSON line per mutating request to this file")
    p.add_argument("--put-delay", type=float, default=0.0, help="seconds to stall _versions/ puts after the check")
    p.add_argument("--switch-interval", type=float, help="sys.setswitchinterval for the server's threads")
    a = p.parse_args()
    serve(a.log, a.atomic, a.put_delay, a.switch_interval)
