"""A case's recorded steps as Inspect AI chat messages: the transcript of an eval log's sample.

The transcript is where the two worlds' shapes meet: recorded steps are whatever JSON the model
loop, an agent's tool log or an OpenCompass prediction file wrote
(:class:`~pytest_gta.results.recorded.Step`), and Inspect wants typed messages, calls and tool
replies, with step mode's reference prefix shown between the predictions. That conversion is
its own concern, apart from the log around it (:mod:`pytest_gta.report.inspect_log`: the
sample's score and metadata, the results, the eval spec, the writing).

``inspect_ai`` is imported inside the functions only, as in the log's module: a heavy optional
dependency that must never be on the plugin's import path.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from pydantic import JsonValue

from pytest_gta.dataset import Dataset, Query
from pytest_gta.results.case import CaseResult
from pytest_gta.results.recorded import Step

if TYPE_CHECKING:
    from inspect_ai.model import ChatMessage, ChatMessageAssistant
    from inspect_ai.tool import ToolCall


def text_of(value: Any) -> str:
    """Any recorded value as text: a string as it is, anything else as JSON."""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)


def field_of(record: JsonValue, key: str) -> JsonValue:
    """``key`` of a recorded JSON object (``None``: absent, or not an object).

    Recorded steps are kept as their model or harness wrote them, any JSON
    (:class:`~pytest_gta.results.recorded.Step`): the transcript shows whatever shape they have.
    """
    if isinstance(record, dict) and key in record:
        return record[key]
    return None


def _arguments(value: JsonValue) -> tuple[dict[str, Any], str | None]:
    """A recorded call's arguments as Inspect holds them, and why they are not an object.

    The official records keep what the model wrote; arguments that are not a JSON object (a
    raw string the model could not format) are an argument error there, and a parse error here.
    """
    if isinstance(value, dict):
        return {str(k): v for k, v in value.items()}, None
    return {}, f"arguments as written: {text_of(value)}"


def _tool_calls(step: Step, turn: int) -> list[ToolCall]:
    """The calls of an assistant step (``{"type": "function", "function": {...}}`` each).

    All of them as recorded, malformed ones too (``Step.call`` is the first well-formed one).
    """
    from inspect_ai.tool import ToolCall  # a heavy optional dependency (see the module doc)

    calls = field_of(step.root, "tool_calls")
    if not isinstance(calls, list):
        return []
    out = []
    for n, call in enumerate(calls):
        function = field_of(call, "function")
        if not isinstance(function, dict):
            function = {"name": None, "arguments": call}
        arguments, problem = _arguments(field_of(function, "arguments"))
        name = field_of(function, "name")
        out.append(
            ToolCall(
                id=f"call_{turn}_{n}",
                function=name if isinstance(name, str) else text_of(name),
                arguments=arguments,
                parse_error=problem,
            )
        )
    return out


def _tool_output(content: JsonValue) -> str:
    """A tool step's content (``[{"type": "text", "content": ...}]``) as the text it showed."""
    if content is None:
        return ""
    if not isinstance(content, list):
        return text_of(content)
    parts = []
    for item in content:
        if field_of(item, "type") == "text":
            parts.append(text_of(field_of(item, "content")))
        elif isinstance(item, dict) and "content" in item:
            # An image or file the tool made: its path (the viewer cannot open local files).
            parts.append(f"[{text_of(field_of(item, 'type'))}] {text_of(item['content'])}")
        else:
            parts.append(text_of(item))
    return "\n".join(parts)


def _assistant(
    recorded: Step, turn: int, reply: str | None, model: str, **metadata: Any
) -> ChatMessageAssistant:
    """An assistant step: the raw reply when there is one (its Thought), the parsed calls."""
    from inspect_ai.model import ChatMessageAssistant  # a heavy optional dependency

    content = recorded.content
    text = reply if reply is not None else ("" if content is None else text_of(content))
    error = field_of(recorded.root, "error")
    if error is not None:
        metadata["error"] = error
    return ChatMessageAssistant(
        content=text,
        tool_calls=_tool_calls(recorded, turn) or None,
        model=model,
        source="generate",
        metadata=metadata or None,
    )


