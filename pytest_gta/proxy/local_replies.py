"""A model's reply in this process, written as each API's answer: whole, or as a stream.

The proxy answers an agent for a model without an HTTP endpoint
(:mod:`pytest_gta.proxy.local`) with what that model's :class:`~pytest_gta.types.ModelOutput`
says: its text as the assistant message's content, its tool calls as the API's calls. Pure
functions of the reply, so that a stream and a whole answer say the same, and each is read back
for the transcript by :func:`~pytest_gta.proxy.wire.reply_of` as an upstream's would be.

Which calls are made: those of the output (an adapter that parses calls, the in-process engines
under the native protocol), else those written in the text in a format chat templates teach
(:func:`~pytest_gta.models.tool_text.parse_tool_calls`, so a ``mock:`` script can make them).
A call is sent as a call only if it names an offered tool and its arguments are a JSON object,
as a server's tool-call parser keeps a malformed one as text: the agent's SDK would otherwise
fail on it (an unknown tool, arguments it cannot decode) instead of its loop going on.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from pytest_gta.models.tool_text import parse_tool_calls
from pytest_gta.protocol.native import INVALID_JSON
from pytest_gta.types import ModelOutput, ToolCall, Usage


@dataclass(frozen=True)
class Said:
    """What the model said, ready for the wire: text, the calls sent as calls, tokens."""

    text: str
    calls: tuple[ToolCall, ...]
    usage: Usage
    #: The model id the answer names.
    model: str
    #: Makes ids unique within the case (its request number); deterministic, so that the
    #: next request, which quotes them, is the same on a rerun (the response cache's key).
    turn: int = 0

    def call_id(self, index: int) -> str:
        """The id of call ``index`` (``call_<turn>_<index>``)."""
        return f"call_{self.turn}_{index}"


def _unsent(call: ToolCall) -> str:
    raw = call.arguments.get(INVALID_JSON)
    arguments = raw if isinstance(raw, str) else call.arguments
    return json.dumps({"name": call.name, "arguments": arguments}, ensure_ascii=False)


def said(output: ModelOutput, offered: Sequence[str], model: str, turn: int = 0) -> Said:
    """What of ``output`` is sent: calls of offered tools as calls, the rest as text."""
    text, calls = output.text, output.tool_calls
    if not calls and offered:
        rest, parsed = parse_tool_calls(text)
        if parsed:
            text, calls = rest, parsed
    sent = tuple(c for c in calls if c.name in offered and INVALID_JSON not in c.arguments)
    unsent = [_unsent(c) for c in calls if c not in sent]
    text = "\n".join(t for t in (text.strip(), *unsent) if t)
    return Said(text, sent, output.usage or Usage(), model, turn)


def _arguments(call: ToolCall) -> str:
    return json.dumps(call.arguments, ensure_ascii=False)


# -- chat completions ------------------------------------------------------------------------


def chat_completion(answer: Said) -> dict[str, Any]:
    """A ``chat.completion``."""
    message: dict[str, Any] = {"role": "assistant", "content": answer.text or None}
    if answer.calls:
        message["tool_calls"] = [
            {
                "id": answer.call_id(n),
                "type": "function",
                "function": {"name": call.name, "arguments": _arguments(call)},
            }
            for n, call in enumerate(answer.calls)
        ]
    elif message["content"] is None:
        message["content"] = ""
    usage = answer.usage
    return {
        "id": f"chatcmpl-gta-{answer.turn}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": answer.model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": "tool_calls" if answer.calls else "stop",
                "logprobs": None,
            }
        ],
        "usage": {
            "prompt_tokens": usage.input_tokens,
            "completion_tokens": usage.output_tokens,
            "total_tokens": usage.input_tokens + usage.output_tokens,
        },
    }


def chat_chunks(answer: Said, include_usage: bool) -> Iterator[dict[str, Any]]:
    """The ``chat.completion.chunk`` events of :func:`chat_completion`'s answer."""
    whole = chat_completion(answer)
    choice = whole["choices"][0]

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {
            "id": whole["id"],
            "object": "chat.completion.chunk",
            "created": whole["created"],
            "model": whole["model"],
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}],
        }

    yield chunk({"role": "assistant", "content": ""})
    if answer.text:
        yield chunk({"content": answer.text})
    for n, call in enumerate(choice["message"].get("tool_calls") or ()):
        yield chunk({"tool_calls": [{"index": n, **call}]})
    yield chunk({}, choice["finish_reason"])
    if include_usage:
        yield {**chunk({}), "choices": [], "usage": whole["usage"]}


# -- responses --------------------------------------------------------------------------------


def _response_items(answer: Said) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    if answer.text or not answer.calls:
        text = {"type": "output_text", "text": answer.text, "annotations": [], "logprobs": []}
        items.append(
            {
                "type": "message",
                "id": f"msg_gta_{answer.turn}",
                "role": "assistant",
                "status": "completed",
                "content": [text],
            }
        )
    for n, call in enumerate(answer.calls):
        items.append(
            {
                "type": "function_call",
                "id": f"fc_gta_{answer.turn}_{n}",
                "call_id": answer.call_id(n),
                "name": call.name,
                "arguments": _arguments(call),
                "status": "completed",
            }
        )
    return items


