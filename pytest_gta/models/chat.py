"""What every real chat adapter shares: response cache, budget, concurrency limit and retries.

A provider adapter only turns a :class:`~pytest_gta.types.ModelRequest` into a JSON-able
payload (:meth:`ChatAdapter.prepare`) and sends one payload (:meth:`ChatAdapter.send`). The
base class wraps that in the same order for every provider:

1. the payload is looked up in the content-addressed response cache (a hit costs nothing);
2. the session's token/cost budget is checked (exhausted: the case is skipped, the session stops);
3. a per-endpoint semaphore shared by the process bounds requests in flight; the budget is
   checked again once a slot is held, since the calls ahead may have spent it meanwhile;
4. 429, 408, 5xx, timeouts and connection errors are retried with exponential backoff and
   jitter, honouring ``Retry-After``; anything else, or running out of retries, raises
   :class:`~pytest_gta.errors.GtaInfrastructureError`, so the case is an *error*, never a wrong
   answer;
5. a 2xx answer is read by :func:`read_reply`, never trusted to be what the SDK expects (an
   SDK hands back a ``str`` for an HTML page and builds models of any JSON without checking).
   Whatever the body, the case gets a reply the harness scores, or an error whose message
   names the endpoint and quotes the start of the body. Transient (retried like a 502): an empty
   body, a body declared as JSON (or undeclared) that cannot be read as JSON (what a reply cut
   short by a proxy or a server restarting mid-write looks like; JSON nested too deeply or with
   a number past Python's digit limit lands here too, as telling them apart would take a parser
   of our own and a retry costs little), and an error object in the body whose code or type
   says "try again" (gateways such as OpenRouter answer 200 with one when the upstream fails).
   Not retried, because the same request gets the same answer: a page of another type (HTML,
   text: a wrong base URL, a web UI, a login page in front of the API), and JSON of the wrong
   shape or with impossible usage numbers (a server speaking another API, or a broken one).

The provider SDKs' own retries are switched off so that this policy is the only one.
"""

from __future__ import annotations

import email.utils
import logging
import random
import re
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from types import NoneType
from typing import Any, ClassVar, Protocol, TypeVar

from pytest_gta import jsonsafe, outward
from pytest_gta.endpoint import ReplyTooLarge, reply_limit_of
from pytest_gta.errors import GtaError, GtaInfrastructureError, RetryableError
from pytest_gta.models.base import BaseModelAdapter
from pytest_gta.models.cache import ResponseCache
from pytest_gta.models.generation import GenerationSettings
from pytest_gta.models.usage import Budget
from pytest_gta.types import ModelOutput, ModelRequest, Usage

log = logging.getLogger("pytest_gta.models")

T = TypeVar("T")

#: First backoff delay in seconds; doubles per attempt up to :data:`BACKOFF_CAP`.
BACKOFF_BASE = 0.5
BACKOFF_CAP = 30.0
#: Longest ``Retry-After`` we honour; a server asking for more is treated as down.
RETRY_AFTER_CAP = 300.0
RETRYABLE_STATUS = frozenset({408, 409, 429, 500, 502, 503, 504, 529})
#: Error ``type`` values in a 200 body that mean "try again": OpenAI's ``server_error`` and
#: Anthropic's names for 500, 429, 504 and 529.
TRANSIENT_ERROR_TYPES = frozenset(
    {"server_error", "api_error", "rate_limit_error", "timeout_error", "overloaded_error"}
)
#: Characters of an unusable body quoted in an error: enough to recognise a proxy's error page
#: or a web UI, short enough for a one-line case message.
BODY_CLIP = 100
#: A larger count in a reply's usage is not a real call's (no model's window comes near) but a
#: broken server's, and would make the token budget and the cost meaningless.
MAX_TOKEN_COUNT = 10**9


