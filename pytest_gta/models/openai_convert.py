"""Pure converters between the harness's neutral types and the OpenAI chat-completions format.

Messages, tools and the request body go out (:func:`native_messages`, :func:`native_tools`,
:func:`request_body`); a completion and a ``/models`` listing come back
(:func:`completion_output`, :func:`model_ids`). Nothing here holds a client or touches the
network: the ``openai`` adapter (:mod:`pytest_gta.models.openai_chat`) sends what these build,
llama.cpp in this process (:mod:`pytest_gta.models.llamacpp`) takes the same body, and the
Anthropic and in-process engine adapters reuse the image, tool and message converters.
"""

from __future__ import annotations

import base64
import json
import mimetypes
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import NoneType
from typing import Any

from pytest_gta.models.chat import expect, member, reply_usage
from pytest_gta.models.generation import GenerationSettings, official_body, react_max_tokens
from pytest_gta.protocol.native import decode_arguments, json_schema
from pytest_gta.types import ChatMessage, ModelOutput, ModelRequest, ToolCall

#: The user message that carries a tool's image output (a tool message cannot carry pictures).
TOOL_IMAGE_NOTE = "The tool returned this image."


def image_data_url(path: str) -> str:
    """A ``data:`` URL of an image file (what vision endpoints accept inline)."""
    mime = mimetypes.guess_type(path)[0] or "image/jpeg"
    data = base64.b64encode(Path(path).read_bytes()).decode("ascii")
    return f"data:{mime};base64,{data}"


def parse_arguments(raw: str | None) -> dict[str, Any]:
    """A tool call's JSON arguments; anything else is kept raw so it scores as ``ARGS_ERROR``."""
    return decode_arguments(raw)


def _user_content(message: ChatMessage, vision: bool) -> str | list[dict[str, Any]]:
    if not (vision and message.images):
        return message.content
    parts: list[dict[str, Any]] = [{"type": "text", "text": message.content}]
    parts += [
        {"type": "image_url", "image_url": {"url": image_data_url(p)}} for p in message.images
    ]
    return parts


def native_messages(messages: Sequence[ChatMessage], vision: bool) -> list[dict[str, Any]]:
    """Chat-completions messages for the native protocol.

    Tool messages cannot carry pictures, so a tool's image output follows as a user message
    with the image when the model has vision.
    """
    out: list[dict[str, Any]] = []
    for message in messages:
        if message.role == "assistant" and message.tool_calls:
            out.append(
                {
                    "role": "assistant",
                    "content": message.content or None,
                    "tool_calls": [
                        {
                            "id": call.id or f"call_{n}",
                            "type": "function",
                            "function": {
                                "name": call.name,
                                "arguments": json.dumps(call.arguments, ensure_ascii=False),
                            },
                        }
                        for n, call in enumerate(message.tool_calls)
                    ],
                }
            )
        elif message.role == "tool":
            out.append(
                {
                    "role": "tool",
                    "tool_call_id": message.tool_call_id or "call_0",
                    "content": message.content,
                }
            )
            if vision and message.images:
                picture = ChatMessage("user", TOOL_IMAGE_NOTE, images=message.images)
                out.append({"role": "user", "content": _user_content(picture, vision)})
        elif message.role == "user":
            out.append({"role": "user", "content": _user_content(message, vision)})
        else:
            out.append({"role": message.role, "content": message.content})
    return out


def native_tools(request: ModelRequest) -> list[dict[str, Any]]:
    """The offered tools as OpenAI function tools."""
    return [
        {
            "type": "function",
            "function": {
                "name": meta.name,
                "description": meta.description,
                "parameters": json_schema(meta),
            },
        }
        for meta in request.tools
    ]


def request_body(
    request: ModelRequest,
    model: str,
    settings: GenerationSettings,
    stop: str | Sequence[str] | None = None,
    *,
    vision: bool = False,
    extra: Mapping[str, Any] | None = None,
) -> dict[str, Any] | None:
    """The chat-completions body: the official one (ReAct) or a function-calling one (native).

    ``stop`` applies to ReAct and ``vision`` to native; the seed, then ``extra``
    (``--gta-model-args``), are merged last. ``None`` means "send nothing": under ReAct,
    OpenCompass answers ``''`` without a request when the prompt fills the window.
    """
    if request.protocol == "native":
        body: dict[str, Any] = {
            "model": model,
            "messages": native_messages(request.messages, vision),
            "max_tokens": settings.max_tokens,
            "n": 1,
            "temperature": settings.temperature,
        }
        if request.tools:
            body["tools"] = native_tools(request)
            body["tool_choice"] = "auto"
    else:
        max_tokens = react_max_tokens(model, request.messages, settings.max_tokens)
        if max_tokens <= 0:
            return None
        body = official_body(model, request.messages, max_tokens, settings.temperature, stop)
    seed = settings.seed_for(request.case.epoch)
    if seed is not None:
        body["seed"] = seed
    body.update(extra or {})
    return body


def model_ids(body: Any) -> list[str]:
    """The ids of a ``/models`` listing, or :class:`~pytest_gta.models.chat.MalformedReply`."""
    listing = expect(body, "the body", dict)
    items = enumerate(member(listing, "data", list))
    return [member(expect(m, f"data[{n}]", dict), "id", str, at=f"data[{n}]") for n, m in items]


def completion_output(body: Any) -> ModelOutput:
    """A chat completion's first choice, or :class:`~pytest_gta.models.chat.MalformedReply`.

    Only what is read is checked, so servers that leave out or vary the rest (``id``,
    ``created``, ``object``, ``finish_reason``) still work. No choices is an empty reply.
    """
    completion = expect(body, "the body", dict)
    usage = reply_usage(completion, "prompt_tokens", "completion_tokens")
    choices = member(completion, "choices", list)
    if not choices:
        return ModelOutput("", usage)
    choice = expect(choices[0], "choices[0]", dict)
    message = member(choice, "message", dict, at="choices[0]")
    at = "choices[0].message"
    content = member(message, "content", str, NoneType, at=at)
    calls = []
    for n, item in enumerate(member(message, "tool_calls", list, NoneType, at=at) or []):
        where = f"{at}.tool_calls[{n}]"
        call = expect(item, where, dict)
        function = member(call, "function", dict, NoneType, at=where)
        if function is None:  # custom tool calls have none
            continue
        name = member(function, "name", str, at=f"{where}.function")
        arguments = member(function, "arguments", str, NoneType, at=f"{where}.function")
        call_id = member(call, "id", str, NoneType, at=where)
        calls.append(ToolCall(name, parse_arguments(arguments), call_id or ""))
    return ModelOutput((content or "").strip(), usage, tuple(calls))
