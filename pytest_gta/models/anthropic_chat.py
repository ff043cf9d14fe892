r"""``anthropic/<model>``: Claude through the Messages API (or a compatible gateway).

Uses the official ``anthropic`` SDK with its own retries off, so the shared policy of
:mod:`pytest_gta.models.chat` applies. The harness speaks OpenAI-style chat (system, user,
assistant and tool messages in any order); the Messages API has one top-level ``system`` prompt
and strictly alternating user/assistant turns. :func:`messages_api` is the one pure converter
between the two:

* every *leading* system message goes into ``system``, joined with ``"\n"`` (the ReAct step
  request opens with two: the protocol prompt and "The related files are at ..."). A newline
  keeps the files line a line of its own, as it reads when the messages are shown one after
  another, without inventing a blank-line separator the official prompt never had;
* a later system message (a ReAct observation ``Response:...``, the force-stop message) is
  something the model must read and answer, so it becomes a user turn;
* ``tool`` messages become ``tool_result`` blocks in a user turn and assistant tool calls
  ``tool_use`` blocks (native protocol);
* consecutive turns of one role are merged (text joined with ``"\n"``, block lists
  concatenated in order, so a ``tool_result`` still opens its turn), and turns with no content
  are dropped, because the API rejects both repeated roles and empty turns.

Under the ReAct protocol the reply is text; ``max_tokens`` follows OpenCompass's rule
(:func:`~pytest_gta.models.generation.react_max_tokens`) and the stop words come from the catalog
entry or ``--gta-model-args=stop=...``. Sampling parameters the installed SDK no longer takes as
named arguments (``temperature`` since 1.0, anything from ``--gta-model-args``) travel in
``extra_body``; the JSON on the wire is the same either way.

The key comes from ``ANTHROPIC_API_KEY`` (``--gta-model-args=api_key_env=VAR`` to use another
variable). The SDK sends it as a bearer token; compatible gateways that only read ``x-api-key``
get that header too. It is handed to the SDK only and never appears in reports or logs.
"""

from __future__ import annotations

import importlib
import inspect
import os
from collections.abc import Mapping, Sequence
from typing import Any

from pytest_gta.endpoint import bound_client
from pytest_gta.errors import GtaUsageError
from pytest_gta.flags import OPT_BASE_URL, OPT_MODEL, OPT_MODEL_ARGS, OPT_SEED
from pytest_gta.models.base import ModelContext, ModelSpec, display_name
from pytest_gta.models.chat import (
    ADAPTER_ARGS,
    ChatAdapter,
    MalformedReply,
    Prepared,
    classify_sdk_error,
    expect,
    member,
    read_reply,
    reply_usage,
)
from pytest_gta.models.generation import react_max_tokens
from pytest_gta.models.openai_convert import image_data_url
from pytest_gta.outward import mask_url, register_secret
from pytest_gta.protocol.native import json_schema, object_arguments
from pytest_gta.types import ChatMessage, ModelOutput, ModelRequest, ToolCall, Usage
from pytest_gta.urls import env_base_url

DEFAULT_BASE_URL = "https://api.anthropic.com"
DEFAULT_KEY_ENV = "ANTHROPIC_API_KEY"
#: What a 200 answer must be, in error messages.
MESSAGES_REPLY = "a Messages API reply"
#: Image types the Messages API accepts; others are left out (the text names the file).
IMAGE_MEDIA_TYPES = frozenset({"image/jpeg", "image/png", "image/gif", "image/webp"})
#: ``messages.create`` parameters that steer the SDK rather than go into the JSON body.
_SDK_CONTROLS = frozenset({"extra_headers", "extra_query", "extra_body", "timeout", "stream"})

Block = dict[str, Any]
Content = str | list[Block]


def image_block(path: str) -> Block | None:
    """A base64 ``image`` block of a file, or ``None`` for a type the API does not take.

    The encoding is the OpenAI adapter's data URL taken apart, so both send the same bytes.
    """
    header, _, data = image_data_url(path).partition(",")
    media_type = header.removeprefix("data:").removesuffix(";base64")
    if media_type not in IMAGE_MEDIA_TYPES:
        return None
    return {"type": "image", "source": {"type": "base64", "media_type": media_type, "data": data}}


def _with_images(text: str, images: Sequence[str], vision: bool) -> Content:
    """Text alone, or text followed by the pictures when the model can see them."""
    pictures = [b for b in (image_block(p) for p in images) if b is not None] if vision else []
    if not pictures:
        return text
    return [{"type": "text", "text": text}, *pictures] if text.strip() else pictures


def _blocks(content: Content) -> list[Block]:
    if isinstance(content, list):
        return content
    return [{"type": "text", "text": content}]


