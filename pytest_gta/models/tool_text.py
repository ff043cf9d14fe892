"""Tool calls in generated text, for in-process engines that have no tool-call parser.

A vLLM *server* parses tool calls with ``--tool-call-parser``; an engine in this process (vLLM's
``LLM``, Hugging Face transformers) only returns text, so the native protocol reads the calls
from it here, in the formats chat templates teach (Hermes/Qwen ``<tool_call>`` blocks, Llama 3
``<|python_tag|>``, bare JSON call objects). Arguments that are not valid JSON (or too deep, or
with numbers too long to read) stay raw, so they score as the model's ``ARGS_ERROR``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from pytest_gta import jsonsafe
from pytest_gta.models.openai_convert import native_messages, parse_arguments
from pytest_gta.protocol.native import INVALID_JSON, object_arguments
from pytest_gta.types import ChatMessage, ToolCall

_TOOL_CALL_BLOCK = re.compile(r"<tool_call>(.*?)(?:</tool_call>|\Z)", re.DOTALL)
_NAME = re.compile(r'"name"\s*:\s*"((?:[^"\\]|\\.)*)"')
_ARGUMENTS_KEY = re.compile(r'"(?:arguments|parameters)"\s*:\s*')
_STARTS_LIKE_CALL = re.compile(r'\A\{\s*"name"\s*:')
_FENCE = re.compile(r"\A```(?:json)?\s*(.*?)\s*```\Z", re.DOTALL)
PYTHON_TAG = "<|python_tag|>"
_DECODER = json.JSONDecoder()
#: What ``raw_decode`` raises on generated text besides JSONDecodeError: nesting past the
#: parser's recursion limit, or an integer of more than 4,300 digits (a plain ValueError).
_UNDECODABLE = (ValueError, RecursionError)


def _arguments(value: Any) -> dict[str, Any]:
    """A call's arguments as a dict; a JSON string is decoded, anything else kept raw."""
    if isinstance(value, str):
        return parse_arguments(value)
    if value is None:
        return {}
    return object_arguments(value)


def _raw_arguments(body: str) -> str:
    """The source text of the arguments in a call that is not valid JSON, as far as it goes."""
    match = _ARGUMENTS_KEY.search(body)
    if match is None:
        return ""
    raw = body[match.end() :].strip()
    try:
        _, end = _DECODER.raw_decode(raw)
    except _UNDECODABLE:
        # Drop the brace that closed the call object, if the arguments did not open it.
        return raw[:-1].rstrip() if raw.endswith("}") and raw.count("}") > raw.count("{") else raw
    return raw[:end]


def _call_of(value: Any, index: int) -> ToolCall | None:
    """A decoded ``{"name", "arguments" | "parameters"}`` object as a call, else ``None``."""
    if not isinstance(value, Mapping) or not isinstance(value.get("name"), str):
        return None
    arguments = value["arguments"] if "arguments" in value else value.get("parameters")
    return ToolCall(value["name"], _arguments(arguments), f"call_{index}")


def parse_call(body: str, index: int = 0) -> ToolCall | None:
    """One JSON tool call; with broken JSON, the name and the raw arguments (``ARGS_ERROR``).

    Returns ``None`` when not even the tool's name can be read: the text stays a message then,
    as a vLLM server's tool parser leaves it.
    """
    text = body.strip()
    try:
        return _call_of(jsonsafe.loads(text), index)
    except jsonsafe.JsonInputError:
        pass
    name = _NAME.search(text)
    if name is None:
        return None
    try:
        tool = json.loads(f'"{name.group(1)}"')
    except json.JSONDecodeError:
        tool = name.group(1)
    return ToolCall(str(tool), {INVALID_JSON: _raw_arguments(text)}, f"call_{index}")


def _json_sequence(text: str) -> list[Any] | None:
    """JSON values one after another (separated by blanks or ``;``), or ``None``."""
    values: list[Any] = []
    position = 0
    while True:
        while position < len(text) and (text[position].isspace() or text[position] == ";"):
            position += 1
        if position == len(text):
            return values
        try:
            value, position = _DECODER.raw_decode(text, position)
        except _UNDECODABLE:
            return None
        values.append(value)


def _bare_calls(text: str) -> tuple[ToolCall, ...] | None:
    """The calls of a reply that is nothing but JSON call objects (Llama 3 JSON tool calling)."""
    fenced = _FENCE.match(text)
    body = fenced.group(1) if fenced else text
    values = _json_sequence(body)
    if values is None:
        if _STARTS_LIKE_CALL.match(body):
            call = parse_call(body)
            return None if call is None else (call,)
        return None
    if len(values) == 1 and isinstance(values[0], list):
        values = values[0]
    calls = [_call_of(v, n) for n, v in enumerate(values)]
    if not calls or any(c is None for c in calls):
        return None
    return tuple(c for c in calls if c is not None)


def parse_tool_calls(text: str) -> tuple[str, tuple[ToolCall, ...]]:
    """Split generated text into the message text and the tool calls it makes.

    Understands the formats chat templates teach: Hermes/Qwen ``<tool_call>{...}</tool_call>``
    blocks (text around them is the message), Llama 3 ``<|python_tag|>{...}`` (text before the
    tag is the message) and a reply that is only a JSON call object (or several, or a list),
    with ``arguments`` or ``parameters``. Anything else is a plain message with no call.
    """
    if "<tool_call>" in text:
        blocks = [m.group(1) for m in _TOOL_CALL_BLOCK.finditer(text)]
        calls = [parse_call(b, n) for n, b in enumerate(blocks)]
        if all(c is not None for c in calls):
            rest = _TOOL_CALL_BLOCK.sub("", text).strip()
            return rest, tuple(c for c in calls if c is not None)
        return text.strip(), ()
    head, tag, tail = text.partition(PYTHON_TAG)
    if tag:
        found = _bare_calls(tail.strip())
        if found:
            return head.strip(), found
        return text.strip(), ()
    found = _bare_calls(text.strip())
    return ("", found) if found else (text.strip(), ())


def template_messages(messages: Sequence[ChatMessage], vision: bool) -> list[dict[str, Any]]:
    """Native-protocol messages as chat templates take them.

    The OpenAI wire format (:func:`~pytest_gta.models.openai_convert.native_messages`) carries a
    call's arguments as a JSON *string*; Hugging Face chat templates render
    ``arguments | tojson`` and expect the object itself, and some reject a ``None`` content.
    """
    out = native_messages(messages, vision)
    for message in out:
        if message.get("tool_calls"):
            message["content"] = message["content"] or ""
            for call in message["tool_calls"]:
                call["function"]["arguments"] = parse_arguments(call["function"]["arguments"])
    return out