def response(answer: Said, status: str = "completed") -> dict[str, Any]:
    """A Responses API ``response`` (``in_progress``: its opening, with no output yet)."""
    done = status == "completed"
    usage = answer.usage
    return {
        "id": f"resp_gta_{answer.turn}",
        "object": "response",
        "created_at": int(time.time()),
        "status": status,
        "error": None,
        "incomplete_details": None,
        "instructions": None,
        "metadata": {},
        "model": answer.model,
        "output": _response_items(answer) if done else [],
        "parallel_tool_calls": True,
        "temperature": None,
        "tool_choice": "auto",
        "tools": [],
        "top_p": None,
        "usage": {
            "input_tokens": usage.input_tokens,
            "output_tokens": usage.output_tokens,
            "total_tokens": usage.input_tokens + usage.output_tokens,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens_details": {"reasoning_tokens": 0},
        }
        if done
        else None,
    }


def _item_events(n: int, item: dict[str, Any]) -> Iterator[dict[str, Any]]:
    if item["type"] == "function_call":
        where = {"item_id": item["id"], "output_index": n}
        yield {"type": "response.output_item.added", "output_index": n,
               "item": {**item, "arguments": "", "status": "in_progress"}}  # fmt: skip
        yield {"type": "response.function_call_arguments.delta", **where,
               "delta": item["arguments"]}  # fmt: skip
        yield {"type": "response.function_call_arguments.done", **where,
               "arguments": item["arguments"]}  # fmt: skip
    else:
        part = item["content"][0]
        where = {"item_id": item["id"], "output_index": n, "content_index": 0}
        yield {"type": "response.output_item.added", "output_index": n,
               "item": {**item, "content": [], "status": "in_progress"}}  # fmt: skip
        yield {"type": "response.content_part.added", **where, "part": {**part, "text": ""}}
        yield {"type": "response.output_text.delta", **where, "delta": part["text"],
               "logprobs": []}  # fmt: skip
        yield {"type": "response.output_text.done", **where, "text": part["text"],
               "logprobs": []}  # fmt: skip
        yield {"type": "response.content_part.done", **where, "part": part}
    yield {"type": "response.output_item.done", "output_index": n, "item": item}


def response_events(answer: Said) -> Iterator[dict[str, Any]]:
    """The Responses API's stream of :func:`response`, ``response.created`` to ``completed``."""
    opening = response(answer, "in_progress")
    whole = response(answer)
    events = [
        {"type": "response.created", "response": opening},
        {"type": "response.in_progress", "response": opening},
    ]
    for n, item in enumerate(whole["output"]):
        events += _item_events(n, item)
    events.append({"type": "response.completed", "response": whole})
    for number, event in enumerate(events):
        yield {**event, "sequence_number": number}


# -- Anthropic messages -----------------------------------------------------------------------


def message(answer: Said) -> dict[str, Any]:
    """An Anthropic ``message``."""
    content: list[dict[str, Any]] = []
    if answer.text or not answer.calls:
        content.append({"type": "text", "text": answer.text})
    content += [
        {"type": "tool_use", "id": answer.call_id(n), "name": call.name, "input": call.arguments}
        for n, call in enumerate(answer.calls)
    ]
    return {
        "id": f"msg_gta_{answer.turn}",
        "type": "message",
        "role": "assistant",
        "model": answer.model,
        "content": content,
        "stop_reason": "tool_use" if answer.calls else "end_turn",
        "stop_sequence": None,
        "usage": {
            "input_tokens": answer.usage.input_tokens,
            "output_tokens": answer.usage.output_tokens,
        },
    }


def message_events(answer: Said) -> Iterator[dict[str, Any]]:
    """The Messages API's stream of :func:`message`: start, each block, delta, stop."""
    whole = message(answer)
    usage = whole["usage"]
    opening = {**whole, "content": [], "stop_reason": None,
               "usage": {"input_tokens": usage["input_tokens"], "output_tokens": 0}}  # fmt: skip
    yield {"type": "message_start", "message": opening}
    for n, block in enumerate(whole["content"]):
        if block["type"] == "text":
            start: dict[str, Any] = {"type": "text", "text": ""}
            delta = {"type": "text_delta", "text": block["text"]}
        else:
            start = {**block, "input": {}}
            delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
        yield {"type": "content_block_start", "index": n, "content_block": start}
        yield {"type": "content_block_delta", "index": n, "delta": delta}
        yield {"type": "content_block_stop", "index": n}
    yield {
        "type": "message_delta",
        "delta": {"stop_reason": whole["stop_reason"], "stop_sequence": None},
        "usage": {"output_tokens": usage["output_tokens"]},
    }
    yield {"type": "message_stop"}


# -- the wire ---------------------------------------------------------------------------------


def whole_reply(api: str, answer: Said) -> dict[str, Any]:
    """``api``'s whole answer."""
    if api == "chat.completions":
        return chat_completion(answer)
    if api == "responses":
        return response(answer)
    return message(answer)


def stream_events(api: str, answer: Said, include_usage: bool = False) -> Iterator[bytes]:
    """``api``'s streamed answer, one server-sent event each.

    Each event is named by its type but in chat completions, which end with ``data: [DONE]``.
    """
    if api == "chat.completions":
        for event in chat_chunks(answer, include_usage):
            yield f"data: {json.dumps(event)}\n\n".encode()
        yield b"data: [DONE]\n\n"
        return
    events = response_events(answer) if api == "responses" else message_events(answer)
    for event in events:
        data = json.dumps(event)
        yield f"event: {event['type']}\ndata: {data}\n\n".encode()
