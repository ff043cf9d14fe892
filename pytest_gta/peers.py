"""Which loopback connections come from a sandboxed agent, through its bridge.

A sandboxed agent reaches its case's MCP server and model proxy through a Unix socket bound into
its sandbox (``tool_backends.agent_jail``); the host end of that socket connects to the
services over loopback from a port it registers here before sending a byte. The services then
accept a sandboxed case's secret URL only on a connection from a registered port: any other
user of the machine, who may read the URL on the agent's command line (``/proc/PID/cmdline`` is
world-readable), gets a 404. A registered connection cannot be reused by anyone while it is
open, and is forgotten when it closes.

A connection is known by its local port *and* the service's port: Linux gives the same
ephemeral port to two connections at once when they go to different services (one bridge's
connection to the MCP server, another's to the model proxy), so the local port alone would let
the end of one forget the other while it is still open (the agent then got a 404 mid-case).
Registrations are counted, because a connection may close and its four-tuple come back before
the old one's bridge has reported the close.
"""

from __future__ import annotations

import threading
from collections import Counter

_lock = threading.Lock()
_connections: Counter[tuple[int, int]] = Counter()


def trust(port: int, service: int) -> None:
    """``port`` is the local end of a bridge's connection to ``service`` (before it sends)."""
    with _lock:
        _connections[port, service] += 1


def forget(port: int, service: int) -> None:
    """The bridge's connection from ``port`` to ``service`` is closed."""
    with _lock:
        left = _connections[port, service] - 1
        if left > 0:
            _connections[port, service] = left
        else:
            del _connections[port, service]


def trusted(client: object, service: object) -> bool:
    """Whether ``client`` (a ``(host, port)`` peer of ``service``) is a bridge's connection.

    ``service`` is the port the connection came in on, or the server's ``(host, port)``.
    """
    if isinstance(service, tuple | list) and len(service) >= 2:
        service = service[1]
    if not isinstance(client, tuple | list) or len(client) < 2 or not isinstance(service, int):
        return False
    host, port = client[0], client[1]
    if host != "127.0.0.1" or not isinstance(port, int):
        return False
    with _lock:
        return _connections[port, service] > 0
