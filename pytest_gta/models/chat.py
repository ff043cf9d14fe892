"""What every real chat adapter shares: response cache, budget, concurrency limit and retries.

A provider adapter only turns a :class:`~pytest_gta.types.ModelRequest` into a JSON-able
payload (:meth:`ChatAdapter.prepare`) and sends one payload (:meth:`ChatAdapter.send`). The
base class wraps that in the same order for every provider:

1. the payload is looked up in the content-addressed response cache (a hit costs nothing);
2. the session's token/cost budget is checked (exhausted: the case is skipped, the session stops);
3. a per-endpoint semaphore shared by the process bounds requests in flight;
4. 429, 408, 5xx, timeouts and connection errors are retried with exponential backoff and
   jitter, honouring ``Retry-After``; anything else, or running out of retries, raises
   :class:`~pytest_gta.errors.GtaInfrastructureError`, so the case is an *error*, never a wrong
   answer.

The provider SDKs' own retries are switched off so that this policy is the only one.
"""

from __future__ import annotations

import email.utils
import logging
import random
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any, ClassVar, TypeVar

from pytest_gta.errors import GtaInfrastructureError
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


class RetryableError(Exception):
    """A transient failure: try again after ``retry_after`` seconds (or the backoff)."""

    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


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
        return RetryableError(f"{endpoint} {kind}: {exc}")
    return GtaInfrastructureError(f"{endpoint}: {type(exc).__name__}: {exc}")


def _error_detail(exc: BaseException) -> str:
    body = getattr(exc, "body", None)
    if isinstance(body, Mapping):
        error = body.get("error", body)
        if isinstance(error, Mapping) and error.get("message"):
            return str(error["message"])[:300]
    return str(exc)[:300]


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


@dataclass(frozen=True)
class Prepared:
    """A request ready to send: the JSON-able payload is also the response-cache key."""

    payload: dict[str, Any]
    #: Anything the adapter needs besides the payload (never part of the cache key).
    extra: Any = None


class ChatAdapter:
    """Base class of the HTTP and in-process chat adapters.

    Subclasses set :attr:`provider`, :attr:`name`, :attr:`protocol` and :attr:`endpoint`, and
    implement :meth:`prepare` and :meth:`send`. ``generate`` is safe to call from many threads.
    """

    provider: ClassVar[str] = "chat"
    name: str
    protocol: str
    #: Identifies the endpoint for the concurrency limit and the cache (no secrets).
    endpoint: str

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
    def identity(self) -> dict[str, Any]:
        """What, besides the payload, makes two responses interchangeable."""
        return {"provider": self.provider, "endpoint": self.endpoint}

    def cache_key(self, prepared: Prepared) -> str:
        """Content address of a request: identity, payload, sampling and (if sampled) epoch."""
        sampled = self.settings.temperature > 0
        return ResponseCache.key(
            {
                "identity": self.identity(),
                "payload": prepared.payload,
                "sampling": self.settings.sampling(),
                "epoch": self.settings.epoch if sampled else None,
            }
        )

    def lookup(self, prepared: Prepared) -> tuple[str | None, ModelOutput | None]:
        """The cache key of ``prepared`` (``None`` without a cache) and its cached answer."""
        if self.cache is None:
            return None, None
        key = self.cache_key(prepared)
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
        key, hit = self.lookup(prepared)
        if hit is not None:
            return hit
        if self.budget is not None:
            self.budget.check()
        describe = f"{self.name} at {self.endpoint}"
        with endpoint_limit(self.endpoint, self.settings.max_concurrency):
            output = call_with_retries(
                lambda: self.send(prepared), retries=self.settings.retries, describe=describe
            )
        return self.settle(key, output)