def parse_retry_after(headers: Mapping[str, str] | None) -> float | None:
    """Seconds to wait from ``retry-after-ms`` / ``Retry-After`` (seconds or an HTTP date)."""
    if not headers:
        return None
    lowered = {k.lower(): v for k, v in headers.items()}
    raw_ms = lowered.get("retry-after-ms")
    if raw_ms is not None:
        try:
            return max(0.0, float(raw_ms) / 1000)
        except ValueError:
            pass
    raw = lowered.get("retry-after")
    if raw is None:
        return None
    try:
        return max(0.0, float(raw))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(raw)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def classify_sdk_error(exc: BaseException, endpoint: str) -> Exception:
    """Map an ``openai``/``anthropic`` SDK exception to retryable or fatal.

    Both SDKs are generated alike: status errors carry ``status_code`` and ``response``;
    connection problems and timeouts are ``APIConnectionError``/``APITimeoutError``.
    """
    oversized = reply_limit_of(exc)
    if oversized is not None:
        return oversized
    names = {cls.__name__ for cls in type(exc).__mro__}
    status = getattr(exc, "status_code", None)
    if isinstance(status, int):
        response = getattr(exc, "response", None)
        headers = getattr(response, "headers", None)
        detail = _error_detail(exc)
        message = f"{endpoint} answered HTTP {status}: {detail}"
        if status in RETRYABLE_STATUS:
            return RetryableError(message, parse_retry_after(headers))
        return GtaInfrastructureError(message)
    if names & {"APITimeoutError", "APIConnectionError", "TimeoutException", "ConnectError"}:
        kind = "timed out" if "Timeout" in " ".join(names) else "could not be reached"
        # The SDK's "Request timed out." hides why; the httpx error it wraps says it.
        cause = exc.__cause__
        why = f"{exc} ({str(cause)[:200]})" if cause is not None and str(cause) else str(exc)
        return RetryableError(f"{endpoint} {kind}: {why}")
    return GtaInfrastructureError(f"{endpoint}: {type(exc).__name__}: {exc}")


def _error_detail(exc: BaseException) -> str:
    body = getattr(exc, "body", None)
    if isinstance(body, Mapping):
        error = body.get("error", body)
        if isinstance(error, Mapping) and error.get("message"):
            return outward.clip(str(error["message"]), 300)
    return outward.clip(str(exc), 300)


class HTTPResponse(Protocol):
    """What the raw response of either SDK (``with_raw_response``) offers, httpx or httpx2."""

    @property
    def status_code(self) -> int:
        """The HTTP status."""

    @property
    def headers(self) -> Mapping[str, str]:
        """Response headers, looked up case-insensitively."""

    @property
    def content(self) -> bytes:
        """The whole body (non-streaming requests read it before returning)."""


class MalformedReply(Exception):
    """A member of a reply's JSON is missing or has the wrong type; the message names it."""


_JSON_KINDS: dict[type, str] = {
    dict: "an object",
    list: "a list",
    str: "a string",
    int: "an integer",
    float: "a number",
    bool: "a boolean",
    NoneType: "null",
}
#: A media type as RFC 9110 spells one; anything else is quoted rather than shown as is.
_MEDIA_TYPE = re.compile(r"[\w!#$&^.+-]{1,60}/[\w!#$&^.+-]{1,60}")


def expect(value: Any, where: str, *kinds: type) -> Any:
    """``value`` if its JSON type is one of ``kinds`` (``NoneType`` for null).

    Types are compared exactly: JSON's ``true`` is no integer, whatever ``isinstance`` says.

    Raises:
        MalformedReply: naming ``where`` and what it holds instead.
    """
    if type(value) in kinds:
        return value
    wanted = " or ".join(_JSON_KINDS.get(kind, kind.__name__) for kind in kinds)
    found = _JSON_KINDS.get(type(value), type(value).__name__)
    raise MalformedReply(f"{where} is {found}, not {wanted}")


def member(obj: Mapping[str, Any], key: str, *kinds: type, at: str = "") -> Any:
    """``obj[key]`` checked by :func:`expect`; a missing member counts as null.

    ``at`` is the path of ``obj`` in the reply, so the message names the member in full.
    """
    where = f"{at}.{key}" if at else key
    if key not in obj:
        if NoneType in kinds:
            return None
        raise MalformedReply(f"{where} is missing")
    return expect(obj[key], where, *kinds)


def reply_usage(reply: Mapping[str, Any], input_key: str, output_key: str) -> Usage:
    """A reply's ``usage`` object as :class:`~pytest_gta.types.Usage` (none reported: zeros).

    Raises:
        MalformedReply: usage is not an object, or a count is not an integer from 0 to
            :data:`MAX_TOKEN_COUNT`.
    """
    usage = member(reply, "usage", dict, NoneType)
    if usage is None:
        return Usage()
    counts = []
    for key in (input_key, output_key):
        count = member(usage, key, int, NoneType, at="usage") or 0
        if not 0 <= count <= MAX_TOKEN_COUNT:
            # Never format the number itself: past 4,300 digits ``str`` refuses it.
            size = "negative" if count < 0 else f"more than {MAX_TOKEN_COUNT:,}"
            raise MalformedReply(f"usage.{key} is {size}, not a token count")
        counts.append(count)
    return Usage(counts[0], counts[1])


