"""One end-to-end episode: route the query's tools, give them a place to work, run the loop.

Written once and used three ways: by a case in pytest's thread (:mod:`pytest_gta.run.runner`),
by a pool thread running episodes ahead (:mod:`pytest_gta.run.pipeline`), and, opened but
driven in lockstep with the others, by a batch engine before the loop (:mod:`pytest_gta.run.ahead`).
Whichever way it runs, the same backends serve the same tools with the same files visible, so
a case's replies do not depend on how it was scheduled.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pytest_gta.case import Case
from pytest_gta.errors import GtaUnavailableError
from pytest_gta.models.base import BaseModelAdapter
from pytest_gta.run import loops
from pytest_gta.run.context import RunContext
from pytest_gta.tools import ToolContext
from pytest_gta.vocabulary import ProtocolName


@dataclass(frozen=True)
class Opened:
    """An episode set up but not run: its loop, and which backend serves each of its tools."""

    steps: loops.EpisodeSteps
    backends: dict[str, str]


@dataclass
class Played:
    """A finished end-to-end episode and which backend served each of its tools."""

    episode: loops.Episode
    backends: dict[str, str] = field(default_factory=dict)


@dataclass
class Ahead:
    """A case's end-to-end episode, generated before pytest reached the case."""

    #: The episode, or why it could not be played (raised in the case).
    outcome: Played | BaseException
    #: The case's (score, verdict) when the episode was scored where it ended, in a pool
    #: thread (:mod:`pytest_gta.run.pipeline`); ``None``: the case scores it.
    scored: tuple[Any, Any] | None = None


def open_episode(case: Case, ctx: RunContext, protocol: ProtocolName) -> Opened:
    """Route ``case``'s tools and start its loop; nothing is sent to the model yet.

    Raises:
        GtaUnavailableError: no tool backends, or none that offers one of the query's tools.
    """
    if ctx.tools is None:
        raise GtaUnavailableError("end-to-end mode needs tool backends (--gta-tools)")
    routes = ctx.tools.route(case.query)
    context = ToolContext(ctx.dataset, case.query, ctx.output_dir)
    steps = loops.e2e_episode(
        ctx.dataset,
        case.query,
        protocol,
        ctx.tools.runner(routes, context),
        max_turns=ctx.max_turns,
        epoch=case.epoch,
        visible=context.visible_roots(),
    )
    return Opened(steps, {name: backend.name for name, backend in routes.items()})


def play(case: Case, ctx: RunContext, model: BaseModelAdapter) -> Played:
    """Run ``case``'s end-to-end episode with ``model``, one request at a time.

    ``model`` is the context's model or a wrapper of it (the pool's, which refuses requests
    once the pool stops).

    Raises:
        GtaUnavailableError: nothing to run it with (see :func:`open_episode`).
        GtaInfrastructureError: the model or a tool backend broke.
    """
    opened = open_episode(case, ctx, model.protocol)
    return Played(loops.drive(opened.steps, model), opened.backends)
