"""What a GTA-Atomic report says about the run besides its cases, as the session knows it.

Built from the session's services (:func:`run_info_of`) when the run ends, and read by the
atomic benchmark's report (:mod:`pytest_gta.benchmarks.gta_atomic`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pytest_gta.models.catalog import leaderboard_row
from pytest_gta.session.model_server import describe as describe_server

if TYPE_CHECKING:
    from pytest_gta.session.state import GtaState


@dataclass(frozen=True)
class RunInfo:
    """What the report says about the run besides the cases."""

    model: str
    protocol: str
    warnings: list[str]
    #: The ``--gta-tools`` value when tool backends took part, else ``None``.
    tools: str | None
    #: Generation settings when the model generates (not for recorded predictions).
    generation: dict[str, Any] | None = None
    #: The official leaderboard row to print beside the run.
    leaderboard: dict[str, Any] | None = None
    #: USD per million input/output tokens, when known.
    prices: tuple[float, float] | None = None
    #: Which backend serves each tool (``a > b``: b gets what a has no recording of).
    tool_routes: dict[str, str] | None = None
    #: What tool backends say about themselves (``local``: which sandbox ran).
    tool_backends: dict[str, Any] | None = None
    #: The managed model server (``--gta-serve``): command, URL, log, start time.
    server: dict[str, Any] | None = None
    #: The agent under test: name (callable or command), kind, timeout, passed variables.
    agent: dict[str, Any] | None = None


def run_info_of(state: GtaState) -> RunInfo:
    """What the report says about the run besides the cases, from the session's services."""
    model = state.model()
    warnings = [str(w) for w in model.warnings]
    warnings += [str(w) for w in state.dataset().warnings]
    tools = state.settings.tools.backends if state.uses_tools() else None
    prices = state.prices(model)
    return RunInfo(
        model.name,
        model.protocol,
        warnings,
        tools,
        generation=model.describe(),
        leaderboard=leaderboard_row(model.catalog_entry),
        prices=None if prices is None else (prices.input, prices.output),
        tool_routes=state.tool_routes() if tools is not None else None,
        tool_backends=state.tool_backend_details() if tools is not None else None,
        server=describe_server(state.config),
        agent=describe_agent(state),
    )


def describe_agent(state: GtaState) -> dict[str, Any] | None:
    """The report's ``settings.agent``: the agent under test, how it runs (``None``: none)."""
    agent = state.settings.agent
    if agent.spec is None:
        return None
    setup = state.agent_setup()
    described: dict[str, Any] = {
        "name": agent.spec,
        "kind": "python" if agent.callable is not None else "command",
        "timeout": agent.timeout,
        "env": list(agent.env),
    }
    if setup is not None:
        described["isolation"] = setup.describe()
    return described
