"""``python -m pytest_gta.mcp`` (``pytest --gta-mcp-serve``): GTA's tools as an MCP server.

For trying an agent by hand: the dataset and the tool backends come from the same ``--gta-*``
options, ini keys and conftest hooks as a run (so ``--gta-tools=local,replay`` serves exactly
what a run would), the URL is printed on one line, usable as it is by any MCP client, and the
server runs until Ctrl-C or SIGTERM (exit status 0, nothing left running). With
``--gta-mcp-transport=stdio`` the protocol runs on stdin/stdout instead, for agents that spawn
their tools; every note then goes to stderr.

Like ``--gta-download``, it runs from ``pytest_cmdline_main`` instead of a session.
"""

from __future__ import annotations

import shutil
import signal
import sys
import tempfile
import threading
from pathlib import Path
from types import FrameType
from typing import Any

import pytest

from pytest_gta.dataset import Dataset, Query
from pytest_gta.errors import GtaError, GtaInfrastructureError, GtaUsageError
from pytest_gta.flags import OPT_MCP_PORT, OPT_MCP_QUERY
from pytest_gta.mcp.calls import CaseTools
from pytest_gta.mcp.gateway import McpGateway, serve_stdio
from pytest_gta.options import resolve_option, resolve_settings
from pytest_gta.session.state import GtaState

PREFIX = "pytest-gta: "
#: The call limit when ``--gta-max-turns`` is not given: none worth the name, by hand.
UNLIMITED_CALLS = sys.maxsize


def _note(line: str, *, stdio: bool) -> None:
    print(PREFIX + line, file=sys.stderr if stdio else sys.stdout, flush=True)


def _query(dataset: Dataset, qid: str | None) -> Query:
    if qid is None:
        return next(iter(dataset.queries.values()))
    query = dataset.queries.get(qid)
    if query is None:
        ids = list(dataset.queries)
        shown = ", ".join(ids[:12]) + (" ..." if len(ids) > 12 else "")
        raise GtaUsageError(
            f"{OPT_MCP_QUERY}={qid}: no such query in {dataset.root} (ids: {shown})"
        )
    return query


def _max_calls(config: pytest.Config) -> int:
    turns = resolve_option(config, "gta_max_turns")
    return UNLIMITED_CALLS if turns.source == "default" else int(turns.value)


def _release_stdio(config: pytest.Config) -> None:
    """Give stdin/stdout back from pytest's capture: they carry the protocol (stdio)."""
    capman: Any = config.pluginmanager.getplugin("capturemanager")
    if capman is not None:
        capman.stop_global_capturing()


def tools_of(config: pytest.Config, output_dir: Path) -> CaseTools:
    """The tools to serve, built from the run's options.

    Raises:
        pytest.UsageError: a bad dataset, backend or query id.
    """
    state = GtaState(config, resolve_settings(config))
    dataset = state.dataset()
    qid = resolve_option(config, "gta_mcp_query").value
    try:
        return CaseTools(
            dataset,
            _query(dataset, qid),
            state.toolset(),
            output_dir,
            max_calls=_max_calls(config),
            all_tools=qid is None,
        )
    except GtaError as exc:  # a usage error, or no backend for one of the query's tools
        raise pytest.UsageError(str(exc)) from None


def run(config: pytest.Config) -> int:
    """Serve until interrupted; pytest's exit status (0 when stopped by a signal)."""
    stdio = resolve_option(config, "gta_mcp_transport").value == "stdio"
    output_dir = Path(tempfile.mkdtemp(prefix="gta-mcp-"))
    try:
        tools = tools_of(config, output_dir)
        described = ", ".join(f"{m.name} ({tools.backends[m.name]})" for m in tools.metas)
        if stdio:
            _release_stdio(config)
            _note(f"serving MCP on stdin/stdout: {described}", stdio=True)
            _serve_stdio(tools)
        else:
            _serve_http(config, tools, described)
    finally:
        shutil.rmtree(output_dir, ignore_errors=True)
    return int(pytest.ExitCode.OK)


def _serve_stdio(tools: CaseTools) -> None:
    previous = signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        serve_stdio(tools)
    except KeyboardInterrupt:
        pass
    finally:
        signal.signal(signal.SIGTERM, previous)


def _serve_http(config: pytest.Config, tools: CaseTools, described: str) -> None:
    stop = threading.Event()

    def handle(signum: int, frame: FrameType | None) -> None:
        stop.set()

    previous = {sig: signal.signal(sig, handle) for sig in (signal.SIGINT, signal.SIGTERM)}
    port = int(resolve_option(config, "gta_mcp_port").value)
    gateway = McpGateway(port=port)
    try:
        try:
            endpoint = gateway.open(tools)
        except GtaInfrastructureError as exc:
            if not port:  # any free port was asked for: the machine's problem, not the user's
                raise
            # The port the user chose is taken (or not theirs to use): theirs to change.
            raise pytest.UsageError(
                f"{OPT_MCP_PORT}={port}: {exc}; choose another port, or 0 for any free one"
            ) from None
        qid = resolve_option(config, "gta_mcp_query").value
        scope = f"query {qid}'s tools" if qid is not None else f"{len(tools.metas)} tools"
        _note(f"GTA tools over MCP ({scope}): {endpoint.url}", stdio=False)
        _note(f"tools: {described}", stdio=False)
        if qid is not None:
            files = tools.dataset.abs_files(tools.query)
            _note(f"query: {tools.query.text}", stdio=False)
            if files:
                _note("files: " + ", ".join(files), stdio=False)
        _note("Ctrl-C stops the server", stdio=False)
        while not stop.wait(0.5):
            pass
    finally:
        gateway.close()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    calls = len(tools.log())
    _note(f"stopped after {calls} tool call{'s' if calls != 1 else ''}", stdio=False)
