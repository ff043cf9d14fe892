"""GTA's tools for agents under test: one case's calls (:mod:`.calls`) and the MCP server.

Layer 5 (beside models and tools). The MCP SDK, Starlette and uvicorn are imported only in
:mod:`pytest_gta.mcp.gateway`, never on the plugin's import path.
"""