def clip(text: str, limit: int = BODY_CLIP) -> str:
    """The start of ``text`` on one line, quoted by ``repr``.

    ``repr`` escapes what a terminal, a log or an XML report cannot carry (control characters,
    lone surrogates), so a hostile body cannot break the report that shows it.
    """
    flat = " ".join(outward.head(text, 4 * limit).split())
    return repr(flat[:limit] + "..." if len(flat) > limit else flat)


@dataclass(frozen=True)
class Answer:
    """A 2xx HTTP answer and how to describe it in an error."""

    endpoint: str
    status: int
    media_type: str
    body: bytes
    #: What it should have been, for messages: "a chat completion".
    expected: str
    #: The API key the request carried; an endpoint that echoes the request must not leak it.
    secret: str | None = None

    def quote(self, text: str | None = None) -> str:
        """``text`` (default: the body) clipped, with the key redacted."""
        if text is None:
            text = self.body[: 8 * BODY_CLIP + 1].decode("utf-8", errors="replace")
        if self.secret and len(self.secret) >= 8:
            text = text.replace(self.secret, "[redacted]")
        # Cut on whole words: a cut through a key would leave its start unredacted.
        return clip(outward.head(text, 8 * BODY_CLIP))

    def says(self, what: str) -> str:
        """``<endpoint> answered HTTP <status> <what>: <the body, clipped>``."""
        return f"{self.endpoint} answered HTTP {self.status} {what}: {self.quote()}"

    def typed_body(self) -> str:
        """``a text/html body``, ``an application/json body``, or what stands for them."""
        if not self.media_type:
            return "a body without a content type"
        if not _MEDIA_TYPE.fullmatch(self.media_type):
            return f"a body of content type {clip(self.media_type, 40)}"
        article = "an" if self.media_type[0] in "aeiou" else "a"
        return f"{article} {self.media_type} body"

    def json(self) -> Any:
        """The body's JSON value.

        Raises:
            RetryableError: the body is empty, or declared as JSON (or not declared) and
                unreadable: what a reply cut short or garbled on the way looks like.
            GtaInfrastructureError: a body of another type (an HTML page, plain text).
        """
        if not self.body.strip():
            raise RetryableError(
                f"{self.endpoint} answered HTTP {self.status} with an empty body, "
                f"not {self.expected}"
            )
        try:
            return jsonsafe.loads(self.body)
        except jsonsafe.JsonInputError as exc:
            if self.media_type and not self.media_type.endswith("json"):
                raise GtaInfrastructureError(
                    self.says(f"with {self.typed_body()}, not {self.expected}")
                ) from None
            raise RetryableError(
                self.says(f"with {self.typed_body()} that cannot be read as JSON ({exc})")
            ) from None

    def body_error(self, data: Any, headers: Mapping[str, str]) -> Exception | None:
        """The error some gateways put in a 200 body instead of a reply, retryable or not."""
        error = data.get("error") if isinstance(data, dict) else None
        if isinstance(error, str) and error.strip():
            error = {"message": error}
        if not isinstance(error, dict) or not error:
            return None
        message = error.get("message")
        detail = self.quote(message) if isinstance(message, str) else self.quote()
        text = f"{self.endpoint} answered HTTP {self.status} with an error instead of "
        text += f"{self.expected}: {detail}"
        code = error.get("code", data.get("code"))
        if isinstance(code, str) and len(code) == 3 and code.isdigit():
            code = int(code)
        transient = type(code) is int and code in RETRYABLE_STATUS
        if transient or error.get("type") in TRANSIENT_ERROR_TYPES:
            return RetryableError(text, parse_retry_after(headers))
        return GtaInfrastructureError(text)


def read_reply(
    response: HTTPResponse,
    convert: Callable[[Any], T],
    *,
    endpoint: str,
    expected: str,
    secret: str | None = None,
) -> T:
    """What ``convert`` makes of the JSON of a 2xx answer, or the error the case should end in.

    ``convert`` raises :class:`MalformedReply` (through :func:`expect`, :func:`member`,
    :func:`reply_usage`) for a member it cannot use; the policy is in the module docstring.

    Raises:
        RetryableError: a transient failure (see the module docstring).
        GtaInfrastructureError: anything else that is not ``expected``.
    """
    content_type = response.headers.get("content-type") or ""
    answer = Answer(
        endpoint,
        response.status_code,
        content_type.split(";")[0].strip().lower(),
        response.content,
        expected,
        secret,
    )
    data = answer.json()
    try:
        return convert(data)
    except MalformedReply as exc:
        in_body = answer.body_error(data, response.headers)
        if in_body is not None:
            raise in_body from None
        raise GtaInfrastructureError(
            answer.says(f"with JSON that is not {expected} ({exc})")
        ) from None
    except (GtaError, RetryableError):
        raise
    except Exception as exc:
        # The checks above cover what the adapters read; whatever an SDK's own parser still
        # trips over ends the case as an error too, never as a crash (SPEC section 7).
        problem = f"{type(exc).__name__}: {answer.quote(str(exc))}"
        raise GtaInfrastructureError(
            answer.says(f"with {expected} that could not be read ({problem})")
        ) from None


