"""What ran for a case, kept as recorded: its steps, the agent's run, tool calls, model requests.

A GTA case (:class:`~pytest_gta.results.case.CaseResult`) and a GTA-Workflow task
(:class:`~pytest_gta.results.workflow.WorkflowCase`) carry the same records of what the model or
the agent under test did, and the HTML pages of both show them with the same code; so the
records are their own module, under neither benchmark's classes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from pydantic import Field, JsonValue, RootModel

from pytest_gta.results.base import Doc, JsonObject, omitted

__all__ = [
    "AgentRun",
    "CaseUsage",
    "Exchange",
    "ExchangeUsage",
    "LoggedToolCall",
    "Step",
    "StepError",
    "ToolCall",
    "ToolOutputError",
]


@dataclass(frozen=True)
class ToolCall:
    """The first tool call of a step: the tool's name and its arguments as recorded."""

    name: str
    arguments: JsonValue


@dataclass(frozen=True)
class StepError:
    """The error record of a failed call (Lagent's ``ActionStatusCode`` and message)."""

    type: JsonValue
    msg: str


class Step(RootModel[JsonValue]):
    """One recorded step: a message of the episode, kept exactly as it was recorded.

    Steps come from the model's loop, from an agent's tool log, or from an OpenCompass
    prediction file, which may hold any value where the official evaluator reads nothing
    (:func:`pytest_gta.scoring.metrics.check_steps`). So the record is kept as written, and
    read through typed views: :attr:`role`, :attr:`content`, :attr:`call`, :attr:`error`.
    """

    @property
    def record(self) -> Mapping[str, JsonValue] | None:
        """The step as an object (``None`` for a value that is not a step record)."""
        return self.root if isinstance(self.root, dict) else None

    @property
    def role(self) -> str | None:
        """``assistant``, ``tool``, ``user``, ... (``None``: not a step record)."""
        record = self.record
        role = record.get("role") if record is not None else None
        return role if isinstance(role, str) else None

    @property
    def content(self) -> JsonValue:
        """What the message says (text, or a tool's outputs)."""
        record = self.record
        return record.get("content") if record is not None else None

    @property
    def is_call(self) -> bool:
        """The step calls a tool (it has ``tool_calls``)."""
        record = self.record
        return record is not None and bool(record.get("tool_calls"))

    @property
    def call(self) -> ToolCall | None:
        """The step's (first) tool call, if its record is well formed."""
        record = self.record
        calls = record.get("tool_calls") if record is not None else None
        if not isinstance(calls, list) or not calls or not isinstance(calls[0], dict):
            return None
        function = calls[0].get("function")
        if not isinstance(function, dict):
            return None
        return ToolCall(str(function.get("name")), function.get("arguments"))

    @property
    def error(self) -> StepError | None:
        """The call's error record, if the call failed."""
        record = self.record
        error = record.get("error") if record is not None else None
        if not isinstance(error, dict):
            return None
        return StepError(error.get("type"), str(error.get("msg")))

    @property
    def is_answer(self) -> bool:
        """The step is the model's answer (an assistant message without a call)."""
        return self.role == "assistant" and not self.is_call

    def output_images(self) -> list[str]:
        """Paths of the images a tool's output step holds, in order."""
        if self.role != "tool":
            return []
        content = self.content
        items = content if isinstance(content, list) else [content]
        return [
            str(item.get("content"))
            for item in items
            if isinstance(item, dict) and item.get("type") == "image"
        ]


class CaseUsage(Doc):
    """The case's model calls and their tokens."""

    input_tokens: int = Field(ge=0)
    output_tokens: int = Field(ge=0)
    calls: int = Field(ge=0)
    """Calls that reached the model."""
    cached_calls: int = Field(ge=0)
    """Calls answered from the response cache."""

    @property
    def any(self) -> bool:
        """Whether anything was counted."""
        return bool(self.calls or self.cached_calls or self.input_tokens or self.output_tokens)

    @classmethod
    def total(cls, usages: Iterable[CaseUsage | None]) -> CaseUsage:
        """The sum of ``usages`` (``None``: nothing counted)."""
        counted = [u for u in usages if u is not None]
        return cls(
            input_tokens=sum(u.input_tokens for u in counted),
            output_tokens=sum(u.output_tokens for u in counted),
            calls=sum(u.calls for u in counted),
            cached_calls=sum(u.cached_calls for u in counted),
        )


class AgentRun(Doc):
    """What the agent under test did for the case (``--gta-agent``, ``--gta-agent-command``)."""

    name: str
    """The agent's callable or command."""
    answer: str | None
    images: list[str] = Field(default_factory=list, exclude_if=lambda v: not v)
    """Images the agent's answer names."""
    exit_status: int | None = omitted()
    """A command agent's exit status (absent: a Python agent, or killed on timeout)."""
    stderr_tail: str | None = omitted()
    """The end of a command agent's stderr (redacted)."""
    timed_out: bool = Field(default=False, exclude_if=lambda v: not v)
    duration: float


class ToolOutputError(Doc):
    """A failed tool call's error record."""

    type: str
    msg: str


class LoggedToolCall(Doc):
    """One tool call of the agent under test, as the case's MCP server logged it."""

    name: str
    arguments: JsonValue
    output: list[JsonObject] | None
    """The tool's outputs (``{type, content}`` items); ``None`` when it failed."""
    error: ToolOutputError | None
    duration: float


class ExchangeUsage(Doc):
    """Tokens of one model request through the proxy."""

    input_tokens: int
    output_tokens: int
    calls: int
    cached_calls: int


class Exchange(Doc):
    """One model request of the agent under test through the case's recording proxy."""

    api: str
    """``chat.completions``, ``responses`` or ``messages`` (``""``: refused before known)."""
    requested_model: str | None
    request: JsonValue
    """The body as forwarded, redacted, images elided."""
    reply: str
    usage: ExchangeUsage | None
    status: int
    cached: bool
    retries: int
    duration: float
    streamed: bool
    error: str | None