def _turn(message: ChatMessage, vision: bool) -> tuple[str, Content]:
    """One harness message as a (role, content) turn of the Messages API."""
    if message.role == "assistant":
        if not message.tool_calls:
            return "assistant", message.content
        uses: list[Block] = [
            {
                "type": "tool_use",
                "id": call.id or f"call_{n}",
                "name": call.name,
                "input": call.arguments,
            }
            for n, call in enumerate(message.tool_calls)
        ]
        return "assistant", _blocks(message.content) + uses if message.content.strip() else uses
    if message.role == "tool":
        result: Block = {"type": "tool_result", "tool_use_id": message.tool_call_id or "call_0"}
        output = _with_images(message.content, message.images, vision)
        if output:
            result["content"] = output
        return "user", [result]
    # user, and system messages after the first turn: the model answers them.
    return "user", _with_images(message.content, message.images, vision)


def merge_turns(turns: Sequence[tuple[str, Content]]) -> list[dict[str, Any]]:
    """Alternating ``{"role", "content"}`` messages: empty turns dropped, repeated roles merged."""
    out: list[dict[str, Any]] = []
    for role, content in turns:
        if not (content.strip() if isinstance(content, str) else content):
            continue
        if out and out[-1]["role"] == role:
            previous = out[-1]["content"]
            if isinstance(previous, str) and isinstance(content, str):
                out[-1]["content"] = f"{previous}\n{content}"
            else:
                out[-1]["content"] = _blocks(previous) + _blocks(content)
        else:
            out.append({"role": role, "content": content})
    return out


def messages_api(
    messages: Sequence[ChatMessage], vision: bool = False
) -> tuple[str | None, list[dict[str, Any]]]:
    """``(system, messages)`` for the Messages API from harness messages (see module docs)."""
    lead = 0
    while lead < len(messages) and messages[lead].role == "system":
        lead += 1
    system = "\n".join(m.content for m in messages[:lead]) if lead else None
    return system, merge_turns([_turn(m, vision) for m in messages[lead:]])


def native_tools(request: ModelRequest) -> list[dict[str, Any]]:
    """The offered tools as Messages API tool definitions."""
    return [
        {"name": meta.name, "description": meta.description, "input_schema": json_schema(meta)}
        for meta in request.tools
    ]


def stop_sequences(value: Any) -> list[str] | None:
    """Stop words as the list ``stop_sequences`` takes (``None``: none)."""
    if not value:
        return None
    return [value] if isinstance(value, str) else [str(s) for s in value]


def gateway_root(base_url: str) -> str:
    """The SDK's base URL for ``--gta-base-url``: the SDK appends ``/v1/messages`` itself.

    ``--gta-base-url`` is usually written the OpenAI way (``http://host:4000/v1``); a trailing
    ``/v1`` is dropped so the request does not go to ``/v1/v1/messages``.
    """
    return base_url.rstrip("/").removesuffix("/v1")


def deprecation_note(model: str) -> str | None:
    """The SDK's own "deprecated model" notice for ``model``, once, for the report.

    The SDK also warns on every call; this puts the fact where a reader of the results looks.
    """
    try:
        module = importlib.import_module("anthropic.resources.messages.messages")
    except ImportError:
        return None
    table = getattr(module, "DEPRECATED_MODELS", {})
    when = table.get(model) if isinstance(table, Mapping) else None
    if when is None:
        return None
    return f"{model}: the anthropic SDK lists this model as deprecated (end of life {when})"


def check_message(body: Any) -> None:
    """Hold a Messages API reply's JSON to what :func:`parse_message` reads of it.

    Raises:
        MalformedReply: naming the first member that is missing or of the wrong type.
    """
    message = expect(body, "the body", dict)
    reply_usage(message, "input_tokens", "output_tokens")
    for n, item in enumerate(member(message, "content", list)):
        at = f"content[{n}]"
        block = expect(item, at, dict)
        kind = member(block, "type", str, at=at)
        if kind == "text":
            member(block, "text", str, at=at)
        elif kind == "tool_use":
            member(block, "name", str, at=at)
            member(block, "id", str, at=at)
            if "input" not in block:  # any value: what it holds is the model's call to judge
                raise MalformedReply(f"{at}.input is missing")


def _usage(message: Any) -> Usage:
    usage = getattr(message, "usage", None)
    if usage is None:
        return Usage()
    # A count the server left out is unset on the SDK's model, not None.
    counts = (getattr(usage, "input_tokens", None), getattr(usage, "output_tokens", None))
    return Usage(int(counts[0] or 0), int(counts[1] or 0))


def parse_message(message: Any) -> ModelOutput:
    """A Messages API reply: text blocks joined, ``tool_use`` blocks as tool calls."""
    texts: list[str] = []
    calls: list[ToolCall] = []
    for block in getattr(message, "content", None) or []:
        kind = getattr(block, "type", None)
        if kind == "text":
            texts.append(str(block.text))
        elif kind == "tool_use":
            arguments = object_arguments(block.input)
            calls.append(ToolCall(str(block.name), arguments, str(block.id or "")))
    return ModelOutput("".join(texts).strip(), _usage(message), tuple(calls))


