"""The ``native`` protocol: the provider's own function calling instead of ReAct text.

The loops are the same as for ReAct (same modes, same records, same scoring); only the
conversation differs. Tools travel as schemas in the request (``ModelRequest.tools``), a tool
call is a structured assistant message, its result a ``tool`` message answering the call's id,
and image files ride along as ``images`` so vision models see them. A reply with a tool call is
parsed into the same :class:`~pytest_gta.protocol.react.ParsedReply` a ReAct turn gives (only
the first call of a turn runs, as ReAct runs one action per turn); a reply without one is the
final answer. Scores under this protocol are a different experiment from the leaderboard's.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pytest_gta import jsonsafe
from pytest_gta.dataset import call_function
from pytest_gta.protocol import react as p
from pytest_gta.types import ChatMessage, ModelOutput, ToolCall, ToolMeta

NATIVE_SYSTEM_PROMPT = (
    "You are an assistant who can utilize external tools. Call a tool when you need its result; "
    "the files of the task are given by absolute path. When you know the answer, reply with it "
    "directly and call no tool."
)
#: Key under which adapters keep tool-call arguments that were not a JSON object.
INVALID_JSON = "__invalid_json__"
IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".gif", ".webp", ".bmp")

_JSON_TYPES = {
    "text": "string",
    "image": "string",
    "audio": "string",
    "file": "string",
    "int": "integer",
    "float": "number",
    "bool": "boolean",
}


def json_schema(meta: ToolMeta) -> dict[str, Any]:
    """A tool's JSON Schema (``parameters`` of OpenAI tools, ``input_schema`` of Anthropic)."""
    properties = {}
    for param in meta.inputs:
        if param.name is None:
            continue
        description = param.description or ""
        if param.type in ("image", "audio", "file"):
            description = f"{description} (absolute path of the {param.type} file)".strip()
        properties[param.name] = {
            "type": _JSON_TYPES.get(param.type, "string"),
            "description": description,
        }
    return {"type": "object", "properties": properties, "required": list(meta.required)}


def images_of(paths: Sequence[str]) -> tuple[str, ...]:
    """The paths that are pictures a vision model can be shown."""
    return tuple(x for x in paths if x.lower().endswith(IMAGE_SUFFIXES) and Path(x).is_file())


def _call_id(index: int) -> str:
    return f"call_{index}"


def step_history(
    history: Sequence[Mapping[str, Any]], files: Sequence[str], root: str
) -> list[ChatMessage]:
    """A reference prefix as a native conversation (files first, tool calls structured)."""
    out: list[ChatMessage] = []
    if files:
        out.append(ChatMessage("user", p.files_message(files), images=images_of(files)))
    calls = 0
    for step in history:
        role = step.get("role")
        if role == "user":
            out.append(ChatMessage("user", str(step.get("content"))))
        elif role == "assistant" and step.get("tool_calls"):
            function = call_function(step)
            calls += 1
            arguments = function["arguments"]
            if not isinstance(arguments, Mapping):  # a raw-string reference (a data quirk)
                arguments = {INVALID_JSON: str(arguments)}
            call = ToolCall(function["name"], dict(arguments), _call_id(calls))
            out.append(ChatMessage("assistant", "", tool_calls=(call,)))
        elif role == "tool":
            content = step.get("content")
            text = p.format_tool_content(content) if content else ""
            images: tuple[str, ...] = ()
            if isinstance(content, Mapping) and content.get("type") == "image":
                images = images_of([str(Path(root) / str(content.get("content")))])
            out.append(ChatMessage("tool", text, tool_call_id=_call_id(calls), images=images))
        elif role == "assistant" and step.get("content"):
            out.append(ChatMessage("assistant", str(step["content"])))
    return out


def decode_arguments(raw: str | None) -> dict[str, Any]:
    """A tool call's JSON arguments text as a dict; anything else is kept raw (``ARGS_ERROR``).

    Malformed, nested too deeply (past :data:`~pytest_gta.jsonsafe.MAX_DEPTH`: every GTA tool
    input is a scalar, so no real call is refused) or holding a number past Python's digit limit:
    all are the model's malformed call, recorded as ReAct records a bad ``Action Input``.
    """
    try:
        value = jsonsafe.loads(raw or "{}")
    except jsonsafe.JsonInputError:
        return {INVALID_JSON: raw or ""}
    return value if isinstance(value, dict) else {INVALID_JSON: raw or ""}


def object_arguments(value: Any) -> dict[str, Any]:
    """Arguments a provider SDK or a parser already decoded, held to :func:`decode_arguments`.

    An SDK's decoder is not ours: it may hand over nesting or integers that no JSON text we
    accept could hold, and writing those back out fails, so such a call is malformed too.
    """
    try:
        text = json.dumps(value, ensure_ascii=False)
    except (ValueError, TypeError, RecursionError) as exc:
        return {INVALID_JSON: f"<arguments that cannot be written as JSON: {exc}>"}
    return decode_arguments(text)


def parse_output(output: ModelOutput) -> tuple[p.ParsedReply, ToolCall | None]:
    """A native reply as the parsed turn the shared executor takes, plus the call that ran."""
    if output.tool_calls:
        call = output.tool_calls[0]
        invalid = call.arguments.get(INVALID_JSON)
        raw = (
            invalid if isinstance(invalid, str) else json.dumps(call.arguments, ensure_ascii=False)
        )
        return p.ParsedReply(output.text.strip(), call.name, raw), call
    return p.ParsedReply("", p.FINISH_ACTION, output.text.strip()), None


def transcript(output: ModelOutput) -> str:
    """A readable one-string record of a native reply for reports."""
    parts = [output.text.strip()] if output.text.strip() else []
    for call in output.tool_calls:
        parts.append(f"[tool call] {call.name} {json.dumps(call.arguments, ensure_ascii=False)}")
    return "\n".join(parts)


def tool_message(record: p.ActionRecord, call: ToolCall) -> ChatMessage:
    """The ``tool`` message answering ``call`` with the executed record's observation."""
    body = record.observation().removeprefix(p.RESPONSE).removesuffix(p.RESPONSE_END)
    images = tuple(
        str(item.content)
        for item in (record.result or ())
        if item.type == "image" and isinstance(item.content, str)
    )
    return ChatMessage("tool", body, tool_call_id=call.id or "call_0", images=images_of(images))
