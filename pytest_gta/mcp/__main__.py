"""``python -m pytest_gta.mcp`` / ``gta-mcp``: GTA's tools as an MCP server, until Ctrl-C.

Every argument is passed to pytest with ``--gta-mcp-serve`` added, so the dataset, the tool
backends and every other ``--gta-*`` option, ini key and conftest hook apply exactly as in a
run (``python -m pytest_gta.mcp --gta-data=sample --gta-tools=local,replay``). The serving is
done by the session layer (:mod:`pytest_gta.session.mcp_serve`); this module imports no
first-party module, so it cannot pull anything above the MCP layer onto its import path.
"""

from __future__ import annotations

import sys

import pytest

#: What makes pytest serve the tools instead of running tests.
SERVE_FLAG = "--gta-mcp-serve"


def main(argv: list[str] | None = None) -> int:
    """Serve the tools with ``argv`` (default: the command line) as pytest's arguments."""
    args = list(sys.argv[1:] if argv is None else argv)
    return int(pytest.main([SERVE_FLAG, *args]))


if __name__ == "__main__":
    sys.exit(main())
