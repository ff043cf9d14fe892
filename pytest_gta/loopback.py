"""Servers on loopback whose small writes leave at once (Nagle's algorithm off).

An HTTP server answers in two writes, the head and then the body. With Nagle's algorithm on,
the body waits until the client has acknowledged the head, and a client on a kept-alive
connection delays that acknowledgement by up to 40 ms on Linux: every answer of the model
proxy (a sandboxed agent's model requests) took about 44 ms instead of under one on loopback
(measured with httpx, 50 requests). Every TCP server pytest-gta runs turns it off on each
connection, through this module.
"""

from __future__ import annotations

import socket
from http.server import ThreadingHTTPServer
from typing import Any


def no_delay(sock: socket.socket) -> None:
    """Send ``sock``'s small writes at once."""
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


def listen(host: str, port: int) -> socket.socket:
    """A listening TCP socket whose accepted connections send small writes at once.

    asyncio turns Nagle's algorithm off only for sockets whose ``proto`` is ``IPPROTO_TCP``;
    :func:`socket.create_server` leaves it 0, so the socket is made with it, and accepted
    sockets inherit the option.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        no_delay(sock)
        sock.bind((host, port))
        sock.listen(128)
    except OSError:
        sock.close()
        raise
    return sock


class QuickHTTPServer(ThreadingHTTPServer):
    """A threading HTTP server whose connections send small writes at once."""

    def get_request(self) -> tuple[Any, Any]:
        """The accepted connection, Nagle's algorithm off."""
        request, address = super().get_request()
        no_delay(request)
        return request, address
