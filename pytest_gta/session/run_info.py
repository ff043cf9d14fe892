"""What a GTA-Atomic report says about the run besides its cases, as the session knows it.

Built by the session's services (:meth:`pytest_gta.session.state.GtaState.run_info`) when the
run ends, and read by the atomic benchmark's report (:mod:`pytest_gta.benchmarks.gta_atomic`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


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
