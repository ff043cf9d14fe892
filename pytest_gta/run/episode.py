"""One end-to-end episode: route the query's tools, give them a place to work, run the loop.

Written once and used three ways: by a case in pytest's thread (:mod:`pytest_gta.run.runner`),
by a pool thread running episodes ahead (:mod:`pytest_gta.run.pipeline`), and, opened but
driven in lockstep with the others, by a batch engine before the loop (:mod:`pytest_gta.run.ahead`).
Whichever way it runs, the same backends serve the same tools with the same files visible, so
a case's replies do not depend on how it was scheduled.

With an agent under test (``--gta-agent``, ``--gta-agent-command``) the episode is the agent's:
:func:`play_agent` serves the case's tools (:class:`~pytest_gta.mcp.calls.CaseTools`, over MCP
too), opens the recording proxy for its model traffic, runs the agent and builds the official
end-to-end record from the server-side log and the answer.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field
from typing import Any

from pytest_gta.case import Case
from pytest_gta.errors import GtaUnavailableError
from pytest_gta.faults import FaultLog
from pytest_gta.flags import OPT_TOOLS
from pytest_gta.mcp.calls import CaseTools
from pytest_gta.models.base import BaseModelAdapter
from pytest_gta.run import loops
from pytest_gta.run.agent_under_test import (
    Agent,
    AgentOutcome,
    AgentTask,
    ProxyCase,
    ToolClient,
    clip_strings,
)
from pytest_gta.run.context import RunContext
from pytest_gta.tools import ToolContext
from pytest_gta.types import Usage
from pytest_gta.vocabulary import ProtocolName


@dataclass(frozen=True)
class Opened:
    """An episode set up but not run: its loop, and which backend serves each of its tools."""

    steps: loops.EpisodeSteps
    backends: dict[str, str]
    #: The faults its calls meet (``None``: the run injects none, ``--gta-tool-faults``).
    faults: FaultLog | None = None


@dataclass
class AgentRun:
    """What an agent's episode adds to the case's detail: its run, tool log and model traffic."""

    outcome: AgentOutcome
    #: :meth:`pytest_gta.mcp.calls.LoggedCall.to_json` of every call, in order.
    tool_log: list[dict[str, Any]]
    #: The proxy's transcript (``Exchange.to_json``), in order; empty without a proxy.
    exchanges: list[dict[str, Any]]
    usage: Usage
    #: Seconds the agent waited on the model through the proxy: its exchanges' durations
    #: (``None``: no request went through the proxy, so the harness saw none).
    model_s: float | None = None


@dataclass
class Played:
    """A finished end-to-end episode and which backend served each of its tools."""

    episode: loops.Episode
    backends: dict[str, str] = field(default_factory=dict)
    #: The agent's run, when an agent under test played the episode.
    agent: AgentRun | None = None
    #: The faults its calls met (``None``: the run injects none).
    faults: FaultLog | None = None

    def fault_entries(self) -> list[dict[str, Any]] | None:
        """The case's ``faults`` entries (``None``: the run injects none)."""
        if self.faults is None:
            return None
        return self.faults.finish(self.episode.predictions)

    @property
    def usage(self) -> Usage:
        """Tokens of the episode: the model's turns, or the agent's traffic."""
        return self.agent.usage if self.agent is not None else self.episode.usage

    @property
    def model_s(self) -> float | None:
        """Seconds the episode waited on the model: the loop's turns, or the agent's traffic."""
        return self.agent.model_s if self.agent is not None else self.episode.model_s


@dataclass
class Ahead:
    """A case's end-to-end episode, generated before pytest reached the case."""

    #: The episode, or why it could not be played (raised in the case).
    outcome: Played | BaseException
    #: The case's (score, verdict) when the episode was scored where it ended, in a pool
    #: thread (:mod:`pytest_gta.run.pipeline`); ``None``: the case scores it.
    scored: tuple[Any, Any] | None = None
    #: Seconds the episode (and its scoring) took where it ran ahead, which the case adds to its
    #: own duration; ``None`` where that time is not the episode's alone (a lockstep batch).
    seconds: float | None = None


def open_episode(case: Case, ctx: RunContext, protocol: ProtocolName) -> Opened:
    """Route ``case``'s tools and start its loop; nothing is sent to the model yet.

    Raises:
        GtaUnavailableError: no tool backends, or none that offers one of the query's tools.
    """
    if ctx.tools is None:
        raise GtaUnavailableError(f"end-to-end mode needs tool backends ({OPT_TOOLS})")
    routes = ctx.tools.route(case.query)
    context = ToolContext(ctx.dataset, case.query, ctx.output_dir, epoch=case.epoch)
    steps = loops.e2e_episode(
        ctx.dataset,
        case.query,
        protocol,
        ctx.tools.runner(routes, context),
        max_turns=ctx.max_turns,
        epoch=case.epoch,
        visible=context.reach,
    )
    backends = {name: backend.name for name, backend in routes.items()}
    return Opened(steps, backends, ctx.tools.fault_log(context))


