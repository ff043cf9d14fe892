"""``openai/<model>`` and OpenAI-compatible servers (vLLM, LMDeploy, llama.cpp, vendor APIs).

Uses the official ``openai`` SDK (chat completions) with its own retries off, so the shared
policy of :mod:`pytest_gta.models.chat` applies. Requests and replies are converted by the pure
functions of :mod:`pytest_gta.models.openai_convert`; this module is the network layer. Under
the ReAct protocol the request is the official one
(:func:`~pytest_gta.models.generation.official_body`): same messages, roles and order, the
model's stop words, and OpenCompass's ``max_tokens`` rule. Under ``native`` the tools go as
function schemas and images as base64 ``image_url`` parts when the model has vision.

With ``--gta-base-url`` and no explicit name (a catalog name like ``qwen1.5-72b``), the served
model name is read from the server's ``/models`` list. The API key comes from the environment
(``OPENAI_API_KEY``, or the vendor's variable for catalog models on vendor APIs); a local
server needs none. The key is handed to the SDK only and never appears in reports or logs.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from typing import Any

from pytest_gta.endpoint import bound_client
from pytest_gta.errors import GtaInfrastructureError, GtaUsageError, RetryableError
from pytest_gta.flags import OPT_BASE_URL, OPT_MODEL, OPT_SERVED_MODEL
from pytest_gta.models.base import ModelContext, ModelSpec, display_name
from pytest_gta.models.catalog import CatalogEntry
from pytest_gta.models.chat import (
    ADAPTER_ARGS,
    ChatAdapter,
    Prepared,
    classify_sdk_error,
    read_reply,
)
from pytest_gta.models.openai_convert import completion_output, model_ids, request_body
from pytest_gta.outward import mask_url, register_secret
from pytest_gta.types import ModelOutput, ModelRequest, Usage
from pytest_gta.urls import env_base_url

#: What a 200 answer must be, in error messages.
CHAT_COMPLETION = "a chat completion"


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
        f"{OPT_SERVED_MODEL}=NAME (or {OPT_MODEL}=openai/NAME)."
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
        user_base = settings.base_url or env_base_url("OPENAI_BASE_URL")
        base_url = user_base
        key_env = str(args.get("api_key_env") or "OPENAI_API_KEY")
        if base_url is None and entry is not None and entry.api_base and spec.provider != "vllm":
            base_url = entry.api_base
            key_env = str(args.get("api_key_env") or entry.api_key_env or key_env)
        key = os.environ.get(key_env, "").strip()
        if not key:
            if user_base is None:
                raise GtaUsageError(
                    f"{OPT_MODEL}={spec.raw}: set {key_env} to your API key, or point "
                    f"{OPT_BASE_URL} at an OpenAI-compatible server"
                )
            key = "EMPTY"  # local servers ignore it; the official configs send key='EMPTY'
        # Whatever the variable is called (api_key_env=ANY_NAME), its key is redacted by value.
        register_secret(key, f"${key_env}")
        # Shown everywhere and part of the cache's identity: never the URL's password.
        self.endpoint = mask_url(base_url or "https://api.openai.com/v1")
        headers = args.get("headers")
        self.client = openai.OpenAI(
            api_key=key,
            base_url=base_url,
            timeout=settings.timeout,
            max_retries=0,
            default_headers=dict(headers) if isinstance(headers, Mapping) else None,
            # The SDK's own client, with the reply cap and the whole-request deadline.
            http_client=bound_client(
                settings.max_reply_bytes,
                limits=openai.DEFAULT_CONNECTION_LIMITS,
                follow_redirects=True,
            ),
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
            f"server, fix {OPT_BASE_URL}, or pass {OPT_SERVED_MODEL}=NAME."
        )

    def identity(self) -> dict[str, Any]:
        """Provider, endpoint and served model name."""
        return {**super().identity(), "model": self.served}

    def prepare(self, request: ModelRequest) -> Prepared | ModelOutput:
        """The official body (ReAct) or a function-calling body (native)."""
        body = request_body(
            request, self.served, self.settings, self.stop, vision=self.vision, extra=self.extra
        )
        return ModelOutput("", Usage()) if body is None else Prepared(body)

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


def make_openai(spec: ModelSpec, context: ModelContext) -> OpenAIChat:
    """Entry point of the ``openai`` provider."""
    if spec.provider == "openai" and not spec.name and spec.entry is None:
        no_base = context.generation.base_url is None and not os.environ.get("OPENAI_BASE_URL")
        if context.generation.served_model is None and no_base:
            raise GtaUsageError(
                f"{OPT_MODEL}=openai needs a model: openai/gpt-4o, or openai/NAME with "
                f"{OPT_BASE_URL} for a compatible server"
            )
    return OpenAIChat(spec, context)
