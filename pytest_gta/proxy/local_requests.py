"""An agent's request to a model in this process, read into the harness's neutral types.

A model without an HTTP endpoint (:class:`~pytest_gta.proxy.upstream.LocalModel`) is called
with a :class:`~pytest_gta.types.ModelRequest`, as the project's own loop calls it. This module
reads the three APIs an agent may speak into what that request holds, the conversation
(:class:`~pytest_gta.types.ChatMessage`, tool calls and tool results included) and the offered
tools (:class:`~pytest_gta.types.ToolMeta`, from their JSON Schemas), as their public
references describe them:

* OpenAI chat completions: ``messages`` (``system``/``developer``, ``user``, ``assistant`` with
  ``tool_calls``, ``tool``), ``tools`` of type ``function``;
* OpenAI responses: ``instructions``, ``input`` (a string, or ``message``, ``function_call``
  and ``function_call_output`` items), ``tools`` of type ``function``;
* Anthropic messages: ``system``, ``messages`` (``text``, ``tool_use`` and ``tool_result``
  blocks), ``tools`` with an ``input_schema``.

What an in-process model cannot take is left out, saying so where the model would have seen
it: an image becomes :data:`IMAGE_NOTE` (the in-process engines take text), tools of other
types (web search, code interpreter) are not offered. The sampling parameters of a request
(``temperature``, ``max_tokens``...) are the run's (``--gta-temperature``, ``--gta-max-tokens``),
as for every request of the run. Anything else that is not of the API's shape is a
:class:`~pytest_gta.proxy.wire.BadRequest` naming where (the agent gets a 400).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

from pytest_gta.protocol.native import decode_arguments, object_arguments
from pytest_gta.proxy.wire import BadRequest
from pytest_gta.types import ChatMessage, ToolCall, ToolMeta, ToolParam

#: What the model reads where the agent sent an image.
IMAGE_NOTE = "[an image, not shown to this model]"
#: JSON Schema types as a tool meta's input types (anything else reads as text).
GTA_TYPES = {"string": "text", "integer": "int", "number": "float", "boolean": "bool"}
_IMAGE_PARTS = frozenset({"image_url", "input_image", "image"})
_TEXT_PARTS = frozenset({"text", "input_text", "output_text"})


@dataclass(frozen=True)
class Asked:
    """What an agent's request asks of the model, whichever API it came in."""

    messages: tuple[ChatMessage, ...]
    tools: tuple[ToolMeta, ...]
    stream: bool
    #: A chat-completions stream ends with a usage chunk (``stream_options.include_usage``).
    include_usage: bool = False


