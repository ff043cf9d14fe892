"""Where the recording proxy forwards: the run's model endpoint, read off its adapter.

The proxy stands in front of the very endpoint the run's model adapter talks to, with the same
key, headers, model id, timeout, retries and reply cap, so an agent's traffic is sent, limited
and retried as the project's own loop's would be. Only the HTTP chat adapters have such an
endpoint: ``openai`` (OpenAI itself, the catalog's vendor APIs, any compatible server, the
server ``--gta-serve`` starts) and ``anthropic``. Models run in the process (``transformers``,
``vllm``, ``llamacpp``) or not run at all (``oracle``, ``mock``, recorded predictions) have
none; :func:`no_upstream_reason` says so in words a usage error can carry.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from pytest_gta.flags import OPT_BASE_URL, OPT_MODEL, OPT_SERVE
from pytest_gta.models.anthropic_chat import AnthropicChat
from pytest_gta.models.openai_chat import OpenAIChat

#: The two wire protocols the proxy forwards; each serves its own routes.
Kind = Literal["openai", "anthropic"]
#: Routes (after the case's secret) of each kind, by the API name an :class:`Exchange` records.
ROUTES: dict[Kind, dict[str, str]] = {
    "openai": {"/v1/chat/completions": "chat.completions", "/v1/responses": "responses"},
    "anthropic": {"/v1/messages": "messages"},
}
#: What the Messages API requires when the agent's client did not say (the SDK's own default).
ANTHROPIC_VERSION = "2023-06-01"


@dataclass(frozen=True)
class Upstream:
    """The real endpoint behind the proxy, and how to talk to it.

    ``api_key`` is the real key: the proxy adds it to forwarded requests and nowhere else
    (``repr`` leaves it out, so a log line or a traceback showing an ``Upstream`` cannot leak it).
    """

    kind: Kind
    #: The SDK's base URL: ``https://api.openai.com/v1`` (OpenAI kind, with ``/v1``) or
    #: ``https://api.anthropic.com`` (Anthropic kind, without).
    base_url: str
    #: The model id every forwarded request names (the agent's own choice is replaced).
    model: str
    api_key: str = field(repr=False)
    #: Extra headers the run was given (``--gta-model-args=headers=...``); credentials too.
    headers: Mapping[str, str] = field(default_factory=dict, repr=False)
    #: The endpoint as shown everywhere (no password): the adapter's ``endpoint``.
    endpoint: str = ""
    #: What makes two answers interchangeable in the response cache (the adapter's identity).
    identity: Mapping[str, Any] = field(default_factory=dict)
    timeout: float = 120.0
    retries: int = 5
    max_concurrency: int = 64
    max_reply_bytes: int = 8 * 2**20

    def url(self, route: str) -> str:
        """The upstream URL of an agent's route (``/v1/chat/completions``, ``/v1/messages``)."""
        base = self.base_url.rstrip("/")
        if self.kind == "openai":
            # The OpenAI SDK's base URL already ends in the version (``.../v1``).
            return base + route.removeprefix("/v1")
        return base + route

    def auth_headers(self) -> dict[str, str]:
        """The headers that carry the real key (and the run's extra headers)."""
        if self.kind == "anthropic":
            auth = {"x-api-key": self.api_key, "anthropic-version": ANTHROPIC_VERSION}
        else:
            auth = {"authorization": f"Bearer {self.api_key}"}
        return {**auth, **{k.lower(): str(v) for k, v in self.headers.items()}}


def _of_adapter(model: OpenAIChat | AnthropicChat, kind: Kind) -> Upstream:
    settings = model.settings
    headers = settings.model_args.get("headers")
    return Upstream(
        kind=kind,
        base_url=str(model.client.base_url),
        model=model.served,
        api_key=str(model.client.api_key),
        headers={str(k): str(v) for k, v in headers.items()}
        if isinstance(headers, Mapping)
        else {},
        endpoint=model.endpoint,
        identity=model.identity(),
        timeout=settings.timeout,
        retries=settings.retries,
        max_concurrency=settings.max_concurrency,
        max_reply_bytes=settings.max_reply_bytes,
    )


def upstream_of(model: object) -> Upstream | None:
    """Where the proxy forwards for the run's ``model``; ``None`` when it has no HTTP endpoint.

    Reads what the adapter was built with (base URL, key, headers, model id, timeout, retries,
    reply cap), so every rule the adapter applied when it was made (catalog vendor APIs,
    ``OPENAI_BASE_URL``, ``api_key_env``, the served model read from ``/models``, a managed
    server's URL) holds for the proxy too.
    """
    if isinstance(model, OpenAIChat):
        return _of_adapter(model, "openai")
    if isinstance(model, AnthropicChat):
        return _of_adapter(model, "anthropic")
    return None


def no_upstream_reason(model: object) -> str:
    """Why :func:`upstream_of` found nothing for ``model``, for a usage error."""
    name = getattr(model, "name", None) or type(model).__name__
    return (
        f"the model {name} has no HTTP endpoint an agent could talk to (only openai/... "
        f"models, including catalog names, {OPT_BASE_URL} and {OPT_SERVE} servers, and "
        f"anthropic/... models have one); an agent needs one of those as {OPT_MODEL}"
    )
