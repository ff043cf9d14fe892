"""One case's tools as an agent outside the project's loop calls them, and the log of its calls.

An agent under test (issue 25) does not speak ReAct to the project: it calls tools by name
with a JSON object of arguments, over MCP or through a Python client. Each such call is turned
into the :class:`~pytest_gta.protocol.react.ParsedReply` a ReAct turn would have produced and
run through :func:`~pytest_gta.protocol.react.execute` with the run's routed backends and the
same visible directories as :func:`pytest_gta.run.episode.open_episode` uses. So a call the
project's own loop would record as ``ARGS_ERROR`` (unknown or missing arguments), ``API_ERROR``
(a missing file, a backend's refusal) or the invalid-action record (an unknown tool) is recorded
the same way here, and the log scores with the official end-to-end metrics unchanged.

Arguments come from outside the process: anything JSON can carry (and some things it cannot,
from SDKs that decode for us) must end as a logged error record, never as a traceback.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_gta import outward
from pytest_gta.dataset import Dataset, Query
from pytest_gta.flags import OPT_MAX_TURNS
from pytest_gta.protocol import native
from pytest_gta.protocol import react as p
from pytest_gta.tools import BaseToolBackend, ToolContext, ToolSet
from pytest_gta.types import ToolMeta
from pytest_gta.vocabulary import INVALID_ACTION, NO_ACTION

#: The longest arguments text (in characters) a call may carry. Every GTA tool input is a short
#: scalar (a path, an expression, a sentence); past this the call is the agent's malformed input
#: (``ARGS_ERROR``) and is neither parsed nor kept whole in the log.
MAX_ARGUMENT_CHARS = 1_000_000
#: How much of an over-long or unwritable arguments text the error record quotes.
QUOTED_CHARS = 200

_LONE_SURROGATE = re.compile("[\ud800-\udfff]")
_OVERSIZED = "<arguments of "


@dataclass(frozen=True)
class LoggedCall:
    """One call an agent made, as the server side saw and recorded it."""

    #: The tool name as the agent sent it (the record's ``type`` may differ: an unknown name is
    #: recorded as the official ``InvalidAction``).
    name: str
    #: The JSON value the agent sent, redacted and made writable (:func:`pytest_gta.outward.clean`).
    arguments: Any
    #: The official record: state, error message and outputs.
    record: p.ActionRecord
    #: ``time.time()`` when the call arrived.
    started: float
    #: Seconds the call took (validation and backend).
    duration: float

    @property
    def ok(self) -> bool:
        """Whether the call succeeded (the tool ran and answered)."""
        return self.record.state == "SUCCESS"

    def to_json(self) -> dict[str, Any]:
        """The call as the report's ``tool_log`` entry: name, arguments, output, error, duration."""
        record = self.record
        output = None if record.result is None else [i.as_dict() for i in record.result]
        error = None
        if record.errmsg is not None:
            error = {"type": record.state, "msg": record.errmsg}
        return {
            "name": self.name,
            "arguments": self.arguments,
            "output": output,
            "error": error,
            "duration": round(self.duration, 3),
        }


class CallLimitReached(Exception):
    """The case's call limit (``max_calls``, the run's ``--gta-max-turns``) is spent."""

    def __init__(self, limit: int) -> None:
        super().__init__(
            f"the limit of {limit} tool calls for this task is reached ({OPT_MAX_TURNS}); "
            "no more tools can be called: give the final answer"
        )
        self.limit = limit


def _quote(text: str) -> str:
    return outward.clean_text(text[:QUOTED_CHARS]) + ("..." if len(text) > QUOTED_CHARS else "")


def action_input(arguments: Any) -> str:
    """The ``Action Input`` text a ReAct turn would carry for ``arguments`` (any value).

    A JSON object becomes its JSON text, which :func:`~pytest_gta.protocol.react.execute`
    parses and checks against the tool's inputs as it does a model's. Anything else (not an
    object, nested too deeply, numbers past Python's digit limit, lone surrogates, which no
    UTF-8 JSON text can hold, or over :data:`MAX_ARGUMENT_CHARS`) becomes text that is not a
    JSON object, so the call is recorded as the official ``invalid json format`` ``ARGS_ERROR``.
    """
    decoded = native.object_arguments(arguments)
    invalid = decoded.get(native.INVALID_JSON)
    if isinstance(invalid, str):
        text = invalid
        if isinstance(arguments, str):
            # An agent that sends its arguments as a JSON *string* sends text, as ReAct does.
            text = arguments
    else:
        text = json.dumps(decoded, ensure_ascii=False)
    if len(text) > MAX_ARGUMENT_CHARS:
        return f"{_OVERSIZED}{len(text)} characters, over {MAX_ARGUMENT_CHARS}: {_quote(text)}>"
    if _LONE_SURROGATE.search(text):
        return f"<arguments with a lone surrogate, not UTF-8: {_quote(text)}>"
    return text


def _routes(
    toolset: ToolSet, query: Query, metas: tuple[ToolMeta, ...], all_tools: bool
) -> dict[str, BaseToolBackend]:
    if not all_tools:
        return toolset.route(query)
    routes = {}
    for meta in metas:
        chain = toolset.chain(meta.name)
        if chain:
            routes[meta.name] = chain[0]
    return routes


