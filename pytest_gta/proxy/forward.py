"""One agent request, forwarded: cache, budget, concurrency slot, retries, recording.

The order is :meth:`~pytest_gta.models.chat.ChatAdapter.generate`'s, with the same helpers:

1. the forwarded body (the run's model id in it) is looked up in the response cache; a hit is
   replayed, streamed if the request streams, and costs nothing;
2. the session's budget is checked (spent: HTTP 402, and the case keeps the reason so that it
   stops as a budgeted run does);
3. the endpoint's process-wide concurrency slot is taken (shared with the adapter's own calls),
   and the budget checked again;
4. 408, 409, 429, 5xx, timeouts, dropped connections and unreadable 2xx bodies are retried with
   :func:`~pytest_gta.models.chat.call_with_retries` (backoff, ``Retry-After``);
5. a whole reply is read by :func:`~pytest_gta.models.chat.read_reply` before the agent gets it;
   a stream passes on chunk by chunk as it arrives, read along for the transcript and usage.

Errors the proxy makes itself carry ``x-should-retry: false``, which both official SDKs honour:
the proxy has already retried by the run's policy, and an agent's client retrying on top would
multiply the attempts (and the cost). An upstream's own refusal (a 400 for a bad request, a 401)
reaches the agent with its status and body, the real key redacted from it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

import httpx2

from pytest_gta import outward
from pytest_gta.endpoint import ReplyTooLarge, reply_limit_of
from pytest_gta.errors import GtaBudgetExhausted, GtaInfrastructureError, RetryableError
from pytest_gta.models.cache import ResponseCache
from pytest_gta.models.chat import (
    RETRYABLE_STATUS,
    call_with_retries,
    clip,
    endpoint_limit,
    parse_retry_after,
    read_reply,
)
from pytest_gta.models.usage import Budget
from pytest_gta.proxy.exchange import Exchange
from pytest_gta.proxy.upstream import ROUTES, Upstream
from pytest_gta.proxy.wire import (
    BadRequest,
    Reading,
    StreamReading,
    elide_images,
    reply_of,
    request_body,
)
from pytest_gta.types import ModelOutput, Usage

#: What each API's 2xx answer must be, in error messages.
EXPECTED = {
    "chat.completions": "a chat completion",
    "responses": "a response",
    "messages": "a Messages API reply",
}
#: The agent's headers forwarded as they are; everything else (its ``authorization``,
#: ``x-api-key``, cookies, SDK telemetry) stays behind.
PASSED_HEADERS = frozenset({"anthropic-version", "anthropic-beta", "openai-beta"})
EVENT_STREAM = "text/event-stream"


class AgentGone(Exception):
    """The agent closed its connection while the proxy was answering."""


class Answerer(Protocol):
    """Answers an agent's request: :class:`Forwarder`, or the proxy for an in-process model."""

    def answer(self, incoming: Incoming, out: Reply, outcome: Outcome) -> None:
        """Answer ``incoming`` on ``out``, noting what happened in ``outcome``."""


class Reply(Protocol):
    """How the proxy answers the agent (the HTTP handler implements it)."""

    def send(self, status: int, body: bytes, content_type: str, headers: Mapping[str, str]) -> None:
        """A whole answer."""

    def start(self, status: int, content_type: str) -> None:
        """Begin a streamed answer."""

    def chunk(self, data: bytes) -> None:
        """A piece of a streamed answer; raises :class:`AgentGone` when nobody reads."""

    def end(self, complete: bool) -> None:
        """End a streamed answer (``complete=False``: cut it off, the agent sees an error).

        :meth:`send` and :meth:`end` record the exchange just before their last bytes.
        """


