"""A reverse proxy on loopback that counts every request an S3 client makes.

Put it in front of an S3 server (SeaweedFS, tests/seaweedfs_server.py) and point Lance's
``aws_endpoint`` at it: requests are forwarded unchanged (the ``Host`` header too, so SigV4
signatures still verify) and each one is recorded as ``(kind, path)``, where ``kind`` is
``LIST`` (a GET on the bucket with a listing query), ``GET``, ``HEAD``, ``PUT``, ``POST``
(multipart steps) or ``DELETE``. Used by tests/test_requests.py and
benchmarks/request_counts.py; docs/object-storage.md "Requests" has the figures.
"""

from __future__ import annotations

import http.client
import threading
import urllib.parse
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

_HOP = {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "te", "trailer", "upgrade", "expect"}


def kind_of(method: str, target: str) -> str:
    """``LIST`` for a listing (``GET /bucket?list-type=2...``), else the method."""
    parsed = urllib.parse.urlsplit(target)
    if method == "GET" and parsed.path.rstrip("/").count("/") <= 1 and (
            "list-type" in parsed.query or "prefix=" in parsed.query or "delimiter" in parsed.query):
        return "LIST"
    return method


class RequestCounter:
    """The proxy's record: ``(kind, path)`` per request, thread-safe."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.log: list[tuple[str, str]] = []

    def add(self, kind: str, path: str) -> None:
        with self.lock:
            self.log.append((kind, path))

    def take(self) -> list[tuple[str, str]]:
        """Every request since the last ``take`` (and forget them)."""
        with self.lock:
            out, self.log = self.log, []
        return out

    @staticmethod
    def by_kind(log: list[tuple[str, str]]) -> Counter:
        return Counter(k for k, _ in log)


def _handler(upstream: tuple[str, int], counter: RequestCounter) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        conn: http.client.HTTPConnection | None = None

        def log_message(self, format: str, *args: object) -> None:  # quiet
            pass

        def _body(self) -> bytes:
            if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                chunks = []
                while True:
                    size = int(self.rfile.readline().strip().split(b";")[0], 16)
                    if size == 0:
                        while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                            pass
                        break
                    chunks.append(self.rfile.read(size))
                    self.rfile.readline()
                return b"".join(chunks)
            n = int(self.headers.get("Content-Length") or 0)
            return self.rfile.read(n) if n else b""

        def _forward(self) -> None:
            body = self._body()
            kind = kind_of(self.command, self.path)
            parts = urllib.parse.urlsplit(self.path)
            # a listing's path is the bucket: its prefix says what was listed
            counter.add(kind, urllib.parse.unquote(parts.path) if kind != "LIST" else
                        parts.path.rstrip("/") + "/" + urllib.parse.unquote(
                            dict(urllib.parse.parse_qsl(parts.query)).get("prefix", "")))
            headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP}
            if body or self.command in ("PUT", "POST"):
                headers["Content-Length"] = str(len(body))
            for attempt in range(2):  # the upstream may have closed an idle kept-alive connection
                if self.conn is None:
                    self.conn = http.client.HTTPConnection(*upstream, timeout=120)
                try:
                    self.conn.request(self.command, self.path, body=body, headers=headers)
                    resp = self.conn.getresponse()
                    data = resp.read()
                    break
                except (ConnectionError, http.client.HTTPException):
                    self.conn.close()
                    self.conn = None
                    if attempt:
                        raise
            self.send_response(resp.status, resp.reason)
            head = self.command == "HEAD"  # its Content-Length is the object's size: passed on as it is
            for k, v in resp.getheaders():
                if k.lower() not in _HOP and (head or k.lower() != "content-length"):
                    self.send_header(k, v)
            if not head:
                self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(data)

        do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _forward

    return Handler


@contextmanager
def counting_proxy(endpoint: str) -> Iterator[tuple[str, RequestCounter]]:
    """Start a proxy in front of ``endpoint`` (``http://host:port``); yield (its endpoint, its
    counter); stop it at the end."""
    up = urllib.parse.urlsplit(endpoint)
    counter = RequestCounter()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler((up.hostname, up.port), counter))
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", counter
    finally:
        server.shutdown()
        server.server_close()
