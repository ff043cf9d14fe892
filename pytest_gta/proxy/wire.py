"""What the proxy reads off the wire: request bodies, replies, server-sent event streams.

Everything here parses outside data (an agent's request, an upstream's reply or stream), so
nothing here may raise on what it reads, except where the caller turns the error into an HTTP
answer: :func:`request_body` (:class:`BadRequest`, the agent gets a 400) and :func:`reply_of`
(:class:`~pytest_gta.models.chat.MalformedReply`, which
:func:`~pytest_gta.models.chat.read_reply` turns into the error of a broken upstream). A stream
is passed on to the agent as it comes, whatever it holds; :class:`StreamReading` only reads
along to learn the reply and its usage, and skips what it cannot use.

The three APIs, as their public references describe them:

* OpenAI chat completions: ``choices[0].message`` (``content``, ``tool_calls[].function``) and
  ``usage.prompt_tokens``/``completion_tokens``; streamed as ``data: {chunk}`` events with
  ``choices[0].delta`` pieces (tool-call arguments in pieces by ``index``), usage in a last chunk
  when the request asked for it (``stream_options.include_usage``), then ``data: [DONE]``.
* OpenAI responses: ``output[]`` items (``message`` with ``output_text`` parts,
  ``function_call`` with ``name``/``arguments``) and ``usage.input_tokens``/``output_tokens``;
  streamed as typed events, the last (``response.completed``) carrying the whole response.
* Anthropic messages: ``content[]`` blocks (``text``, ``tool_use`` with ``input``) and
  ``usage.input_tokens``/``output_tokens``; streamed as ``message_start`` (input tokens),
  ``content_block_start``/``content_block_delta`` (``text_delta``, ``input_json_delta``) and
  ``message_delta`` (output tokens).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from pytest_gta import jsonsafe
from pytest_gta.models.chat import MAX_TOKEN_COUNT, MalformedReply, expect, member, reply_usage
from pytest_gta.types import Usage

#: Usage keys of each API: (input, output).
USAGE_KEYS = {
    "chat.completions": ("prompt_tokens", "completion_tokens"),
    "responses": ("input_tokens", "output_tokens"),
    "messages": ("input_tokens", "output_tokens"),
}
#: Longest string kept as is in a recorded request; base64 images are far longer.
INLINE_DATA_LIMIT = 256


class BadRequest(Exception):
    """An agent's request body the proxy cannot forward; the message says why (HTTP 400)."""


def request_body(raw: bytes) -> dict[str, Any]:
    """The JSON object of an agent's request.

    Raises:
        BadRequest: not UTF-8 JSON, nested too deeply, a number too long, or not an object.
    """
    try:
        data = jsonsafe.loads(raw)
    except jsonsafe.JsonInputError as exc:
        raise BadRequest(f"the request body is not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise BadRequest("the request body is not a JSON object")
    return data


def _count(value: Any) -> int | None:
    """A token count as the APIs send one, else ``None`` (never trusted beyond that)."""
    if type(value) is int and 0 <= value <= MAX_TOKEN_COUNT:
        return value
    return None


def _arguments(value: Any) -> str:
    """Tool-call arguments as one line of text (a JSON string as is, anything else as JSON)."""
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError, RecursionError):
        return repr(value)[:INLINE_DATA_LIMIT]


def tool_line(name: Any, arguments: Any) -> str:
    """How a tool call reads in a transcript: ``[tool call] name {"a": 1}``."""
    return f"[tool call] {name if isinstance(name, str) else '?'} {_arguments(arguments)}"


def _join(parts: list[str]) -> str:
    return "\n".join(p for p in parts if p)


# -- whole replies -------------------------------------------------------------------------------


def _chat_text(data: dict[str, Any]) -> str:
    choices = member(data, "choices", list)
    if not choices:
        raise MalformedReply("choices is empty")
    first = expect(choices[0], "choices[0]", dict)
    message = member(first, "message", dict, at="choices[0]")
    parts = [member(message, "content", str, type(None), at="choices[0].message") or ""]
    calls = member(message, "tool_calls", list, type(None), at="choices[0].message") or []
    for n, call in enumerate(calls):
        call = expect(call, f"choices[0].message.tool_calls[{n}]", dict)
        function = member(call, "function", dict, at=f"choices[0].message.tool_calls[{n}]")
        parts.append(tool_line(function.get("name"), function.get("arguments")))
    return _join(parts)


#: Reply items of no interest to a transcript reader (the model's hidden reasoning).
_UNSHOWN = frozenset({"reasoning", "thinking", "redacted_thinking"})


def _items_text(items: list[Any], where: str, read: Callable[[dict[str, Any], str], Any]) -> str:
    """The text of a list of typed items; ``read`` gives an item's lines, ``None`` if unknown."""
    parts: list[str] = []
    for n, item in enumerate(items):
        item = expect(item, f"{where}[{n}]", dict)
        lines = read(item, f"{where}[{n}]")
        kind = item.get("type")
        if lines is not None:
            parts.extend(lines)
        elif isinstance(kind, str) and kind not in _UNSHOWN:
            parts.append(f"[{kind}]")
    return _join(parts)