def backoff_delay(attempt: int, retry_after: float | None, rng: random.Random) -> float:
    """Full-jitter exponential backoff, but never sooner than the server asked."""
    ceiling = min(BACKOFF_CAP, BACKOFF_BASE * (2**attempt))
    delay = rng.uniform(ceiling / 2, ceiling)
    if retry_after is not None:
        delay = max(delay, retry_after)
    return delay


def call_with_retries(
    send: Callable[[], T],
    *,
    retries: int,
    describe: str,
    sleep: Callable[[float], None] = time.sleep,
    rng: random.Random | None = None,
) -> T:
    """Run ``send`` until it succeeds, retrying :class:`RetryableError` up to ``retries`` times.

    Raises:
        GtaInfrastructureError: a fatal error, or the last retryable one after ``retries``.
    """
    rng = rng or random.Random()
    attempt = 0
    while True:
        try:
            return send()
        except RetryableError as exc:
            if attempt >= retries:
                raise GtaInfrastructureError(
                    f"{describe}: giving up after {attempt + 1} attempts: {exc}"
                ) from None
            if exc.retry_after is not None and exc.retry_after > RETRY_AFTER_CAP:
                raise GtaInfrastructureError(
                    f"{describe}: the server asks to retry after {exc.retry_after:.0f} s "
                    f"(more than {RETRY_AFTER_CAP:.0f} s): {exc}"
                ) from None
            delay = backoff_delay(attempt, exc.retry_after, rng)
            log.warning("%s: %s; retry %d/%d in %.2f s", describe, exc, attempt + 1, retries, delay)
            sleep(delay)
            attempt += 1


_LIMITS: dict[str, threading.BoundedSemaphore] = {}
_LIMITS_LOCK = threading.Lock()


def endpoint_limit(endpoint: str, max_concurrency: int) -> threading.BoundedSemaphore:
    """The process-wide semaphore of an endpoint (first caller's limit wins)."""
    with _LIMITS_LOCK:
        semaphore = _LIMITS.get(endpoint)
        if semaphore is None:
            semaphore = _LIMITS[endpoint] = threading.BoundedSemaphore(max_concurrency)
        return semaphore


#: ``--gta-model-args`` keys the HTTP adapters (OpenAI, Anthropic) consume themselves; the rest
#: go into the request body. ``endpoint_id`` names the endpoint for the response cache instead
#: of its URL (a managed server's port changes every run: :mod:`pytest_gta.session.model_server`).
ADAPTER_ARGS = frozenset({"vision", "stop", "api_key_env", "headers", "endpoint_id"})


@dataclass(frozen=True)
class Prepared:
    """A request ready to send: the JSON-able payload is also the response-cache key."""

    payload: dict[str, Any]
    #: Anything the adapter needs besides the payload (never part of the cache key).
    extra: Any = None


