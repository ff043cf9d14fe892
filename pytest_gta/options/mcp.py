"""GTA's tools over MCP: ``--gta-mcp-serve`` (``python -m pytest_gta.mcp``) and its options.

A command, not part of a run's settings: :mod:`pytest_gta.session.mcp_command` reads its
options with :func:`~pytest_gta.options.resolve_option`.
"""

from __future__ import annotations

import pytest

from pytest_gta.flags import OPT_MCP_PORT, OPT_MCP_QUERY, OPT_MCP_SERVE, OPT_MCP_TRANSPORT
from pytest_gta.options.core import Feature, OptionSpec, int_at_least, shown

MCP_TRANSPORTS = ("http", "stdio")
#: Ports ``--gta-mcp-port`` accepts (0: any free port).
MCP_PORT_RANGE = (0, 65535)


def parse_mcp_transport(value: str) -> str:
    """``http`` (streamable HTTP on 127.0.0.1) or ``stdio``."""
    name = value.strip().lower()
    if name not in MCP_TRANSPORTS:
        raise pytest.UsageError(
            f"{OPT_MCP_TRANSPORT}={shown(value)}: give one of {', '.join(MCP_TRANSPORTS)}"
        )
    return name


def parse_mcp_port(value: str) -> int:
    """A TCP port on 127.0.0.1; 0 picks a free one."""
    low, high = MCP_PORT_RANGE
    return int_at_least(
        value, OPT_MCP_PORT, "give a TCP port (0: any free port)", low, maximum=high
    )


ROWS: tuple[OptionSpec, ...] = (
    OptionSpec(
        OPT_MCP_SERVE,
        None,
        "serve the tools as an MCP server (what python -m pytest_gta.mcp runs) until Ctrl-C",
        kind="flag",
        default=False,
        doc="serve the tools as an MCP server until Ctrl-C (what `python -m pytest_gta.mcp` and "
        "`gta-mcp` run)",
    ),
    OptionSpec(
        OPT_MCP_TRANSPORT,
        "TRANSPORT",
        f"with {OPT_MCP_SERVE}: http (streamable HTTP on 127.0.0.1, the default) or stdio",
        parse=parse_mcp_transport,
        default="http",
        doc_default="`http`",
        doc=f"with `{OPT_MCP_SERVE}`: `http` (streamable HTTP on 127.0.0.1, the URL printed) or "
        "`stdio`",
    ),
    OptionSpec(
        OPT_MCP_QUERY,
        "ID",
        f"with {OPT_MCP_SERVE}: serve this query's tools and files (default: all 14 tools)",
        doc_default="all 14 tools",
        doc=f"with `{OPT_MCP_SERVE}`: serve this query's tools, and print its question and files",
    ),
    OptionSpec(
        OPT_MCP_PORT,
        "PORT",
        f"with {OPT_MCP_SERVE}: the port on 127.0.0.1 (default: 0, any free port)",
        parse=parse_mcp_port,
        default=0,
        doc_default="`0` (any free port)",
        doc=f"with `{OPT_MCP_SERVE}`: the port on 127.0.0.1, 0 to 65,535",
    ),
)
FEATURE = Feature(None, ROWS, {})