def play(case: Case, ctx: RunContext, model: BaseModelAdapter) -> Played:
    """Run ``case``'s end-to-end episode with ``model``, one request at a time.

    ``model`` is the context's model or a wrapper of it (the pool's, which refuses requests
    once the pool stops). With an agent under test, the agent plays it (:func:`play_agent`).

    Raises:
        GtaUnavailableError: nothing to run it with (see :func:`open_episode`).
        GtaInfrastructureError: the model or a tool backend broke (an agent's failure too:
            :class:`~pytest_gta.run.agent_under_test.AgentFailed`).
    """
    if ctx.agent is not None:
        return play_agent(case, ctx, ctx.agent)
    opened = open_episode(case, ctx, model.protocol)
    return Played(loops.drive(opened.steps, model), opened.backends, faults=opened.faults)


def play_agent(case: Case, ctx: RunContext, agent: Agent) -> Played:
    """Run ``case`` with the agent under test and record it as an official end-to-end episode.

    The predictions are the server-side log of the agent's tool calls (each call and its tool
    return, as :func:`loops.e2e_episode` records a model's) followed by the agent's answer as
    the final assistant message; the gold is the reference after the query, as for a model. So
    the official end-to-end metrics score the episode unchanged. The case may call tools at
    most ``--gta-max-turns`` times (the official loop's turn limit bounds its calls alike).

    Raises:
        GtaUnavailableError: no tool backends, or none for one of the query's tools.
        AgentFailed: the agent raised, crashed or gave no answer in time.
        GtaInfrastructureError: a tool backend broke during a call.
    """
    if ctx.tools is None:
        raise GtaUnavailableError(f"an agent under test needs tool backends ({OPT_TOOLS})")
    dataset, query = ctx.dataset, case.query
    # The agent's deadline bounds its tool calls too: one started near it gets the time left.
    deadline = time.monotonic() + ctx.agent_timeout
    tools = CaseTools(
        dataset,
        query,
        ctx.tools,
        ctx.output_dir,
        max_calls=ctx.max_turns,
        deadline=deadline,
        epoch=case.epoch,
    )
    client = ToolClient(tools)
    generation = ctx.generation
    with contextlib.ExitStack() as stack:
        stack.callback(client.close)
        mcp_url = None
        if ctx.gateway is not None:
            endpoint = ctx.gateway().open(tools, bridged=agent.bridged)
            stack.callback(endpoint.close)
            mcp_url = endpoint.url
        proxy = ctx.proxy() if ctx.proxy is not None else None
        door: ProxyCase | None = None
        if proxy is not None:
            door = proxy.open(case.id, epoch=case.epoch, query=query.qid, bridged=agent.bridged)
            stack.callback(door.close)
        task = AgentTask(
            case_id=case.id,
            query_id=query.qid,
            text=query.text,
            image_paths=tuple(dataset.abs_files(query)),
            tool_schemas=tuple(tools.schemas()),
            mcp_url=mcp_url,
            tools=client,
            model=served_model(ctx, proxy),
            temperature=None if generation is None else generation.temperature,
            max_tokens=None if generation is None else generation.max_tokens,
            model_url=None if door is None else door.openai_base_url,
            anthropic_url=None if door is None else door.anthropic_base_url,
            deliverables_dir=ctx.deliverables_dir,
        )
        try:
            outcome = agent.run(task, ctx.agent_timeout)
        finally:
            # A spent budget stops the session as it does for the project's loop (the case is
            # skipped), and a backend that broke under the agent is the case's infrastructure
            # error, whatever the agent made of either (a crash, an answer without them).
            if door is not None and door.exhausted is not None:
                raise door.exhausted
            if tools.failure is not None:
                raise tools.failure
        exchanges = [] if door is None else [e.to_json() for e in door.exchanges()]
        usage = door.usage() if door is not None else Usage()
    if not (usage.calls or usage.cached_calls) and outcome.usage is not None:
        usage = outcome.usage  # the agent counted its own tokens and none went through us
    answer = outcome.answer or ""
    predictions = [*tools.predictions(), {"role": "assistant", "content": answer}]
    gold = dataset.reference_dialogs(query)[1:]
    log = [clip_strings(c.to_json()) for c in tools.log()]
    run = AgentRun(outcome, log, exchanges, usage, exchange_seconds(exchanges))
    return Played(loops.Episode("e2e", predictions, gold), tools.backends, run, tools.faults)


def exchange_seconds(exchanges: list[dict[str, Any]]) -> float | None:
    """The agent's time on the model: the sum of its proxy exchanges' ``duration``.

    Each runs from the agent's request to the end of the answer it got, a cached one included
    (its time is the cache's); ``None`` without exchanges, where the agent's model, if it used
    one, was not reached through the harness.
    """
    seconds = [e["duration"] for e in exchanges if isinstance(e.get("duration"), int | float)]
    return float(sum(seconds)) if seconds else None


def served_model(ctx: RunContext, proxy: object) -> str:
    """The model id an agent is told: the one the proxy forwards to, else the run's model."""
    upstream = getattr(proxy, "upstream", None)
    model = getattr(upstream, "model", None)
    return model if isinstance(model, str) else ctx.model.name