def _responses_item(item: dict[str, Any], where: str) -> list[str] | None:
    if item.get("type") == "function_call":
        return [tool_line(item.get("name"), item.get("arguments"))]
    if item.get("type") != "message":
        return None
    lines = []
    for piece in member(item, "content", list, at=where):
        if isinstance(piece, dict) and isinstance(piece.get("text"), str):
            lines.append(piece["text"])
        elif isinstance(piece, dict) and isinstance(piece.get("refusal"), str):
            lines.append(f"[refusal] {piece['refusal']}")
    return lines


def _messages_block(block: dict[str, Any], where: str) -> list[str] | None:
    if block.get("type") == "tool_use":
        return [tool_line(block.get("name"), block.get("input"))]
    if block.get("type") == "text" and isinstance(block.get("text"), str):
        return [block["text"]]
    return None


def _responses_text(data: dict[str, Any]) -> str:
    return _items_text(member(data, "output", list), "output", _responses_item)


def _messages_text(data: dict[str, Any]) -> str:
    return _items_text(member(data, "content", list), "content", _messages_block)


_TEXT_OF = {
    "chat.completions": _chat_text,
    "responses": _responses_text,
    "messages": _messages_text,
}


@dataclass(frozen=True)
class Reading:
    """What a reply said, for the transcript, and what it cost."""

    text: str
    usage: Usage | None


def reply_of(api: str, data: Any) -> Reading:
    """The text and usage of a whole (not streamed) reply of ``api``.

    Raises:
        MalformedReply: the reply is not of the API's shape (or its usage is impossible).
    """
    reply = expect(data, "the reply", dict)
    text = _TEXT_OF[api](reply)
    usage = reply_usage(reply, *USAGE_KEYS[api]) if reply.get("usage") is not None else None
    return Reading(text, usage)


# -- server-sent events ------------------------------------------------------------------------


@dataclass(frozen=True)
class Event:
    """One server-sent event: its ``event:`` name (``""`` when none) and its joined data."""

    name: str
    data: str


class SseReader:
    """Splits a byte stream into events as bytes arrive, per the WHATWG event-stream rules.

    Lines end in LF, CR LF or CR; an empty line ends an event; ``data:`` lines are joined with
    LF; comments (``:...``) and other fields are ignored. Bytes that are not UTF-8 become
    U+FFFD, as the specification says.
    """

    def __init__(self) -> None:
        self._pending = b""
        self._name = ""
        self._data: list[str] = []

    def feed(self, chunk: bytes) -> list[Event]:
        """The events that ``chunk`` completes."""
        self._pending += chunk
        events: list[Event] = []
        for line in self._lines():
            event = self._line(line)
            if event is not None:
                events.append(event)
        return events

    def _lines(self) -> Iterator[str]:
        buffer = self._pending
        start = 0
        while True:
            ends = [i for i in (buffer.find(b"\n", start), buffer.find(b"\r", start)) if i >= 0]
            if not ends:
                break
            end = min(ends)
            if buffer[end : end + 1] == b"\r" and end + 1 == len(buffer):
                break  # a CR at the very end may be the first half of CR LF
            skip = 2 if buffer[end : end + 2] == b"\r\n" else 1
            yield buffer[start:end].decode("utf-8", errors="replace")
            start = end + skip
        self._pending = buffer[start:]

    def _line(self, line: str) -> Event | None:
        if not line:
            if not self._data and not self._name:
                return None
            event = Event(self._name, "\n".join(self._data))
            self._name, self._data = "", []
            return event
        if line.startswith(":"):
            return None
        key, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if key == "event":
            self._name = value
        elif key == "data":
            self._data.append(value)
        return None

    def close(self) -> list[Event]:
        """The events left when the stream ends (a last one without its blank line)."""
        events = self.feed(b"\n\n") if self._pending else []
        if self._data:
            events.append(Event(self._name, "\n".join(self._data)))
            self._name, self._data = "", []
        return events


@dataclass
class _Call:
    name: str = ""
    arguments: list[str] = field(default_factory=list)