class Refused(Exception):
    """The upstream answered with a status that retrying will not change."""

    def __init__(self, status: int, content_type: str, body: bytes, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.content_type = content_type
        self.body = body


def error_body(kind: str, message: str) -> bytes:
    """An error both SDKs read (``error.message``; Anthropic's ``type: error`` envelope)."""
    error = {"type": kind, "message": outward.clean_text(message), "code": kind}
    return json.dumps({"type": "error", "error": error}).encode()


def send_error(out: Reply, status: int, kind: str, message: str) -> None:
    """An error the proxy makes, which the agent's SDK must not retry."""
    out.send(status, error_body(kind, message), "application/json", {"x-should-retry": "false"})


@dataclass(frozen=True)
class Incoming:
    """An agent's request as the HTTP handler read it."""

    api: str
    raw: bytes
    headers: Mapping[str, str]
    epoch: int = 0
    #: The case's query id and its next request number: what a model in this process is asked
    #: about (:mod:`pytest_gta.proxy.local`); an upstream does not need them.
    query: str = ""
    next_turn: Callable[[], int] = field(default=lambda: 0)


@dataclass
class Outcome:
    """What the proxy learnt answering one request, made into an :class:`Exchange`."""

    api: str
    started: float
    request: Any = None
    requested_model: str | None = None
    streamed: bool = False
    status: int = 0
    reply: str = ""
    usage: Usage | None = None
    cached: bool = False
    attempts: int = 0
    error: str | None = None
    budget: GtaBudgetExhausted | None = None

    def exchange(self) -> Exchange:
        """The transcript entry, cleaned (secrets redacted, surrogates replaced)."""
        return Exchange(
            api=self.api,
            request=outward.clean(self.request),
            reply=outward.clean_text(self.reply),
            usage=self.usage,
            status=self.status,
            cached=self.cached,
            retries=max(0, self.attempts - 1),
            duration=time.monotonic() - self.started,
            streamed=self.streamed,
            requested_model=None
            if self.requested_model is None
            else outward.clean_text(self.requested_model),
            error=None if self.error is None else outward.clean_text(self.error),
        )

    def failed(self, out: Reply, status: int, kind: str, message: str) -> None:
        """Note an error, then answer the agent with it."""
        self.status, self.error, self.reply = status, message, message
        send_error(out, status, kind, message)


#: Shorter header values are not secrets (``true``, a version): not worth scrubbing.
MIN_SECRET_CHARS = 8
#: What a secret in a reply becomes on its way to the agent.
REDACTED = b"[redacted upstream key]"


class Scrubber:
    """Takes the upstream's secrets out of a reply, whole or chunk by chunk.

    An upstream that echoes the request's headers (a debugging endpoint, a misconfigured
    gateway) would hand the agent the real key in a 200 as well as in an error. In a stream a
    secret may straddle two chunks, so a chunk's end that begins a secret is held back until
    the next chunk (or the end) shows whether it is one; any other end goes out at once, so a
    stream is passed on as it comes.
    """

    def __init__(self, hidden: tuple[bytes, ...]) -> None:
        self._hidden = hidden
        self._held = b""

    def whole(self, data: bytes) -> bytes:
        """``data`` with every secret replaced."""
        for secret in self._hidden:
            data = data.replace(secret, REDACTED)
        return data

    def _started(self, data: bytes) -> int:
        """How many bytes at the end of ``data`` begin one of the secrets."""
        longest = 0
        for secret in self._hidden:
            for size in range(min(len(secret) - 1, len(data)), longest, -1):
                if data.endswith(secret[:size]):
                    longest = size
                    break
        return longest

    def feed(self, chunk: bytes) -> bytes:
        """What of the stream so far can go out now."""
        if not self._hidden:
            return chunk
        data = self.whole(self._held + chunk)
        cut = len(data) - self._started(data)
        self._held = data[cut:]
        return data[:cut]

    def flush(self) -> bytes:
        """The held-back end of the stream."""
        rest, self._held = self.whole(self._held), b""
        return rest


class Forwarder:
    """Answers agents' requests from the upstream, the cache and the budget."""

    def __init__(
        self,
        upstream: Upstream,
        client: httpx2.Client,
        *,
        cache: ResponseCache | None,
        budget: Budget | None,
    ) -> None:
        self.upstream = upstream
        self.client = client
        self.cache = cache
        self.budget = budget

    def scrub(self, text: str) -> str:
        """``text`` without the real key (also when it is too short to count as a secret)."""
        key = self.upstream.api_key
        if key and key in text:
            text = text.replace(key, "[redacted upstream key]")
        return outward.redact(text)

    def hidden(self) -> tuple[bytes, ...]:
        """What must never reach the agent: the real key, the upstream's header values."""
        values = (self.upstream.api_key, *self.upstream.headers.values())
        return tuple(v.encode() for v in values if v and len(v) >= MIN_SECRET_CHARS)

    def answer(self, incoming: Incoming, out: Reply, outcome: Outcome) -> None:
        """Answer ``incoming`` on ``out``, noting what happened in ``outcome``.

        ``outcome`` is complete before the last bytes of an answer go out (``out`` records it
        then), so that an agent's next request finds this one booked and in the transcript.
        Never raises for anything the agent or the upstream sent.

        Raises:
            AgentGone: the agent stopped reading a whole answer.
        """
        try:
            body = request_body(incoming.raw)
        except BadRequest as exc:
            outcome.request = f"[not forwarded: {exc}]"
            outcome.failed(out, 400, "invalid_request_error", str(exc))
            return
        asked = body.get("model")
        outcome.requested_model = asked if isinstance(asked, str) else None
        body["model"] = self.upstream.model
        outcome.streamed = body.get("stream") is True
        if outcome.streamed and incoming.api == "chat.completions":
            # Usage in a stream only comes when asked for (the OpenAI API reference,
            # ``stream_options``); the agent then also gets the last, choice-less chunk.
            options = body.get("stream_options")
            body["stream_options"] = {**(options if isinstance(options, dict) else {})}
            body["stream_options"]["include_usage"] = True
        outcome.request = elide_images(body)
        try:
            payload = json.dumps(body).encode("ascii")
        except (TypeError, ValueError, RecursionError) as exc:  # NaN passes; these do not
            outcome.failed(out, 400, "invalid_request_error", f"cannot forward the body: {exc}")
            return
        key = self.cache_key(incoming.api, body, incoming.epoch)
        if self.replay(key, outcome, out):
            return
        try:
            self.check_budget()
            with endpoint_limit(self.upstream.endpoint, self.upstream.max_concurrency):
                # Again: the calls ahead in the queue for a slot may have spent the budget.
                self.check_budget()
                self.forward(incoming, payload, key, outcome, out)
        except GtaBudgetExhausted as exc:
            outcome.budget = exc
            outcome.failed(out, 402, "budget_exhausted", f"pytest-gta: {exc}")

    def check_budget(self) -> None:
        """Raise :class:`GtaBudgetExhausted` once the session's budget is spent."""
        if self.budget is not None:
            self.budget.check()

    def cache_key(self, api: str, body: dict[str, Any], epoch: int) -> str | None:
        """The response-cache key of a forwarded body (``None``: no cache)."""
        if self.cache is None:
            return None
        upstream = self.upstream
        identity = dict(upstream.identity) or {
            "provider": upstream.kind,
            "endpoint": upstream.endpoint,
            "model": upstream.model,
        }
        identity.update(api=api, via="proxy")
        return ResponseCache.key({"identity": identity, "payload": body, "epoch": epoch})

    def replay(self, key: str | None, outcome: Outcome, out: Reply) -> bool:
        """Answer from the cache, as the upstream answered (a stream as a stream)."""
        if self.cache is None or key is None:
            return False
        hit = self.cache.get(key)
        if hit is None:
            return False
        raw = hit.text.encode("utf-8", errors="replace")
        if outcome.streamed:
            reading = self.read_stream(outcome.api, raw)
        else:
            try:
                reading = reply_of(outcome.api, json.loads(raw))
            except Exception:  # an entry this proxy wrote; whatever it holds, it is sent
                reading = Reading("", None)
        outcome.usage = replace(hit.usage or Usage(), calls=0, cached_calls=1)
        outcome.status, outcome.cached, outcome.reply = 200, True, reading.text
        if outcome.streamed:
            out.start(200, EVENT_STREAM)
            out.chunk(raw)
            out.end(True)
        else:
            out.send(200, raw, "application/json", {})
        return True

    @staticmethod
    def read_stream(api: str, raw: bytes) -> Reading:
        """The reading of a whole recorded stream."""
        reading = StreamReading(api)
        reading.feed(raw)
        return reading.finish()

    def headers(self, incoming: Incoming) -> dict[str, str]:
        """The forwarded request's headers: the agent's harmless ones, then the real key."""
        passed = {k.lower(): v for k, v in incoming.headers.items() if k.lower() in PASSED_HEADERS}
        auth = self.upstream.auth_headers()
        if "anthropic-version" in passed:
            auth.pop("anthropic-version", None)
        return {**passed, **auth, "content-type": "application/json"}

    def forward(
        self, incoming: Incoming, payload: bytes, key: str | None, outcome: Outcome, out: Reply
    ) -> None:
        """Send to the upstream with retries and pass the answer on."""
        routes = ROUTES[self.upstream.kind].items()
        url = self.upstream.url(next(route for route, api in routes if api == incoming.api))
        request = self.client.build_request(
            "POST", url, content=payload, headers=self.headers(incoming)
        )

        def attempt() -> httpx2.Response:
            outcome.attempts += 1
            return self.send(request, outcome)

        describe = f"{self.upstream.model} at {self.upstream.endpoint} (through the proxy)"
        try:
            response = call_with_retries(attempt, retries=self.upstream.retries, describe=describe)
        except ReplyTooLarge as exc:
            # As the adapter books it: a paid call with unknown tokens, not cached.
            outcome.usage = Usage(calls=1)
            if self.budget is not None:
                self.budget.add(outcome.usage)
            outcome.failed(out, 502, "reply_too_large", f"{self.upstream.endpoint}: {exc}")
            return
        except Refused as exc:
            body = self.scrub(exc.body.decode("utf-8", errors="replace")).encode()
            outcome.status, outcome.error, outcome.reply = exc.status, str(exc), str(exc)
            out.send(exc.status, body, exc.content_type or "application/json", {})
            return
        except GtaInfrastructureError as exc:
            outcome.failed(out, 502, "upstream_error", self.scrub(str(exc)))
            return
        if outcome.streamed:
            self.stream(response, key, outcome, out)
        else:
            self.whole(response, key, outcome, out)

    def send(self, request: httpx2.Request, outcome: Outcome) -> httpx2.Response:
        """One attempt: a 2xx response (a whole one read and checked, a stream opened).

        Raises:
            RetryableError: a transient failure (the status, a timeout, a dropped connection,
                an unreadable whole body).
            Refused: a status that retrying does not change.
            ReplyTooLarge: over ``--gta-max-reply-bytes``.
            GtaInfrastructureError: a 2xx body of the wrong shape.
        """
        endpoint = self.upstream.endpoint
        try:
            response = self.client.send(request, stream=True)
            if not (200 <= response.status_code < 300 and outcome.streamed):
                response.read()
        except Exception as exc:
            oversized = reply_limit_of(exc)
            if oversized is not None:
                raise oversized from None
            if isinstance(exc, httpx2.TimeoutException):
                raise RetryableError(f"{endpoint} timed out: {exc}") from None
            if isinstance(exc, httpx2.TransportError):
                raise RetryableError(f"{endpoint} could not be reached: {exc}") from None
            raise GtaInfrastructureError(f"{endpoint}: {type(exc).__name__}: {exc}") from None
        status = response.status_code
        if 200 <= status < 300:
            if not outcome.streamed:
                reading = read_reply(
                    response,
                    lambda data: reply_of(outcome.api, data),
                    endpoint=endpoint,
                    expected=EXPECTED[outcome.api],
                    secret=self.upstream.api_key,
                )
                outcome.reply = reading.text
                outcome.usage = reading.usage
            return response
        response.read()
        response.close()
        text = response.content.decode("utf-8", errors="replace")
        message = f"{endpoint} answered HTTP {status}: {clip(self.scrub(text))}"
        if status in RETRYABLE_STATUS:
            raise RetryableError(message, parse_retry_after(response.headers))
        content_type = response.headers.get("content-type", "")
        raise Refused(status, content_type, response.content, message)

    def settle(self, key: str | None, outcome: Outcome, raw: bytes, complete: bool) -> None:
        """Book a paid answer (budget) and store a complete one in the cache."""
        usage = replace(outcome.usage or Usage(), calls=1, cached_calls=0)
        outcome.usage = usage
        if self.budget is not None:
            self.budget.add(usage)
        if not complete or self.cache is None or key is None:
            return
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            return  # replayed bytes must be the upstream's; not worth a lossy entry
        about = {"model": self.upstream.model, "endpoint": self.upstream.endpoint}
        self.cache.put(key, ModelOutput(self.scrub(text), usage), {**about, "api": outcome.api})

    def whole(
        self, response: httpx2.Response, key: str | None, outcome: Outcome, out: Reply
    ) -> None:
        """Pass a whole (checked) reply on, then book it."""
        outcome.status = response.status_code
        content_type = response.headers.get("content-type") or "application/json"
        self.settle(key, outcome, response.content, complete=True)
        body = Scrubber(self.hidden()).whole(response.content)
        out.send(response.status_code, body, content_type, {})

    def stream(
        self, response: httpx2.Response, key: str | None, outcome: Outcome, out: Reply
    ) -> None:
        """Pass a stream on chunk by chunk, reading it along; book it when it ends."""
        outcome.status = response.status_code
        reading = StreamReading(outcome.api)
        raw = bytearray()
        complete = False
        scrubber = Scrubber(self.hidden())
        try:
            out.start(response.status_code, response.headers.get("content-type") or EVENT_STREAM)
            for chunk in response.iter_raw():
                reading.feed(chunk)
                raw += chunk
                passed = scrubber.feed(chunk)
                if passed:
                    out.chunk(passed)
            rest = scrubber.flush()
            if rest:
                out.chunk(rest)
            complete = True
        except AgentGone:
            outcome.error = "the agent closed the connection before the stream ended"
        except Exception as exc:  # the upstream broke off: the agent sees a cut stream
            problem = reply_limit_of(exc) or exc
            outcome.error = f"{self.upstream.endpoint}: the stream broke off: {problem}"
        finally:
            response.close()
        result = reading.finish()
        outcome.reply, outcome.usage = self.scrub(result.text), result.usage
        self.settle(key, outcome, bytes(raw), complete)
        try:
            out.end(complete)
        except AgentGone:
            pass