def _kind(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def _object(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise BadRequest(f"{where} is a {_kind(value)}, not an object")
    return value


def _list(value: Any, where: str, *, empty: bool = True) -> list[Any]:
    if value is None and empty:
        return []
    if not isinstance(value, list):
        raise BadRequest(f"{where} is a {_kind(value)}, not a list")
    if not value and not empty:
        raise BadRequest(f"{where} is empty")
    return value


def _name(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value:
        raise BadRequest(f"{where} is a {_kind(value)}, not a name")
    return value


def text_of(content: Any, where: str) -> str:
    """A message's content as text: a string, or the text of its parts (images noted)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    parts = []
    for n, part in enumerate(_list(content, where)):
        part = _object(part, f"{where}[{n}]")
        kind = part.get("type")
        if kind in _TEXT_PARTS or (kind is None and "text" in part):
            text = part.get("text")
            if not isinstance(text, str):
                raise BadRequest(f"{where}[{n}].text is a {_kind(text)}, not text")
            parts.append(text)
        elif kind in _IMAGE_PARTS:
            parts.append(IMAGE_NOTE)
        elif kind == "refusal" and isinstance(part.get("refusal"), str):
            parts.append(part["refusal"])
    return "\n".join(parts)


def tool_meta(name: str, description: Any, schema: Any) -> ToolMeta:
    """An offered tool as a tool meta: its JSON Schema's properties as inputs."""
    schema = schema if isinstance(schema, dict) else {}
    properties = schema.get("properties")
    required = schema.get("required")
    needed = {r for r in required if isinstance(r, str)} if isinstance(required, list) else set()
    inputs = []
    for key, prop in properties.items() if isinstance(properties, dict) else ():
        prop = prop if isinstance(prop, dict) else {}
        kind = prop.get("type")
        if isinstance(kind, list):  # ["string", "null"]: the first that is not null
            kind = next((k for k in kind if k != "null"), None)
        said = prop.get("description")
        inputs.append(
            ToolParam(
                GTA_TYPES.get(kind, "text") if isinstance(kind, str) else "text",
                str(key),
                said if isinstance(said, str) else None,
                optional=key not in needed,
            )
        )
    return ToolMeta(name, description if isinstance(description, str) else "", tuple(inputs), ())


def _arguments(value: Any) -> dict[str, Any]:
    """A call's arguments as sent: JSON text decoded, an object as it is (either checked)."""
    if isinstance(value, str) or value is None:
        return decode_arguments(value)
    return object_arguments(value)


def _id(value: Any) -> str | None:
    """A call id as sent (``None``: none, or not a string)."""
    return value if isinstance(value, str) and value else None


def _stream(body: dict[str, Any]) -> bool:
    return body.get("stream") is True


# -- chat completions ------------------------------------------------------------------------


def _chat_calls(value: Any, where: str) -> tuple[ToolCall, ...]:
    calls = []
    for n, call in enumerate(_list(value, f"{where}.tool_calls")):
        at = f"{where}.tool_calls[{n}]"
        call = _object(call, at)
        function = _object(call.get("function"), f"{at}.function")
        name = _name(function.get("name"), f"{at}.function.name")
        call_id = _id(call.get("id")) or f"call_{n}"
        calls.append(ToolCall(name, _arguments(function.get("arguments")), call_id))
    return tuple(calls)


def _chat_message(message: Any, where: str) -> ChatMessage:
    message = _object(message, where)
    role = message.get("role")
    text = text_of(message.get("content"), f"{where}.content")
    if role in ("system", "developer"):
        return ChatMessage("system", text)
    if role == "user":
        return ChatMessage("user", text)
    if role == "assistant":
        return ChatMessage(
            "assistant", text, tool_calls=_chat_calls(message.get("tool_calls"), where)
        )
    if role in ("tool", "function"):
        return ChatMessage("tool", text, tool_call_id=_id(message.get("tool_call_id")))
    raise BadRequest(
        f"{where}.role is {role!r}, not one of system, developer, user, assistant, tool"
    )


def _chat_tools(value: Any) -> Iterator[ToolMeta]:
    for n, tool in enumerate(_list(value, "tools")):
        tool = _object(tool, f"tools[{n}]")
        if tool.get("type", "function") != "function":
            continue
        function = _object(tool.get("function"), f"tools[{n}].function")
        name = _name(function.get("name"), f"tools[{n}].function.name")
        yield tool_meta(name, function.get("description"), function.get("parameters"))


def chat_request(body: dict[str, Any]) -> Asked:
    """A chat-completions request (:class:`BadRequest` if it is not one)."""
    messages = _list(body.get("messages"), "messages", empty=False)
    options = body.get("stream_options")
    usage = isinstance(options, dict) and options.get("include_usage") is True
    return Asked(
        tuple(_chat_message(m, f"messages[{n}]") for n, m in enumerate(messages)),
        tuple(_chat_tools(body.get("tools"))),
        _stream(body),
        usage,
    )


# -- responses --------------------------------------------------------------------------------


def _role_message(role: Any, content: Any, where: str) -> ChatMessage:
    text = text_of(content, f"{where}.content")
    if role in ("system", "developer"):
        return ChatMessage("system", text)
    if role in ("user", "assistant"):
        return ChatMessage(role, text)
    raise BadRequest(f"{where}.role is {role!r}, not one of system, developer, user, assistant")


def _responses_input(value: Any) -> list[ChatMessage]:
    if isinstance(value, str):
        return [ChatMessage("user", value)]
    out: list[ChatMessage] = []
    for n, item in enumerate(_list(value, "input", empty=False)):
        where = f"input[{n}]"
        item = _object(item, where)
        kind = item.get("type", "message")
        if kind == "message":
            out.append(_role_message(item.get("role"), item.get("content"), where))
        elif kind == "function_call":
            name = _name(item.get("name"), f"{where}.name")
            call_id = _id(item.get("call_id")) or f"call_{n}"
            call = ToolCall(name, _arguments(item.get("arguments")), call_id)
            if out and out[-1].role == "assistant":  # one turn: its text and its calls
                out[-1] = replace(out[-1], tool_calls=(*out[-1].tool_calls, call))
            else:
                out.append(ChatMessage("assistant", "", tool_calls=(call,)))
        elif kind == "function_call_output":
            text = text_of(item.get("output"), f"{where}.output")
            out.append(ChatMessage("tool", text, tool_call_id=_id(item.get("call_id"))))
        # Reasoning items and other tools' records are nothing this model reads.
    return out


def _responses_tools(value: Any) -> Iterator[ToolMeta]:
    for n, tool in enumerate(_list(value, "tools")):
        tool = _object(tool, f"tools[{n}]")
        if tool.get("type") != "function":
            continue
        name = _name(tool.get("name"), f"tools[{n}].name")
        yield tool_meta(name, tool.get("description"), tool.get("parameters"))


def responses_request(body: dict[str, Any]) -> Asked:
    """A Responses API request (:class:`BadRequest` if it is not one)."""
    if body.get("previous_response_id") is not None:
        raise BadRequest(
            "previous_response_id is not supported for a model in this process: nothing is "
            "stored, send the whole conversation in input"
        )
    messages = _responses_input(body.get("input"))
    instructions = body.get("instructions")
    if isinstance(instructions, str) and instructions:
        messages.insert(0, ChatMessage("system", instructions))
    elif instructions is not None and not isinstance(instructions, str):
        messages.insert(0, ChatMessage("system", text_of(instructions, "instructions")))
    return Asked(tuple(messages), tuple(_responses_tools(body.get("tools"))), _stream(body))


# -- Anthropic messages -----------------------------------------------------------------------


def _blocks(content: Any, where: str) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return [_object(b, f"{where}[{n}]") for n, b in enumerate(_list(content, where))]


def _anthropic_message(message: Any, where: str) -> Iterator[ChatMessage]:
    message = _object(message, where)
    role = message.get("role")
    if role not in ("user", "assistant"):
        raise BadRequest(f"{where}.role is {role!r}, not one of user, assistant")
    texts: list[str] = []
    calls: list[ToolCall] = []
    for n, block in enumerate(_blocks(message.get("content"), f"{where}.content")):
        at = f"{where}.content[{n}]"
        kind = block.get("type")
        if kind == "tool_result":
            text = text_of(block.get("content"), f"{at}.content")
            yield ChatMessage("tool", text, tool_call_id=_id(block.get("tool_use_id")))
        elif kind == "tool_use":
            name = _name(block.get("name"), f"{at}.name")
            call_id = _id(block.get("id")) or f"call_{n}"
            calls.append(ToolCall(name, _arguments(block.get("input")), call_id))
        else:
            texts.append(text_of([block], at))
    text = "\n".join(t for t in texts if t)
    if text or calls:
        yield ChatMessage(role, text, tool_calls=tuple(calls))


def _anthropic_tools(value: Any) -> Iterator[ToolMeta]:
    for n, tool in enumerate(_list(value, "tools")):
        tool = _object(tool, f"tools[{n}]")
        if tool.get("type") not in (None, "custom"):  # the server tools (web search...)
            continue
        name = _name(tool.get("name"), f"tools[{n}].name")
        yield tool_meta(name, tool.get("description"), tool.get("input_schema"))


def messages_request(body: dict[str, Any]) -> Asked:
    """An Anthropic Messages API request (:class:`BadRequest` if it is not one)."""
    messages = _list(body.get("messages"), "messages", empty=False)
    out = [
        m
        for n, message in enumerate(messages)
        for m in _anthropic_message(message, f"messages[{n}]")
    ]
    system = text_of(body.get("system"), "system")
    if system:
        out.insert(0, ChatMessage("system", system))
    return Asked(tuple(out), tuple(_anthropic_tools(body.get("tools"))), _stream(body))


READERS = {
    "chat.completions": chat_request,
    "responses": responses_request,
    "messages": messages_request,
}


def read_request(api: str, body: dict[str, Any]) -> Asked:
    """What ``body`` asks, read as ``api`` reads it (:class:`BadRequest` if it cannot be)."""
    return READERS[api](body)