class StreamReading:
    """Reads a streamed reply of ``api`` along as it passes, into text, tool calls and usage.

    Never raises: an event it cannot use is counted in :attr:`skipped` and otherwise ignored
    (the agent gets it all the same).
    """

    def __init__(self, api: str) -> None:
        self.api = api
        self.reader = SseReader()
        self.text: list[str] = []
        self.calls: dict[int | str, _Call] = {}
        self.input_tokens: int | None = None
        self.output_tokens: int | None = None
        self.skipped = 0
        #: The whole reply a stream ended with (``response.completed``), when it sent one.
        self.final: Reading | None = None

    def feed(self, chunk: bytes) -> None:
        """Read the events ``chunk`` completes."""
        for event in self.reader.feed(chunk):
            self._event(event)

    def finish(self) -> Reading:
        """What the stream said, read to its end (or to where it broke off)."""
        for event in self.reader.close():
            self._event(event)
        if self.final is not None:
            return self.final
        parts = ["".join(self.text)]
        parts += [tool_line(c.name, "".join(c.arguments)) for c in self.calls.values()]
        usage = None
        if self.input_tokens is not None or self.output_tokens is not None:
            usage = Usage(self.input_tokens or 0, self.output_tokens or 0)
        return Reading(_join(parts), usage)

    def _event(self, event: Event) -> None:
        if event.data == "[DONE]":
            return
        try:
            data = jsonsafe.loads(event.data)
        except jsonsafe.JsonInputError:
            self.skipped += 1
            return
        if not isinstance(data, dict):
            self.skipped += 1
            return
        try:
            {"chat.completions": self._chunk, "responses": self._typed, "messages": self._typed}[
                self.api
            ](data)
        except (MalformedReply, TypeError, KeyError, AttributeError, ValueError):
            self.skipped += 1

    def _usage(self, usage: Any, input_key: str, output_key: str) -> None:
        if not isinstance(usage, dict):
            return
        given_in, given_out = _count(usage.get(input_key)), _count(usage.get(output_key))
        if given_in is not None:
            self.input_tokens = given_in
        if given_out is not None:
            self.output_tokens = given_out

    def _call(self, key: Any) -> _Call:
        if not isinstance(key, int | str) or isinstance(key, bool):
            key = len(self.calls)
        return self.calls.setdefault(key, _Call())

    def _chunk(self, data: dict[str, Any]) -> None:
        self._usage(data.get("usage"), *USAGE_KEYS["chat.completions"])
        choices = data.get("choices")
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            return
        delta = choices[0].get("delta")
        if not isinstance(delta, dict):
            return
        if isinstance(delta.get("content"), str):
            self.text.append(delta["content"])
        for piece in delta.get("tool_calls") or []:
            if not isinstance(piece, dict):
                continue
            call = self._call(piece.get("index"))
            function = piece.get("function")
            if isinstance(function, dict):
                if isinstance(function.get("name"), str):
                    call.name += function["name"]
                if isinstance(function.get("arguments"), str):
                    call.arguments.append(function["arguments"])

    def _typed(self, data: dict[str, Any]) -> None:
        kind = data.get("type")
        if kind == "response.completed" and isinstance(data.get("response"), dict):
            self.final = reply_of("responses", data["response"])
        elif kind == "response.output_text.delta" and isinstance(data.get("delta"), str):
            self.text.append(data["delta"])
        elif kind == "response.output_item.added" and isinstance(data.get("item"), dict):
            item = data["item"]
            if item.get("type") == "function_call":
                self._call(data.get("output_index")).name = str(item.get("name") or "")
        elif kind == "response.function_call_arguments.delta":
            if isinstance(data.get("delta"), str):
                self._call(data.get("output_index")).arguments.append(data["delta"])
        elif kind == "message_start" and isinstance(data.get("message"), dict):
            self._usage(data["message"].get("usage"), *USAGE_KEYS["messages"])
        elif kind == "content_block_start" and isinstance(data.get("content_block"), dict):
            block = data["content_block"]
            if block.get("type") == "tool_use":
                self._call(data.get("index")).name = str(block.get("name") or "")
            elif isinstance(block.get("text"), str):
                self.text.append(block["text"])
        elif kind == "content_block_delta" and isinstance(data.get("delta"), dict):
            delta = data["delta"]
            if isinstance(delta.get("text"), str):
                self.text.append(delta["text"])
            elif isinstance(delta.get("partial_json"), str):
                self._call(data.get("index")).arguments.append(delta["partial_json"])
        elif kind == "message_delta":
            self._usage(data.get("usage"), *USAGE_KEYS["messages"])


# -- what a transcript keeps of a request ------------------------------------------------------


def _image_note(kind: str, size: int) -> str:
    return f"[image: {kind}, {size:,} characters of base64 left out]"


def elide_images(value: Any, level: int = 0) -> Any:
    """``value`` with inline images (data URLs, base64 sources) replaced by a short note.

    A transcript keeps what the agent said and asked, not megabytes of base64 per turn.
    """
    if level > jsonsafe.MAX_DEPTH:
        return "[nested too deeply]"
    if isinstance(value, str):
        if value.startswith("data:") and len(value) > INLINE_DATA_LIMIT:
            return _image_note(value[5:].split(";", 1)[0].split(",", 1)[0], len(value))
        return value
    if isinstance(value, list):
        return [elide_images(v, level + 1) for v in value]
    if isinstance(value, dict):
        out = {k: elide_images(v, level + 1) for k, v in value.items()}
        data = value.get("data")
        if value.get("type") == "base64" and isinstance(data, str) and len(data) > 64:
            out["data"] = _image_note(str(value.get("media_type") or "?"), len(data))
        return out
    return value