class ChatAdapter(BaseModelAdapter):
    """Base class of the HTTP and in-process chat adapters.

    Subclasses set :attr:`provider`, :attr:`name`, :attr:`protocol` and :attr:`endpoint`, and
    implement :meth:`prepare` and :meth:`send`. ``generate`` is safe to call from many threads:
    after ``__init__`` an adapter only reads its attributes, the cache and ledger are safe to
    share, and the SDK clients (``openai``, ``anthropic``) send every request through one httpx
    connection pool, which is thread-safe, keeping no per-request state on the client.
    The optional capabilities of :class:`~pytest_gta.models.base.BaseModelAdapter` keep their
    defaults unless a subclass overrides them.
    """

    provider: ClassVar[str] = "chat"
    name: str
    #: The model name sent to the endpoint (also what the official ``max_tokens`` rule reads).
    served: str = ""
    #: Stop words of ReAct requests (``None``: none).
    stop: str | Sequence[str] | None = None
    #: Identifies the endpoint for the concurrency limit and the cache (no secrets).
    endpoint: str
    #: An endpoint serves many requests at once; ``--gta-max-concurrency`` caps them per process.
    concurrency: int = 16

    def __init__(
        self,
        settings: GenerationSettings,
        cache: ResponseCache | None = None,
        budget: Budget | None = None,
    ) -> None:
        self.settings = settings
        self.protocol = settings.protocol
        self.cache = cache
        self.budget = budget
        self.warnings: list[str] = []

    # -- to implement -----------------------------------------------------------------------
    def prepare(self, request: ModelRequest) -> Prepared | ModelOutput:
        """The payload for ``request``, or a final output when nothing must be sent."""
        raise NotImplementedError

    def send(self, prepared: Prepared) -> ModelOutput:
        """Send once. Raise :class:`RetryableError` for transient failures."""
        raise NotImplementedError

    # -- shared machinery ---------------------------------------------------------------------
    def close(self) -> None:
        """Close the SDK client's pooled connections (an HTTP adapter's ``client``), if any."""
        close = getattr(getattr(self, "client", None), "close", None)
        if callable(close):
            close()

    def describe(self) -> dict[str, Any]:
        """Generation settings and where the requests went, for the report (never a key).

        Subclasses add what else identifies their requests (weights, engine arguments...).
        """
        stop = self.stop if self.stop is None or isinstance(self.stop, str) else list(self.stop)
        return {
            **self.settings.report(),
            "provider": self.provider,
            "endpoint": self.endpoint,
            "served_model": self.served,
            "stop": stop,
        }

    def identity(self) -> dict[str, Any]:
        """What, besides the payload, makes two responses interchangeable."""
        named = self.settings.model_args.get("endpoint_id")
        return {"provider": self.provider, "endpoint": str(named) if named else self.endpoint}

    def cache_key(self, prepared: Prepared, epoch: int = 0) -> str:
        """Content address of a request: identity, payload, sampling and (if sampled) epoch."""
        sampled = self.settings.temperature > 0
        return ResponseCache.key(
            {
                "identity": self.identity(),
                "payload": prepared.payload,
                "sampling": self.settings.sampling(),
                "epoch": epoch if sampled else None,
            }
        )

    def lookup(self, prepared: Prepared, epoch: int = 0) -> tuple[str | None, ModelOutput | None]:
        """The cache key of ``prepared`` (``None`` without a cache) and its cached answer.

        ``epoch`` is the request's sampling epoch (:attr:`~pytest_gta.types.CaseContext.epoch`).
        """
        if self.cache is None:
            return None, None
        key = self.cache_key(prepared, epoch)
        hit = self.cache.get(key)
        if hit is None:
            return key, None
        usage = hit.usage or Usage()
        return key, replace(hit, usage=replace(usage, calls=0, cached_calls=1))

    def settle(self, key: str | None, output: ModelOutput) -> ModelOutput:
        """Book a fresh answer as one paid call: charge the budget, store it under ``key``."""
        usage = replace(output.usage or Usage(), calls=1, cached_calls=0)
        output = replace(output, usage=usage)
        if self.budget is not None:
            self.budget.add(usage)
        if self.cache is not None and key is not None:
            self.cache.put(key, output, {"model": self.name, "endpoint": self.endpoint})
        return output

    def generate(self, request: ModelRequest) -> ModelOutput:
        """Answer one request through cache, budget, concurrency limit and retries."""
        prepared = self.prepare(request)
        if isinstance(prepared, ModelOutput):
            return prepared
        key, hit = self.lookup(prepared, request.case.epoch)
        if hit is not None:
            return hit
        if self.budget is not None:
            self.budget.check()
        describe = f"{self.name} at {self.endpoint}"
        with endpoint_limit(self.endpoint, self.settings.max_concurrency):
            if self.budget is not None:
                # Again: while this thread queued for a slot, the calls ahead of it may have
                # spent the budget (Budget's docstring says what is guaranteed).
                self.budget.check()
            try:
                output = call_with_retries(
                    lambda: self.send(prepared), retries=self.settings.retries, describe=describe
                )
            except ReplyTooLarge as exc:
                return self.oversized(exc)
            # Charged before the slot is free, or the next thread in line checks a budget
            # this answer has already spent.
            return self.settle(key, output)

    def oversized(self, exc: ReplyTooLarge) -> ModelOutput:
        """The turn of a reply over ``--gta-max-reply-bytes``: the model's, scored, not cached.

        What the model sends is its answer, however long; one too large to read is a failed
        turn (the reply is this note, which parses as no action), not a broken harness.
        Not cached, so a rerun with a larger limit asks again; booked as a paid call with
        unknown tokens.
        """
        log.warning("%s at %s: %s", self.name, self.endpoint, exc)
        output = ModelOutput(f"[pytest-gta: {exc}]", Usage(calls=1))
        if self.budget is not None:
            self.budget.add(output.usage or Usage())
        return output