def _error_text(error: JsonValue) -> str:
    """An errored step's ``{"type": state, "msg": ...}`` as one line."""
    if isinstance(error, dict):
        return f"{text_of(field_of(error, 'type'))}: {text_of(field_of(error, 'msg'))}"
    return text_of(error)


def _aligned_replies(case: CaseResult) -> list[str | None]:
    """Each step's raw model reply, where the replies are one per assistant step (our loops)."""
    assistant = [s for s in case.steps if s.record is not None and s.role != "tool"]
    if len(case.replies) == len(assistant):
        return list(case.replies)
    return [None] * len(assistant)


def e2e_messages(case: CaseResult, model: str) -> list[ChatMessage]:
    """An end-to-end episode: each turn's reply and calls, each call's tool reply."""
    from inspect_ai.model import (  # a heavy optional dependency (see the module doc)
        ChatMessageSystem,
        ChatMessageTool,
    )
    from inspect_ai.tool import ToolCallError

    replies = iter(_aligned_replies(case))
    messages: list[ChatMessage] = []
    last: ChatMessageAssistant | None = None
    for turn, step in enumerate(case.steps):
        if step.record is None:
            messages.append(
                ChatMessageSystem(content=text_of(step.root), metadata={"recorded": True})
            )
            continue
        if step.role == "tool":
            call = last.tool_calls[0] if last is not None and last.tool_calls else None
            error = last.metadata.get("error") if last is not None and last.metadata else None
            text = _tool_output(step.content)
            messages.append(
                ChatMessageTool(
                    content=text or (_error_text(error) if error is not None else ""),
                    tool_call_id=call.id if call else None,
                    function=call.function if call else None,
                    error=ToolCallError("unknown", _error_text(error)) if error else None,
                )
            )
            last = None
            continue
        last = _assistant(step, turn, next(replies, None), model)
        messages.append(last)
    return messages


def _reference_line(gold: Mapping[str, Any], output: Mapping[str, Any] | None) -> str:
    """A reference step as the next step-mode request saw it: the call and its output."""
    calls = gold.get("tool_calls")
    if isinstance(calls, list) and calls and isinstance(calls[0], Mapping):
        function = calls[0].get("function") or {}
        line = f"called {text_of(function.get('name'))} with {text_of(function.get('arguments'))}"
        if output is not None:
            line += f" and got: {_tool_output(output.get('content'))}"
        return line
    return f"answered: {text_of(gold.get('content'))}"


def step_messages(
    case: CaseResult, dataset: Dataset, query: Query | None, model: str
) -> list[ChatMessage]:
    """Step mode: each step's prediction, then the reference step the next one was given.

    Every prediction is its own request on the reference prefix (OpenCompass
    ``infer_every_with_gt``): the model's calls were checked, never run, and the history each
    request saw is the reference chain's, shown between the predictions as system messages.
    """
    from inspect_ai.model import ChatMessageSystem  # a heavy optional dependency

    replies = iter(_aligned_replies(case))
    dialogs = dataset.reference_dialogs(query) if query is not None else []
    gold = [i for i, m in enumerate(dialogs) if m.get("role") == "assistant"]
    messages: list[ChatMessage] = []
    for n, step in enumerate(case.steps):
        if step.record is not None:
            messages.append(_assistant(step, n, next(replies, None), model, step=n + 1))
        else:
            messages.append(
                ChatMessageSystem(content=text_of(step.root), metadata={"recorded": True})
            )
        if n < len(gold):
            index = gold[n]
            after = dialogs[index + 1] if index + 1 < len(dialogs) else None
            output = after if after is not None and after.get("role") == "tool" else None
            messages.append(
                ChatMessageSystem(
                    content=f"Reference step {n + 1}: " + _reference_line(dialogs[index], output),
                    source="input",
                    metadata={"reference_step": n + 1},
                )
            )
    return messages
