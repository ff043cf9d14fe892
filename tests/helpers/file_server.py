"""A real HTTP file server on 127.0.0.1 for the dataset download tests.

It serves one body at ``/gta_dataset.zip`` the way a release CDN does (``Content-Length``,
``ETag``, ``Range`` -> 206) and can misbehave on purpose: cut the body short and close the
connection, answer with an error status, or trickle the body slowly so that two downloaders
overlap. Every request is logged so tests can assert what was (not) fetched.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler

from pytest_gta.loopback import QuickHTTPServer

PATH = "/gta_dataset.zip"


@dataclass
class FileServer:
    body: bytes
    #: Number of upcoming GET responses to cut after half of what they announce.
    truncate: int = 0
    #: Statuses to answer the next GETs with, in order, before serving normally.
    statuses: list[int] = field(default_factory=list)
    #: Seconds to spend sending a body (in 20 slices).
    slow: float = 0.0
    honour_range: bool = True
    #: When set, bodies wait for it after the headers (a download held open on purpose).
    gate: threading.Event | None = None
    url: str = ""
    requests: list[tuple[str, str, dict[str, str]]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def etag(self) -> str:
        return '"' + hashlib.sha256(self.body).hexdigest()[:20] + '"'

    def gets(self) -> list[dict[str, str]]:
        with self.lock:
            return [h for m, p, h in self.requests if m == "GET" and p == PATH]


def _handler(server: FileServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            with server.lock:
                server.requests.append(("GET", self.path, dict(self.headers)))
                status = server.statuses.pop(0) if server.statuses else None
                cut = server.truncate > 0
                if cut:
                    server.truncate -= 1
            if self.path != PATH:
                self._empty(404)
                return
            if status is not None:
                self._empty(status)
                return
            body, code, extra = server.body, 200, {}
            wanted = self.headers.get("Range")
            if_range = self.headers.get("If-Range")
            if (
                wanted
                and server.honour_range
                and wanted.startswith("bytes=")
                and (if_range is None or if_range == server.etag)
            ):
                start = int(wanted[6:].split("-")[0])
                if start >= len(body):
                    self._empty(416)
                    return
                extra["Content-Range"] = f"bytes {start}-{len(body) - 1}/{len(body)}"
                body, code = body[start:], 206
            self.send_response(code)
            self.send_header("Content-Type", "application/zip")
            self.send_header("Content-Length", str(len(body)))
            self.send_header("ETag", server.etag)
            self.send_header("Accept-Ranges", "bytes")
            for key, value in extra.items():
                self.send_header(key, value)
            self.end_headers()
            payload = body[: len(body) // 2] if cut else body
            if server.gate is not None:
                server.gate.wait(timeout=120)
            if server.slow:
                step = max(1, len(payload) // 20)
                for i in range(0, len(payload), step):
                    self.wfile.write(payload[i : i + step])
                    self.wfile.flush()
                    time.sleep(server.slow / 20)
            else:
                self.wfile.write(payload)
            if cut:
                self.close_connection = True

        def _empty(self, code: int) -> None:
            self.send_response(code)
            self.send_header("Content-Length", "0")
            self.end_headers()

    return Handler


@contextmanager
def serve_file(body: bytes, **options: object) -> Iterator[FileServer]:
    """Serve ``body`` at ``<server.url>`` until the block ends."""
    server = FileServer(body, **options)  # type: ignore[arg-type]
    httpd = QuickHTTPServer(("127.0.0.1", 0), _handler(server))
    httpd.daemon_threads = True
    server.url = f"http://127.0.0.1:{httpd.server_address[1]}{PATH}"
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=5)
