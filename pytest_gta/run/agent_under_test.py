"""The agent under test (``--gta-agent``, ``--gta-agent-command``): its task, its result, its runs.

Issue 25: a team's own agent (its prompts, framework and loop) is evaluated in place of the
project's loop. Each case hands the agent an :class:`AgentTask` (the query, its input images, the
case's tools with their JSON schemas, the case's MCP URL, a direct Python tool client, and the
recording proxy's model URLs) and takes back the final answer. The tools the agent calls are
logged on the server side (:class:`pytest_gta.mcp.CaseTools`), and the episode is scored from
that log plus the answer exactly as the official end-to-end mode scores a model's
(:func:`pytest_gta.run.episode.play`).

Two kinds of agent, one interface (:class:`Agent`): a Python callable, sync or async, run in the
process (:class:`PythonAgent`, here), and a program run once per case in its own process group
(:class:`~pytest_gta.run.agent_command.CommandAgent`). Whatever goes wrong in an agent (an
exception, a crash, no answer in time) is the case's error, never the session's: it is raised
as :class:`AgentFailed` with what the agent said (redacted).
"""

from __future__ import annotations

import asyncio
import importlib
import importlib.util
import inspect
import json
import sys
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from pytest_gta import outward
from pytest_gta.errors import GtaBudgetExhausted, GtaInfrastructureError, GtaUsageError
from pytest_gta.flags import OPT_AGENT, OPT_AGENT_TIMEOUT
from pytest_gta.mcp.calls import CallLimitReached, CaseTools, LoggedCall
from pytest_gta.types import ToolResult, Usage

#: Characters of an agent's traceback or stderr kept for the case's message and the report.
TAIL_CHARS = 2000


class Endpoint(Protocol):
    """A case's MCP endpoint (:class:`pytest_gta.mcp.CaseEndpoint`)."""

    @property
    def url(self) -> str:
        """The streamable-HTTP URL, usable as it is by an MCP client."""
        ...

    def close(self) -> None:
        """Refuse later requests."""
        ...


class Gateway(Protocol):
    """The process's MCP server (:class:`pytest_gta.mcp.McpGateway`)."""

    def open(self, tools: CaseTools, *, bridged: bool = False) -> Endpoint:
        """A new endpoint serving ``tools`` (``bridged``: to a sandbox's bridge only)."""
        ...


class ProxyCase(Protocol):
    """A case's door into the recording proxy (:class:`pytest_gta.proxy.ProxyCase`)."""

    @property
    def openai_base_url(self) -> str:
        """OpenAI SDK ``base_url``."""
        ...

    @property
    def anthropic_base_url(self) -> str:
        """Anthropic SDK ``base_url``."""
        ...

    def exchanges(self) -> list[Any]:
        """The case's model requests, each with ``to_json()``."""
        ...

    def usage(self) -> Usage:
        """Tokens and calls of the case's requests."""
        ...

    def close(self) -> None:
        """Refuse later requests."""
        ...

    @property
    def exhausted(self) -> GtaBudgetExhausted | None:
        """The budget stop a request of the case ran into, if any."""
        ...


class Proxy(Protocol):
    """The process's recording model proxy (:class:`pytest_gta.proxy.ModelProxy`)."""

    def open(
        self, label: str, *, epoch: int = 0, query: str = "", bridged: bool = False
    ) -> ProxyCase:
        """A new per-case door.

        ``epoch``: the sampling epoch, for the response cache; ``query``: the case's query id,
        what a model in this process is asked about; ``bridged``: its URLs answer a sandbox's
        bridge only.
        """
        ...


class AgentFailed(GtaInfrastructureError):
    """The agent raised, crashed, printed no usable answer or ran out of time: the case errors.

    The message is one line (the report's case message is one line); ``detail`` is what the
    agent said (its traceback, its stderr's end, redacted), shown above it in the terminal.
    ``outcome`` keeps what is known of the run (its exit status, its stderr's tail).
    """

    def __init__(self, message: str, outcome: AgentOutcome | None = None, detail: str = "") -> None:
        super().__init__(message)
        self.outcome = outcome
        self.detail = detail


