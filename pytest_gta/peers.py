"""Which loopback connections come from a sandboxed agent, through its bridge.

A sandboxed agent reaches its case's MCP server and model proxy through a Unix socket bound into
its sandbox (``tool_backends.agent_jail``); the host end of that socket connects to the
services over loopback from a port it registers here before sending a byte. The services then
accept a sandboxed case's secret URL only on a connection from a registered port: any other
user of the machine, who may read the URL on the agent's command line (``/proc/PID/cmdline`` is
world-readable), gets a 404. A registered port cannot be reused by anyone while its connection
is open, and is forgotten when it closes.
"""

from __future__ import annotations

import threading

_lock = threading.Lock()
_ports: set[int] = set()


def trust(port: int) -> None:
    """``port`` is the local end of a bridge's connection (before it sends anything)."""
    with _lock:
        _ports.add(port)


def forget(port: int) -> None:
    """The bridge's connection from ``port`` is closed."""
    with _lock:
        _ports.discard(port)


def trusted(client: object) -> bool:
    """Whether ``client`` (a ``(host, port)`` peer address) is one of a bridge's connections."""
    if not isinstance(client, tuple | list) or len(client) < 2:
        return False
    host, port = client[0], client[1]
    with _lock:
        return host == "127.0.0.1" and isinstance(port, int) and port in _ports
