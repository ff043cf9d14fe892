"""One model request through the proxy, as a case's transcript keeps it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pytest_gta import outward
from pytest_gta.models.usage import Prices
from pytest_gta.types import Usage


@dataclass(frozen=True)
class Exchange:
    """A request an agent sent through its case's proxy URL, and what came of it.

    Everything in it is already cleaned for writing (secrets redacted, lone surrogates
    replaced, images left out of the request), so a report can take it as it is.
    """

    #: ``chat.completions``, ``responses`` or ``messages``; ``""`` for a request the proxy
    #: refused before knowing (an unknown route).
    api: str
    #: The body as forwarded (the run's model id in it), redacted, images elided; or a note
    #: saying why there is none (not JSON, too large).
    request: Any
    #: The reply's text and tool calls as readable text (for an error: the error's message).
    reply: str
    #: Tokens of the reply (0 when the upstream reported none); ``calls=1`` for an answer paid
    #: for (a reply over the size limit too), ``cached_calls=1`` for a replay. ``None``: no
    #: answer came (an error of the proxy's or the upstream's).
    usage: Usage | None
    #: The HTTP status the agent got.
    status: int
    #: Answered from the response cache (no upstream request, no cost).
    cached: bool
    #: Upstream attempts retried (429, 5xx, timeouts, unreadable bodies).
    retries: int
    #: Seconds from the agent's request to the end of the answer.
    duration: float
    #: Answered as server-sent events.
    streamed: bool
    #: The model name the agent asked for (the run's model was sent instead).
    requested_model: str | None = None
    #: Why the exchange failed (the agent got an error, or a stream broke off), if it did.
    error: str | None = None

    def cost(self, prices: Prices | None) -> float | None:
        """USD this exchange cost (a cached one costs nothing); ``None`` without prices."""
        if prices is None:
            return None
        if self.usage is None or self.cached:
            return 0.0
        return prices.cost(self.usage.input_tokens, self.usage.output_tokens)

    def to_json(self) -> dict[str, Any]:
        """A JSON-able dict for reports (already clean; cleaned again to be sure)."""
        usage = self.usage
        return {
            "api": self.api,
            "requested_model": self.requested_model,
            "request": outward.clean(self.request),
            "reply": outward.clean_text(self.reply),
            "usage": None
            if usage is None
            else {
                "input_tokens": usage.input_tokens,
                "output_tokens": usage.output_tokens,
                "calls": usage.calls,
                "cached_calls": usage.cached_calls,
            },
            "status": self.status,
            "cached": self.cached,
            "retries": self.retries,
            "duration": round(self.duration, 3),
            "streamed": self.streamed,
            "error": None if self.error is None else outward.clean_text(self.error),
        }
