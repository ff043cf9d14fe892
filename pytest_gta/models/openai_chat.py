"""``openai/<model>`` and OpenAI-compatible servers (vLLM, LMDeploy, llama.cpp, vendor APIs).

Uses the official ``openai`` SDK (chat completions) with its own retries off, so the shared
policy of :mod:`pytest_gta.models.chat` applies. Under the ReAct protocol the request is the
official one (:func:`~pytest_gta.models.generation.official_body`): same messages, roles and
order, the model's stop words, and OpenCompass's ``max_tokens`` rule. Under ``native`` the tools
go as function schemas and images as base64 ``image_url`` parts when the model has vision.

With ``--gta-base-url`` and no explicit name (a catalog name like ``qwen1.5-72b``), the served
model name is read from the server's ``/models`` list. The API key comes from the environment
(``OPENAI_API_KEY``, or the vendor's variable for catalog models on vendor APIs); a local
server needs none. The key is handed to the SDK only and never appears in reports or logs.
"""

from __future__ import annotations

import base64
import json
import mimetypes
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import NoneType
from typing import Any

from pytest_gta.agent.native import decode_arguments, json_schema
from pytest_gta.errors import GtaInfrastructureError, GtaUsageError, RetryableError
from pytest_gta.models.base import ModelContext, ModelSpec
from pytest_gta.models.catalog import CatalogEntry
from pytest_gta.models.chat import (
    ChatAdapter,
    Prepared,
    classify_sdk_error,
    expect,
    member,
    read_reply,
    reply_usage,
)
from pytest_gta.models.generation import official_body, react_max_tokens
from pytest_gta.types import ChatMessage, ModelOutput, ModelRequest, ToolCall, Usage

#: ``--gta-model-args`` keys the adapter itself consumes; the rest go into the request body.
TOOL_IMAGE_NOTE = "The tool returned this image."
ADAPTER_ARGS = frozenset({"vision", "stop", "api_key_env", "headers"})
#: What a 200 answer must be, in error messages.
CHAT_COMPLETION = "a chat completion"


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
                picture = ChatMessage(
                    "user", "The tool returned this image.", images=message.images
                )
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


def detect_served_model(ids: Sequence[str], entry: CatalogEntry | None, base_url: str) -> str:
    """Pick the served model for a catalog name from the server's ``/models`` ids."""
    if len(ids) == 1:
        return ids[0]
    if entry is not None:
        wanted = {entry.name.lower(), *(a.lower() for a in entry.aliases)}
        if entry.hf_id:
            wanted |= {entry.hf_id.lower(), entry.hf_id.rsplit("/", 1)[-1].lower()}
        for served in ids:
            if served.lower() in wanted or served.rsplit("/", 1)[-1].lower() in wanted:
                return served
    listed = ", ".join(ids) if ids else "none"
    raise GtaUsageError(
        f"{base_url}/models lists {listed}; cannot tell which one to evaluate. Pass "
        "--gta-served-model=NAME (or --gta-model=openai/NAME)."
    )