@dataclass(frozen=True)
class AgentResult:
    """What an agent may return instead of the bare answer text.

    ``images``: paths of images the agent produced (shown in the report; GTA's Ans+I is scored
    from the image-generation calls in the tool log, as the official evaluator does).
    ``usage``: tokens the agent spent outside the proxy, if it counts them (the proxy's count wins
    when the agent's model traffic went through it).
    """

    answer: str
    images: tuple[str, ...] = ()
    usage: Usage | None = None


class ToolClient:
    """The case's tools for an agent that does not speak MCP: ``task.tools.call(name, **args)``.

    Calls go to the same :class:`~pytest_gta.mcp.CaseTools` the case's MCP endpoint serves, so
    they are logged and scored alike. A call answers text as MCP's text content does: the tool's
    outputs as the ReAct observation shows them (an image as its absolute path), or the error's
    message; the call limit reached answers its message too, never an exception, so an agent
    that floods the tools ends with a scored episode.
    """

    def __init__(self, tools: CaseTools) -> None:
        self._tools = tools
        self._closed = threading.Event()

    def schemas(self) -> list[dict[str, Any]]:
        """The case's tools: ``name``, ``description`` and ``inputSchema`` (JSON Schema)."""
        return self._tools.schemas()

    def call(self, name: str, /, **arguments: Any) -> str:
        """Call tool ``name`` with keyword ``arguments``; its output text (or error message)."""
        return self.call_json(name, arguments)

    def call_json(self, name: str, arguments: Any) -> str:
        """Call tool ``name`` with any JSON value as its arguments (a malformed one is logged)."""
        if self._closed.is_set():
            return "this case has ended: its tools take no more calls"
        try:
            logged = self._tools.call(name, arguments)
        except CallLimitReached as exc:
            return str(exc)
        return reply_text(logged)

    def close(self) -> None:
        """Refuse later calls (an agent's thread that outlived its case)."""
        self._closed.set()


def reply_text(logged: LoggedCall) -> str:
    """A logged call's answer as text: the outputs as the observation shows them, or the error."""
    record = logged.record
    if record.state == "SUCCESS" and record.errmsg is None:
        return ToolResult(record.result or ()).format()
    return record.errmsg or record.state


@dataclass(frozen=True)
class AgentTask:
    """One case as an agent under test receives it.

    The text and image paths are the query's as the official end-to-end prompt gives them to a
    model (the files message lists the same absolute paths). The tools are the case's own
    (toolmeta's names and descriptions, a JSON Schema per tool), callable over MCP at
    :attr:`mcp_url` (any MCP client, e.g. ``mcp.Client(url)``) or through :attr:`tools`.
    :attr:`model_url` is the OpenAI-compatible base URL of the recording proxy for the run's
    model, in front of its endpoint or answering for a model in this process (``None`` only for
    recorded predictions): an agent that sends its model traffic there is counted, cached,
    budgeted and shown in the report; any API key works there.
    """

    case_id: str
    query_id: str
    text: str
    #: Absolute paths of the query's input files (images), in the query's order.
    image_paths: tuple[str, ...]
    #: The case's tools as MCP lists them: ``name``, ``description``, ``inputSchema``.
    tool_schemas: tuple[dict[str, Any], ...]
    #: The case's streamable-HTTP MCP endpoint (its secret path is the case's token).
    mcp_url: str | None
    tools: ToolClient
    #: The model id the proxy forwards to (the run's ``--gta-model``, as the endpoint names it).
    model: str
    temperature: float | None = None
    max_tokens: int | None = None
    #: OpenAI SDK ``base_url`` (``.../v1``) and Anthropic SDK ``base_url`` of the proxy.
    model_url: str | None = None
    anthropic_url: str | None = None
    #: Where a command agent's answer file goes; a scratch directory the agent may use.
    workdir: Path | None = field(default=None, compare=False)
    #: Where the agent writes a GTA-Workflow task's deliverables (``{deliverables_dir}``; in a
    #: sandbox, its own directory, brought back to the case's when the agent ends).
    deliverables_dir: Path | None = field(default=None, compare=False)

    def image_bytes(self) -> list[bytes]:
        """The input images' bytes, read now (the paths stay valid for the case's duration)."""
        return [Path(path).read_bytes() for path in self.image_paths]

    def to_json(self) -> dict[str, Any]:
        """The ``{query_file}`` a command agent reads: everything above but the Python client."""
        return {
            "case_id": self.case_id,
            "query_id": self.query_id,
            "query": self.text,
            "images": list(self.image_paths),
            "tools": list(self.tool_schemas),
            "mcp_url": self.mcp_url,
            "model": self.model,
            "temperature": self.temperature,
            "max_tokens": self.max_tokens,
            "model_url": self.model_url,
            "anthropic_url": self.anthropic_url,
        }

    def write_query_file(self, path: Path) -> Path:
        """Write :meth:`to_json` to ``path`` (UTF-8 JSON) and return it."""
        path.write_text(json.dumps(self.to_json(), ensure_ascii=False, indent=1), "utf-8")
        return path


