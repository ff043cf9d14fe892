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
        _connections[port, service] -= 1
        if _connections[port, service] <= 0:
            del _connections[port, service]


def trusted(client: object, server: object) -> bool:
    """Whether ``client`` is a bridge's connection to ``server`` (both ``(host, port)``)."""
    if not (isinstance(client, tuple | list) and isinstance(server, tuple | list)):
        return False
    if len(client) < 2 or len(server) < 2 or client[0] != "127.0.0.1":
        return False
    port, service = client[1], server[1]
    if not (isinstance(port, int) and isinstance(service, int)):
        return False
    with _lock:
        return _connections[port, service] > 0