class AnthropicChat(ChatAdapter):
    """Claude through the ``anthropic`` SDK's Messages API."""

    provider = "anthropic"

    def __init__(self, spec: ModelSpec, context: ModelContext) -> None:
        settings = context.generation
        super().__init__(settings, context.cache, context.budget)
        import anthropic

        entry = self.catalog_entry = spec.entry
        args = dict(settings.model_args)
        key_env = str(
            args.get("api_key_env") or (entry.api_key_env if entry else None) or DEFAULT_KEY_ENV
        )
        base_url = gateway_root(settings.base_url) if settings.base_url else None
        key = os.environ.get(key_env, "").strip()
        if not key and base_url is None:
            raise GtaUsageError(
                f"{OPT_MODEL}={spec.raw}: set {key_env} to your Anthropic API key, or point "
                f"{OPT_BASE_URL} at a compatible gateway"
            )
        key = key or "EMPTY"  # a local gateway without auth ignores it; the SDK insists on one
        # Whatever the variable is called (api_key_env=ANY_NAME), its key is redacted by value.
        register_secret(key, f"${key_env}")
        # Shown everywhere and part of the cache's identity: never the URL's password.
        self.endpoint = mask_url(base_url or env_base_url("ANTHROPIC_BASE_URL") or DEFAULT_BASE_URL)
        extra_headers = args.get("headers")
        self.client = anthropic.Anthropic(
            base_url=base_url,
            api_key=key,
            max_retries=0,  # the shared retry policy is the only one
            timeout=settings.timeout,
            default_headers={
                "x-api-key": key,
                **(dict(extra_headers) if isinstance(extra_headers, Mapping) else {}),
            },
            # The SDK's own client, with the reply cap and the whole-request deadline.
            http_client=bound_client(
                settings.max_reply_bytes,
                limits=anthropic.DEFAULT_CONNECTION_LIMITS,
                follow_redirects=True,
            ),
        )
        self._named = frozenset(inspect.signature(self.client.messages.create).parameters)
        self._named -= _SDK_CONTROLS
        self.served = spec.name or settings.served_model or (entry and entry.api_model) or ""
        self.name = display_name(spec)
        self.stop = stop_sequences(args.get("stop", entry.stop if entry is not None else None))
        self.vision = bool(args.get("vision", entry.vision if entry is not None else False))
        self.extra = {k: v for k, v in args.items() if k not in ADAPTER_ARGS}
        if settings.seed is not None:
            self.warnings.append(
                f"{self.name}: the Messages API has no seed; {OPT_SEED}={settings.seed} is not "
                f"sent (pass {OPT_MODEL_ARGS}=seed=N for a gateway that takes one)"
            )
        note = deprecation_note(self.served)
        if note is not None:
            self.warnings.append(note)

    def identity(self) -> dict[str, Any]:
        """Provider, endpoint and model id."""
        return {**super().identity(), "model": self.served}

    def describe(self) -> dict[str, Any]:
        """Where the requests went (:meth:`ChatAdapter.describe`) and whether images go too."""
        return {**super().describe(), "vision": self.vision}

    def prepare(self, request: ModelRequest) -> Prepared | ModelOutput:
        """The Messages API body: text turns (ReAct) or tools and content blocks (native)."""
        settings = self.settings
        native = request.protocol == "native"
        max_tokens = settings.max_tokens
        if not native:
            # The official rule; OpenCompass answers '' unasked when the prompt fills the window.
            max_tokens = react_max_tokens(self.served, request.messages, max_tokens)
            if max_tokens <= 0:
                return ModelOutput("", Usage())
        system, messages = messages_api(request.messages, self.vision and native)
        body: dict[str, Any] = {"model": self.served, "max_tokens": max_tokens}
        if system is not None:
            body["system"] = system
        body["messages"] = messages
        body["temperature"] = settings.temperature
        if native and request.tools:
            body["tools"] = native_tools(request)
        elif not native and self.stop:
            body["stop_sequences"] = self.stop
        body.update(self.extra)
        return Prepared(body)

    def send(self, prepared: Prepared) -> ModelOutput:
        """One ``messages.create`` call: named arguments where the SDK has them, else body.

        The answer comes back raw so that :func:`~pytest_gta.models.chat.read_reply` checks
        it (:func:`check_message`) before the SDK builds its models from it.
        """
        named = {k: v for k, v in prepared.payload.items() if k in self._named}
        extra_body = {k: v for k, v in prepared.payload.items() if k not in self._named}
        try:
            raw: Any = self.client.messages.with_raw_response.create(
                **named, extra_body=extra_body or None
            )
        except Exception as exc:
            raise classify_sdk_error(exc, self.endpoint) from None

        def convert(body: Any) -> ModelOutput:
            check_message(body)
            return parse_message(raw.parse())

        return read_reply(
            raw.http_response,
            convert,
            endpoint=self.endpoint,
            expected=MESSAGES_REPLY,
            secret=self.client.api_key,
        )


def make_anthropic(spec: ModelSpec, context: ModelContext) -> AnthropicChat:
    """Entry point of the ``anthropic`` provider."""
    has_model = spec.name or context.generation.served_model or spec.entry is not None
    if not has_model:
        raise GtaUsageError(
            f"{OPT_MODEL}=anthropic needs a model: anthropic/claude-sonnet-4-5, or a catalog "
            "name such as claude3-opus"
        )
    return AnthropicChat(spec, context)