@dataclass
class AgentOutcome:
    """What the report keeps of one agent run (the case detail's ``agent``)."""

    name: str
    answer: str | None = None
    images: tuple[str, ...] = ()
    usage: Usage | None = None
    #: A command agent's exit status (``None``: a Python agent, or killed on timeout).
    exit_status: int | None = None
    #: The tail of a command agent's stderr, or a Python agent's traceback, redacted.
    stderr_tail: str = ""
    #: Whether the run was stopped for the timeout.
    timed_out: bool = False
    duration: float = 0.0

    def to_json(self) -> dict[str, Any]:
        """The case detail's ``agent`` entry (builtins)."""
        out: dict[str, Any] = {"name": self.name, "answer": self.answer}
        if self.images:
            out["images"] = list(self.images)
        if self.exit_status is not None:
            out["exit_status"] = self.exit_status
        if self.stderr_tail:
            out["stderr_tail"] = self.stderr_tail
        if self.timed_out:
            out["timed_out"] = True
        out["duration"] = round(self.duration, 3)
        return out


class Agent(Protocol):
    """An agent under test: runs one case's task to its answer."""

    #: How the report and the terminal header name it (the callable's spec, or the command).
    name: str
    #: Whether it runs as a separate program (which reads ``{query_file}`` and no Python client).
    command: bool
    #: Whether it reaches the case's services through its sandbox's socket only, so that the
    #: services refuse the case's URLs to anyone else (:mod:`pytest_gta.peers`).
    bridged: bool

    def run(self, task: AgentTask, timeout: float) -> AgentOutcome:
        """The agent's answer to ``task`` within ``timeout`` seconds.

        Raises:
            AgentFailed: the agent raised, crashed or did not answer in time.
        """
        ...


def load_callable(spec: str, base: Path) -> Callable[..., Any]:
    """``MODULE:CALLABLE`` or ``path/to/file.py:CALLABLE`` (relative to ``base``), imported.

    Raises:
        GtaUsageError: the module does not import (its error shown), the name is missing, or
            it is not callable.
    """
    target, _, name = spec.rpartition(":")
    flag = f"{OPT_AGENT}={spec}"
    try:
        if target.endswith(".py") or "/" in target or "\\" in target:
            path = (base / Path(target).expanduser()).resolve()
            if not path.is_file():
                raise GtaUsageError(f"{flag}: no file {path}")
            module_name = f"_gta_agent_{abs(hash(str(path)))}"
            module = sys.modules.get(module_name)
            if module is None:
                loader_spec = importlib.util.spec_from_file_location(module_name, path)
                if loader_spec is None or loader_spec.loader is None:
                    raise GtaUsageError(f"{flag}: {path} is not a Python module")
                module = importlib.util.module_from_spec(loader_spec)
                sys.modules[module_name] = module
                try:
                    loader_spec.loader.exec_module(module)
                except BaseException:
                    del sys.modules[module_name]
                    raise
        else:
            module = importlib.import_module(target)
    except GtaUsageError:
        raise
    except Exception as exc:  # the user's module failed to import: show why
        raise GtaUsageError(
            f"{flag}: cannot import {target}: {type(exc).__name__}: {outward.clip(str(exc), 500)}"
        ) from None
    found = getattr(module, name, None)
    if found is None:
        raise GtaUsageError(f"{flag}: {target} has no attribute {name!r}")
    if not callable(found):
        raise GtaUsageError(f"{flag}: {target}.{name} is a {type(found).__name__}, not callable")
    return found  # type: ignore[no-any-return]


