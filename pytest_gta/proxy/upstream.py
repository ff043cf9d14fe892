"""Where the recording proxy sends an agent's requests: the run's model, read off its adapter.

An HTTP chat adapter has an endpoint (:class:`Upstream`): ``openai`` (OpenAI itself, the
catalog's vendor APIs, any compatible server, the server ``--gta-serve`` starts) and
``anthropic``. The proxy stands in front of the very endpoint the adapter talks to, with the
same key, headers, model id, timeout, retries and reply cap, so an agent's traffic is sent,
limited and retried as the project's own loop's would be.

Every other model that generates (``transformers``, ``vllm`` and ``llamacpp`` in this process,
``oracle``, ``mock:`` scripts, a ``pytest_gta_make_model`` hook's adapter) has no endpoint: the
proxy answers for it (:class:`LocalModel`, :mod:`pytest_gta.proxy.local`), calling the adapter
as the project's own loop does. Only recorded predictions have nothing to answer with;
:func:`no_upstream_reason` says so in words a usage error can carry.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from pytest_gta.flags import OPT_MODEL
from pytest_gta.models.anthropic_chat import AnthropicChat
from pytest_gta.models.base import BaseModelAdapter, default_concurrency, generates
from pytest_gta.models.openai_chat import OpenAIChat

#: The two wire protocols the proxy forwards; each serves its own routes.
Kind = Literal["openai", "anthropic"]
_OPENAI_ROUTES = {"/v1/chat/completions": "chat.completions", "/v1/responses": "responses"}
_ANTHROPIC_ROUTES = {"/v1/messages": "messages"}
#: Routes (after the case's secret) of each kind, by the API name an :class:`Exchange` records.
#: A model in this process is answered by the proxy itself, in all three APIs.
ROUTES: dict[str, dict[str, str]] = {
    "openai": _OPENAI_ROUTES,
    "anthropic": _ANTHROPIC_ROUTES,
    "local": {**_OPENAI_ROUTES, **_ANTHROPIC_ROUTES},
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


class LocalModel:
    """A model without an HTTP endpoint, which the proxy answers for by calling its adapter.

    The adapter's own ``generate`` runs each request, so its response cache, budget checks and
    usage are the ones the project's loop has. An adapter not written for threads
    (:attr:`~pytest_gta.models.base.BaseModelAdapter.concurrency` 1: the in-process engines,
    whose batches must not depend on timing, and any adapter that does not say) is called by
    one request at a time; one that is gets up to its concurrency at once.
    """

    kind = "local"

    def __init__(self, adapter: BaseModelAdapter) -> None:
        self.adapter = adapter
        served = getattr(adapter, "served", None)
        #: The model id the agent is told, and every reply names.
        self.model: str = served if isinstance(served, str) and served else adapter.name
        #: How many requests may be in the adapter at once.
        self.concurrency = default_concurrency(adapter)
        self.slots = threading.BoundedSemaphore(self.concurrency)

    def __repr__(self) -> str:
        return f"LocalModel({self.model!r}, concurrency={self.concurrency})"


def upstream_of(model: object) -> Upstream | LocalModel | None:
    """What the proxy answers the run's ``model`` with; ``None`` when nothing can.

    For an HTTP adapter, its endpoint: reads what the adapter was built with (base URL, key,
    headers, model id, timeout, retries, reply cap), so every rule the adapter applied when it
    was made (catalog vendor APIs, ``OPENAI_BASE_URL``, ``api_key_env``, the served model read
    from ``/models``, a managed server's URL) holds for the proxy too. For any other model that
    generates, the model itself (:class:`LocalModel`); recorded predictions have none.
    """
    if isinstance(model, OpenAIChat):
        return _of_adapter(model, "openai")
    if isinstance(model, AnthropicChat):
        return _of_adapter(model, "anthropic")
    if generates(model):
        return LocalModel(model)
    return None


def no_upstream_reason(model: object) -> str:
    """Why :func:`upstream_of` found nothing for ``model``, for a usage error."""
    name = getattr(model, "name", None) or type(model).__name__
    return (
        f"the model {name} replays recorded predictions: there is no model for an agent to "
        f"talk to; give {OPT_MODEL} a model that generates"
    )
