"""A real HTTP server on 127.0.0.1 that answers the way no server should: too much, too slowly.

Unlike tests/helpers/scripted_server.py, which answers whole bodies, each answer here is a function
writing to the raw socket, so a test can stream 100 MB without holding it, trickle the body or
the headers one byte at a time, announce a size it never sends, take a request and never
answer (:func:`hang`), or refuse every request with a status (:func:`status`). ``sent`` counts
the body bytes that reached the socket: what a client read at most (plus the kernel's buffers).
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable
from typing import Any

from pytest_gta.loopback import no_delay

#: ``answer(connection, server)``: writes a whole HTTP response to the connection.
Answer = Callable[[socket.socket, "HostileServer"], None]


class HostileServer:
    """``with HostileServer(answer) as server: server.url`` -> ``http://127.0.0.1:P/v1``."""

    def __init__(self, answer: Answer) -> None:
        self.answer = answer
        self.sent = 0
        self.requests = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.2)
        self._thread = threading.Thread(target=self._serve, daemon=True)

    @property
    def base(self) -> str:
        """``http://127.0.0.1:PORT``."""
        return f"http://127.0.0.1:{self._listener.getsockname()[1]}"

    @property
    def url(self) -> str:
        """The OpenAI-style base URL."""
        return f"{self.base}/v1"

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                connection, _ = self._listener.accept()
            except OSError:
                continue
            threading.Thread(target=self._handle, args=(connection,), daemon=True).start()

    def _handle(self, connection: socket.socket) -> None:
        with connection:
            no_delay(connection)
            try:
                _read_request(connection)
                with self._lock:
                    self.requests += 1
                self.answer(connection, self)
            except OSError:  # the client gave up: what the tests want to see
                pass

    def write(self, connection: socket.socket, data: bytes, *, body: bool = True) -> None:
        """Send ``data``; body bytes are counted in :attr:`sent`."""
        if self._stop.is_set():
            raise OSError("server stopped")
        connection.sendall(data)
        if body:
            with self._lock:
                self.sent += len(data)

    def until_stopped(self) -> None:
        """Block until the server stops (an answer that never comes)."""
        self._stop.wait()

    def __enter__(self) -> HostileServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self._listener.close()


def _read_request(connection: socket.socket) -> bytes:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = connection.recv(65536)
        if not chunk:
            raise OSError("closed before the request ended")
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    while len(body) < length:
        chunk = connection.recv(65536)
        if not chunk:
            break
        body += chunk
    return head


def head(status: str = "200 OK", **headers: Any) -> bytes:
    """A status line and headers (``content_type`` -> ``Content-Type``)."""
    lines = [f"HTTP/1.1 {status}"]
    lines += [f"{k.replace('_', '-').title()}: {v}" for k, v in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def stream_forever(
    chunk: bytes = b"a" * 65536, *, length: int | None = None, prefix: bytes = b""
) -> Answer:
    """A JSON-looking body that never ends (or ``length`` announced), sent as fast as read."""

    def answer(connection: socket.socket, server: HostileServer) -> None:
        headers: dict[str, Any] = {"content_type": "application/json"}
        if length is None:
            headers["transfer_encoding"] = "chunked"
        else:
            headers["content_length"] = length
        server.write(connection, head(**headers), body=False)
        if prefix:
            server.write(connection, _chunk(prefix) if length is None else prefix)
        data = _chunk(chunk) if length is None else chunk  # built once: no garbage per write
        while True:
            server.write(connection, data)

    return answer


def _chunk(data: bytes) -> bytes:
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


def hang(connection: socket.socket, server: HostileServer) -> None:
    """Take the request and never answer: the connection stays open, silent, until the end."""
    server.until_stopped()


def status(code: str, body: bytes, **headers: Any) -> Answer:
    """Every request answered ``code`` with ``body`` (JSON) and ``headers`` (``retry_after``)."""

    def answer(connection: socket.socket, server: HostileServer) -> None:
        top = head(code, content_type="application/json", content_length=len(body), **headers)
        server.write(connection, top + body)

    return answer


def trickle(data: bytes, every: float, *, headers_too: bool = False) -> Answer:
    """``data`` as a complete JSON reply, one byte per ``every`` seconds (the headers too)."""

    def answer(connection: socket.socket, server: HostileServer) -> None:
        top = head(content_type="application/json", content_length=len(data))
        if headers_too:
            for byte in top:
                server.write(connection, bytes([byte]), body=False)
                time.sleep(every)
        else:
            server.write(connection, top, body=False)
        for byte in data:
            server.write(connection, bytes([byte]))
            time.sleep(every)

    return answer


def compressed(body: bytes, encoding: str = "gzip") -> Answer:
    """``body`` (already compressed) under ``Content-Encoding: encoding``."""

    def answer(connection: socket.socket, server: HostileServer) -> None:
        top = head(
            content_type="application/json", content_length=len(body), content_encoding=encoding
        )
        server.write(connection, top + body)

    return answer