#: Characters of one string of a logged call kept in the report (a 3 MB argument is hostile).
LOGGED_CHARS = 10_000


def clip_strings(value: Any, limit: int = LOGGED_CHARS, level: int = 0) -> Any:
    """``value`` (JSON builtins) with every string over ``limit`` characters cut, saying so."""
    if isinstance(value, str):
        return value if len(value) <= limit else f"{value[:limit]}... [{len(value)} characters]"
    if level > 64:
        return value
    if isinstance(value, dict):
        return {k: clip_strings(v, limit, level + 1) for k, v in value.items()}
    if isinstance(value, list):
        return [clip_strings(v, limit, level + 1) for v in value]
    return value


def summarize_exception(exc: BaseException) -> str:
    """The agent's traceback, its last frames and message, redacted and cut to the tail."""
    lines = traceback.format_exception(type(exc), exc, exc.__traceback__, limit=-6)
    return tail("".join(lines))


def tail(text: str, limit: int = TAIL_CHARS) -> str:
    """The last ``limit`` characters of ``text``, redacted first (a key straddling the cut)."""
    text = outward.clean_text(text).strip()
    return text if len(text) <= limit else "..." + text[-(limit - 3) :]


def as_result(value: Any, name: str) -> AgentResult:
    """An agent's return value as an :class:`AgentResult` (text, or a result).

    Raises:
        AgentFailed: anything else (``None`` included): the agent gave no answer.
    """
    if isinstance(value, AgentResult):
        if not isinstance(value.answer, str):
            raise AgentFailed(
                f"agent {name} returned an AgentResult whose answer is a "
                f"{type(value.answer).__name__}, not text"
            )
        return value
    if isinstance(value, str):
        return AgentResult(value)
    raise AgentFailed(
        f"agent {name} returned {type(value).__name__}; return the final answer text or an "
        "AgentResult(answer, images, usage)"
    )


class PythonAgent:
    """A sync or async callable given the :class:`AgentTask`, run in this process.

    It runs in a thread of its own so that the case can stop waiting after ``timeout``; a sync
    callable cannot be stopped then (Python has no way to kill a thread) and is left to finish
    alone, its tool client refusing further calls; an async one is cancelled.
    """

    command = False
    bridged = False

    def __init__(self, spec: str, function: Callable[..., Any]) -> None:
        self.name = spec
        self._function = function

    def run(self, task: AgentTask, timeout: float) -> AgentOutcome:
        """Call the agent; its answer, or :class:`AgentFailed` (exception, timeout, no text)."""
        box: list[Any] = []
        done = threading.Event()

        def target() -> None:
            try:
                value = self._function(task)
                if inspect.isawaitable(value):
                    value = asyncio.run(_awaited(value, timeout))
                box.append(("ok", value))
            except BaseException as exc:  # the agent's own failure, reported in its case
                box.append(("error", exc))
            finally:
                done.set()

        started = time.monotonic()
        thread = threading.Thread(target=target, name=f"gta-agent-{task.case_id}", daemon=True)
        thread.start()
        finished = done.wait(timeout)
        duration = time.monotonic() - started
        if not finished:
            task.tools.close()
            outcome = AgentOutcome(self.name, timed_out=True, duration=duration)
            raise AgentFailed(
                f"agent {self.name} gave no answer within {timeout:g} s ({OPT_AGENT_TIMEOUT})",
                outcome,
            )
        kind, value = box[0]
        if kind == "error":
            if isinstance(value, AgentFailed):
                raise value
            summary = summarize_exception(value)
            outcome = AgentOutcome(self.name, stderr_tail=summary, duration=duration)
            said = outward.clip(" ".join(str(value).split()), 300)
            raise AgentFailed(
                f"agent {self.name} raised {type(value).__name__}: {said}", outcome, summary
            )
        result = as_result(value, self.name)
        return AgentOutcome(
            self.name,
            answer=result.answer,
            images=tuple(str(p) for p in result.images),
            usage=result.usage,
            duration=duration,
        )


async def _awaited(value: Any, timeout: float) -> Any:
    """``value`` awaited, cancelled after ``timeout`` (the case has stopped waiting by then)."""
    return await asyncio.wait_for(value, timeout)
