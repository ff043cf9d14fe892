"""The servers pytest-gta runs send small writes at once (``pytest_gta.loopback``).

With Nagle's algorithm on, an answer's body waited for the client's delayed acknowledgement of
its head: about 44 ms for each answer of the model proxy on a kept-alive connection, instead
of under one. The option is asserted on the server's own end of real connections.
"""

from __future__ import annotations

import http.client
import importlib
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from pytest_gta import loopback
from pytest_gta.loopback import QuickHTTPServer

#: Every module of pytest-gta that runs an HTTP server on the standard library's classes.
SERVING_MODULES = ("pytest_gta.proxy.model_proxy", "pytest_gta.scoring.service")


class _Reports(BaseHTTPRequestHandler):
    """Answers with the TCP_NODELAY option of its own end of the connection."""

    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: object) -> None:
        """Quiet."""

    def do_GET(self) -> None:
        body = str(self.connection.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def _nodelay_seen(server: ThreadingHTTPServer) -> list[str]:
    threading.Thread(target=server.serve_forever, daemon=True).start()
    connection = http.client.HTTPConnection(*server.server_address[:2], timeout=10)
    try:
        seen = []
        for _ in range(2):  # kept alive: the second answer on the same connection
            connection.request("GET", "/")
            seen.append(connection.getresponse().read().decode())
        return seen
    finally:
        connection.close()
        server.shutdown()
        server.server_close()


def test_an_http_server_of_the_project_turns_nagle_off_on_each_connection() -> None:
    assert _nodelay_seen(QuickHTTPServer(("127.0.0.1", 0), _Reports)) == ["1", "1"]


def test_the_standard_server_would_not() -> None:
    """What the class changes (the test above could not fail if this were ``1`` too)."""
    assert _nodelay_seen(ThreadingHTTPServer(("127.0.0.1", 0), _Reports)) == ["0", "0"]


def test_a_listening_socket_hands_its_connections_nagle_off() -> None:
    listener = loopback.listen("127.0.0.1", 0)
    try:
        client = socket.create_connection(listener.getsockname()[:2], timeout=10)
        accepted, _ = listener.accept()
        with client, accepted:
            assert accepted.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) == 1
    finally:
        listener.close()


def test_every_http_server_of_the_project_is_a_quick_one() -> None:
    for name in SERVING_MODULES:
        importlib.import_module(name)
    found = []
    pending = list(ThreadingHTTPServer.__subclasses__())
    while pending:
        cls = pending.pop()
        pending.extend(cls.__subclasses__())
        if cls.__module__.startswith("pytest_gta."):
            found.append(cls)
    assert {c.__module__ for c in found} >= set(SERVING_MODULES)
    assert [c for c in found if not issubclass(c, QuickHTTPServer)] == []
