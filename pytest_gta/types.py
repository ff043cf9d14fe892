"""Neutral types shared by the agent loops, model adapters and tool backends.

Providers and tool servers each have their own wire format; everything inside the harness speaks
these small immutable types, and each provider gets a pure converter pair on its edge.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from pytest_gta.vocabulary import Mode, ProtocolName, tool_category

Role = Literal["system", "user", "assistant", "tool"]


@dataclass(frozen=True)
class ToolParam:
    """One input or output of a tool, as described in a tool meta."""

    type: str
    name: str | None
    description: str | None = None
    optional: bool = False
    default: Any = None
    filetype: str | None = None


@dataclass(frozen=True)
class ToolMeta:
    """A tool's self-description: what the agent is told about the tool."""

    name: str
    description: str
    inputs: tuple[ToolParam, ...]
    outputs: tuple[ToolParam, ...]

    @property
    def required(self) -> tuple[str, ...]:
        """Names of the inputs a call must pass."""
        return tuple(p.name for p in self.inputs if not p.optional and p.name is not None)

    def input(self, name: str) -> ToolParam | None:
        """Return the input called ``name``, if the tool has one."""
        for param in self.inputs:
            if param.name == name:
                return param
        return None

    @property
    def category(self) -> str:
        """The tool's GTA category (``none`` for custom tools)."""
        return tool_category(self.name)


@dataclass(frozen=True)
class ToolCall:
    """A tool call: the tool's name and the arguments the model passed.

    ``id`` is the provider's call id (``native`` protocol); ReAct calls have none.
    """

    name: str
    arguments: dict[str, Any]
    id: str = ""


@dataclass(frozen=True)
class ChatMessage:
    """One message of a chat request.

    The ReAct protocol uses only ``role`` and ``content``. The ``native`` protocol adds the
    assistant's structured ``tool_calls``, the ``tool_call_id`` a ``tool`` message answers, and
    ``images`` (absolute paths) that vision models receive as pictures.
    """

    role: Role
    content: str
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    images: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, str]:
        """The OpenAI-style ``{role, content}`` dict."""
        return {"role": self.role, "content": self.content}


@dataclass(frozen=True)
class CaseContext:
    """Which case, and which call within it, a model request belongs to.

    Real models ignore it; the ``oracle`` and ``mock`` models and caches key on it.
    """

    qid: str
    mode: Mode
    #: step mode: index of the reference assistant message; e2e: the turn number.
    index: int
    #: The sampling epoch (``--gta-epoch`` plus the ``--gta-epochs`` repetition): a sampled
    #: request of another epoch is another sample, so the response cache keys on it.
    epoch: int = 0


@dataclass(frozen=True)
class ModelRequest:
    """Everything a model adapter needs for one call."""

    messages: tuple[ChatMessage, ...]
    tools: tuple[ToolMeta, ...]
    case: CaseContext
    protocol: ProtocolName = "react"


@dataclass(frozen=True)
class Usage:
    """Token accounting of one or more calls, when the provider reports it.

    ``calls`` counts model calls and ``cached_calls`` those answered from the response cache
    (their tokens are counted, but they cost nothing).
    """

    input_tokens: int = 0
    output_tokens: int = 0
    calls: int = 0
    cached_calls: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            self.calls + other.calls,
            self.cached_calls + other.cached_calls,
        )


@dataclass(frozen=True)
class ModelOutput:
    """A model's reply. For the ReAct protocol only ``text`` matters.

    ``tool_calls`` carries structured calls of the ``native`` protocol.
    """

    text: str
    usage: Usage | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    #: Seconds the caller waited on the model for this output (a batch's time split evenly
    #: over its requests), stamped by the loop that asked (:mod:`pytest_gta.run.loops`), not
    #: by the adapter; ``None`` until then. Not part of the output's value: two outputs with
    #: the same reply are equal however long each took.
    model_s: float | None = field(default=None, compare=False)


@dataclass(frozen=True)
class ResultItem:
    """One output of a tool: text, or a file (``image``, ``audio``, ``file``) by path."""

    type: str
    content: Any

    def as_dict(self) -> dict[str, Any]:
        """The ``{type, content}`` dict the official records use."""
        return {"type": self.type, "content": self.content}


@dataclass(frozen=True)
class ToolResult:
    """What a tool returned."""

    items: tuple[ResultItem, ...] = field(default_factory=tuple)

    @classmethod
    def text(cls, text: str) -> ToolResult:
        """A single text output."""
        return cls((ResultItem("text", text),))

    def format(self) -> str:
        """The observation text, as Lagent's ``ActionReturn.format_result`` renders it."""
        parts = []
        for item in self.items:
            if item.type == "text":
                parts.append(str(item.content))
            else:
                parts.append(f"[{item.type}]({item.content})")
        return "\n".join(parts)
