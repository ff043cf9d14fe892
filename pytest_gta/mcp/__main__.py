"""``python -m pytest_gta.mcp`` / ``gta-mcp``: GTA's tools as an MCP server, until Ctrl-C.

Every argument is passed to pytest with ``--gta-mcp-serve`` added, so the dataset, the tool
backends and every other ``--gta-*`` option, ini key and conftest hook apply exactly as in a
run (``python -m pytest_gta.mcp --gta-data=sample --gta-tools=local,replay``). The serving is
done by the session layer (:mod:`pytest_gta.session.mcp_command`); this module imports no
first-party module, so it cannot pull anything above the MCP layer onto its import path.
"""

from __future__ import annotations

import sys

import pytest

from pytest_gta.flags import OPT_MCP_SERVE

#: What makes pytest serve the tools instead of running tests.
SERVE_FLAG = OPT_MCP_SERVE
#: No test runs, so nothing is rewritten: pytest would otherwise warn that ``pytest_gta`` (its
#: plugin, imported here already) cannot be rewritten, and under a project's
#: ``filterwarnings = error`` that warning stops the server before it starts. Nor does serving
#: leave a ``.pytest_cache`` in the directory it was started from.
QUIET = ("--assert=plain", "-p", "no:cacheprovider")


def main(argv: list[str] | None = None) -> int:
    """Serve the tools with ``argv`` (default: the command line) as pytest's arguments."""
    args = list(sys.argv[1:] if argv is None else argv)
    return int(pytest.main([SERVE_FLAG, *QUIET, *args]))


if __name__ == "__main__":
    sys.exit(main())