class CaseTools:
    """One case's tools: what an endpoint serves, over the run's routed backends, and the log.

    Calls may come from several threads at once (an agent calling tools in parallel, the
    server's event loop handing calls to worker threads); the log keeps them in arrival order.
    """

    def __init__(
        self,
        dataset: Dataset,
        query: Query,
        toolset: ToolSet,
        output_dir: Path,
        *,
        max_calls: int,
        all_tools: bool = False,
        deadline: float | None = None,
        epoch: int = 0,
    ) -> None:
        """Route the tools, as a run routes them for ``query``.

        ``all_tools``: serve every tool of ``toolmeta.json`` that a backend offers (for trying
        an agent by hand) instead of the query's own tools. ``deadline``: ``time.monotonic()``
        when the case ends (the agent's ``--gta-agent-timeout``); a call gets at most the time
        left, and one made after it does not run
        (:meth:`~pytest_gta.tools.ToolContext.time_left`).

        Raises:
            GtaUnavailableError: (not ``all_tools``) no backend offers one of the query's tools.
        """
        self.dataset = dataset
        self.query = query
        self.max_calls = max_calls
        self.output_dir = output_dir
        candidates = (
            tuple(dataset.toolmeta.values()) if all_tools else tuple(dataset.tool_metas(query))
        )
        routes = _routes(toolset, query, candidates, all_tools)
        #: The case's tools, in the order the agent is shown them.
        self.metas: tuple[ToolMeta, ...] = tuple(m for m in candidates if m.name in routes)
        #: Which backend serves each tool (the report's "which backend served each tool").
        self.backends: dict[str, str] = {name: b.name for name, b in routes.items()}
        output_dir.mkdir(parents=True, exist_ok=True)
        context = ToolContext(dataset, query, output_dir, deadline, epoch)
        #: The faults the case's calls met (:mod:`pytest_gta.faults`; ``None`` without a spec).
        self.faults = toolset.fault_log(context)
        self._tools = {m.name: m for m in self.metas}
        self._run = toolset.runner(routes, context)
        self._visible = context.reach
        self._lock = threading.Lock()
        self._started = 0
        self._done: dict[int, LoggedCall] = {}
        self._failure: BaseException | None = None

    @property
    def failure(self) -> BaseException | None:
        """The first exception a backend raised that was not the agent's doing (the case errors)."""
        return self._failure

    def schemas(self) -> list[dict[str, Any]]:
        """The tools as MCP lists them: name, description and input JSON Schema."""
        return [tool_schema(meta) for meta in self.metas]

    def call(self, name: str, arguments: Any) -> LoggedCall:
        """Run one call as an end-to-end turn of the project's loop would, and log it.

        Raises:
            CallLimitReached: ``max_calls`` calls were made already (this one is not logged).
            GtaInfrastructureError: a backend is down (also kept as :attr:`failure`).
        """
        started = time.time()
        clock = time.perf_counter()
        with self._lock:
            if self._started >= self.max_calls:
                raise CallLimitReached(self.max_calls)
            index = self._started
            self._started += 1
        text = action_input(arguments)
        parsed = p.ParsedReply("", _action(name, self._tools), text)
        try:
            record = p.execute(parsed, self._tools, self._run, visible=self._visible)
        except BaseException as exc:
            with self._lock:
                self._failure = self._failure or exc
            raise
        logged = LoggedCall(
            name=_quote(name) if isinstance(name, str) else outward.clean_text(repr(name)),
            # An over-long value is logged as the placeholder the record holds, not kept whole.
            arguments=text if text.startswith(_OVERSIZED) else outward.clean(arguments),
            record=record,
            started=started,
            duration=time.perf_counter() - clock,
        )
        with self._lock:
            self._done[index] = logged
        return logged

    def log(self) -> list[LoggedCall]:
        """The finished calls, in the order they arrived (a copy)."""
        with self._lock:
            return [self._done[i] for i in sorted(self._done)]

    def predictions(self) -> list[dict[str, Any]]:
        """The log as official end-to-end prediction steps (a call and its tool return each).

        The agent's final answer is not here: the caller appends
        ``{"role": "assistant", "content": answer}``.
        """
        steps: list[dict[str, Any]] = []
        for logged in self.log():
            steps.append(logged.record.to_step())
            steps.append(logged.record.to_tool_return())
        return steps


def _action(name: str, tools: Mapping[str, ToolMeta]) -> str:
    """The action name :func:`~pytest_gta.protocol.react.execute` is given for tool ``name``.

    The built-in actions' names are not tools an agent can call: ``FinishAction`` would end
    the episode and ``NoAction`` is the missing-action record, so they are invalid actions here.
    """
    if name in (p.FINISH_ACTION, NO_ACTION):
        return INVALID_ACTION
    return name if isinstance(name, str) else INVALID_ACTION


def tool_schema(meta: ToolMeta) -> dict[str, Any]:
    """One tool as MCP lists it: ``name``, ``description`` and ``inputSchema``.

    The schema is the one the ``native`` protocol sends providers (types from toolmeta, file
    inputs as strings whose description says they take a path), so the two agree.
    """
    schema = native.json_schema(meta)
    return {"name": meta.name, "description": meta.description, "inputSchema": schema}