class OpenAIChat(ChatAdapter):
    """Chat completions through the ``openai`` SDK."""

    provider = "openai"

    def __init__(self, spec: ModelSpec, context: ModelContext) -> None:
        super().__init__(context.generation, context.cache, context.budget)
        import openai

        settings = context.generation
        entry = spec.entry
        self.catalog_entry = entry
        args = dict(settings.model_args)
        # --gta-base-url, else the SDK's own OPENAI_BASE_URL (both: a server that may need no key).
        user_base = settings.base_url or os.environ.get("OPENAI_BASE_URL", "").strip() or None
        base_url = user_base
        key_env = str(args.get("api_key_env") or "OPENAI_API_KEY")
        if base_url is None and entry is not None and entry.api_base and spec.provider != "vllm":
            base_url = entry.api_base
            key_env = str(args.get("api_key_env") or entry.api_key_env or key_env)
        key = os.environ.get(key_env, "").strip()
        if not key:
            if user_base is None:
                raise GtaUsageError(
                    f"--gta-model={spec.raw}: set {key_env} to your API key, or point "
                    "--gta-base-url at an OpenAI-compatible server"
                )
            key = "EMPTY"  # local servers ignore it; the official configs send key='EMPTY'
        self.endpoint = base_url or "https://api.openai.com/v1"
        headers = args.get("headers")
        self.client = openai.OpenAI(
            api_key=key,
            base_url=base_url,
            timeout=settings.timeout,
            max_retries=0,
            default_headers=dict(headers) if isinstance(headers, Mapping) else None,
        )
        self.served = spec.name or settings.served_model or self._detect(entry)
        self.name = display_name(spec)
        stop = args.get("stop", entry.stop if entry is not None else None)
        self.stop: str | list[str] | None = (
            None if not stop else (stop if isinstance(stop, str) else [str(s) for s in stop])
        )
        self.vision = bool(args.get("vision", entry.vision if entry is not None else False))
        self.extra = {k: v for k, v in args.items() if k not in ADAPTER_ARGS}

    def _detect(self, entry: CatalogEntry | None) -> str:
        try:
            raw: Any = self.client.models.with_raw_response.list()
            ids = read_reply(
                raw.http_response,
                model_ids,
                endpoint=self.endpoint,
                expected="a model list",
                secret=self.client.api_key,
            )
        except (GtaInfrastructureError, RetryableError) as exc:  # what read_reply found
            problem: Exception = exc
        except Exception as exc:
            problem = classify_sdk_error(exc, self.endpoint)
        else:
            return detect_served_model(ids, entry, self.endpoint)
        raise GtaUsageError(
            f"cannot list the models served at {self.endpoint}: {problem}. Start the "
            "server, fix --gta-base-url, or pass --gta-served-model=NAME."
        )

    def identity(self) -> dict[str, Any]:
        """Provider, endpoint and served model name."""
        return {**super().identity(), "model": self.served}

    def describe(self) -> dict[str, Any]:
        """Generation settings and where the requests went, for the report."""
        return {
            **self.settings.report(),
            "provider": self.provider,
            "endpoint": self.endpoint,
            "served_model": self.served,
            "stop": self.stop,
        }

    def prepare(self, request: ModelRequest) -> Prepared | ModelOutput:
        """The official body (ReAct) or a function-calling body (native)."""
        settings = self.settings
        if request.protocol == "native":
            body: dict[str, Any] = {
                "model": self.served,
                "messages": native_messages(request.messages, self.vision),
                "max_tokens": settings.max_tokens,
                "n": 1,
                "temperature": settings.temperature,
            }
            if request.tools:
                body["tools"] = native_tools(request)
                body["tool_choice"] = "auto"
        else:
            max_tokens = react_max_tokens(self.served, request.messages, settings.max_tokens)
            if max_tokens <= 0:
                # OpenCompass returns '' without a request when the prompt fills the window.
                return ModelOutput("", Usage())
            body = official_body(
                self.served, request.messages, max_tokens, settings.temperature, self.stop
            )
        if settings.seed is not None:
            body["seed"] = settings.seed
        body.update(self.extra)
        return Prepared(body)

    def send(self, prepared: Prepared) -> ModelOutput:
        """One chat-completions call, the body serialised as the official harness does.

        OpenCompass posts ``json.dumps(data)`` (ASCII, ``", "``/``": "`` separators, keys in
        its order); sending those exact bytes makes our ReAct requests byte-identical to its
        requests, which the SDK's own serialiser would not. The answer comes back raw (what
        ``with_raw_response`` asks for, which ``client.post`` has no wrapper for) so that
        :func:`~pytest_gta.models.chat.read_reply` reads it, not the SDK's unchecked parse.
        """
        from openai._constants import RAW_RESPONSE_HEADER

        headers = {"Content-Type": "application/json", RAW_RESPONSE_HEADER: "true"}
        try:
            raw: Any = self.client.post(
                "/chat/completions",
                content=json.dumps(prepared.payload).encode("ascii"),
                cast_to=object,
                options={"headers": headers},
            )
        except Exception as exc:
            raise classify_sdk_error(exc, self.endpoint) from None
        return read_reply(
            raw.http_response,
            completion_output,
            endpoint=self.endpoint,
            expected=CHAT_COMPLETION,
            secret=self.client.api_key,
        )


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


def display_name(spec: ModelSpec) -> str:
    """The leaderboard name for a catalog name, else what the user typed."""
    explicit = "/" in spec.raw or ":" in spec.raw
    return spec.entry.name if spec.entry is not None and not explicit else spec.raw


def make_openai(spec: ModelSpec, context: ModelContext) -> OpenAIChat:
    """Entry point of the ``openai`` provider."""
    if spec.provider == "openai" and not spec.name and spec.entry is None:
        no_base = context.generation.base_url is None and not os.environ.get("OPENAI_BASE_URL")
        if context.generation.served_model is None and no_base:
            raise GtaUsageError(
                "--gta-model=openai needs a model: openai/gpt-4o, or openai/NAME with "
                "--gta-base-url for a compatible server"
            )
    return OpenAIChat(spec, context)
