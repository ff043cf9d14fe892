"""One HTTP request to a tool service, retried only where retrying cannot run a tool twice.

The ``agentlego`` and ``api`` backends share it, so a service out of reach is reported the same
way everywhere: as a :class:`~pytest_gta.errors.GtaInfrastructureError` (the case is an
*error*), never as a tool error the model would be scored on.
"""

from __future__ import annotations

import time
from typing import Any

import httpx2

from pytest_gta.endpoint import ReplyTooLarge, bound_client
from pytest_gta.errors import GtaInfrastructureError
from pytest_gta.models.generation import DEFAULT_MAX_REPLY_BYTES

#: Connection failures worth another attempt: nothing reached the tool, so retrying is safe.
RETRYABLE = (httpx2.ConnectError, httpx2.ConnectTimeout, httpx2.RemoteProtocolError)


def request_with_retries(
    method: str,
    url: str,
    *,
    service: str,
    what: str,
    timeout: Any,
    retries: int,
    backoff: float,
    show_errors: bool = True,
    max_reply_bytes: int = DEFAULT_MAX_REPLY_BYTES,
    **kwargs: Any,
) -> httpx2.Response:
    """One HTTP request, retried with backoff on connection errors only.

    HTTP answers are never retried: a tool that failed would fail again. ``show_errors=False``
    names only the exception type (for services whose errors could echo a credential).
    ``timeout`` bounds each attempt as a whole, and no more than ``max_reply_bytes`` of the
    answer is read (:func:`pytest_gta.endpoint.bound_client`).

    Raises:
        GtaInfrastructureError: the service could not be reached, timed out, or answered more
            than ``max_reply_bytes``.
    """

    def why(exc: Exception) -> str:
        return repr(exc) if show_errors else type(exc).__name__

    delay = backoff
    for attempt in range(retries + 1):
        try:
            # A client per request: nothing to close when the run ends, nothing shared between
            # threads, and one TCP connect is nothing next to a tool's own time.
            with bound_client(max_reply_bytes, timeout=timeout) as client:
                response: httpx2.Response = client.request(method, url, **kwargs)
                return response
        except ReplyTooLarge as exc:
            # Not the model's doing: the service's answer, so the case errors.
            raise GtaInfrastructureError(f"{service} answered {what}, but {exc}") from None
        except RETRYABLE as exc:
            if attempt == retries:
                raise GtaInfrastructureError(
                    f"{service} is unreachable: {why(exc)} (after {attempt + 1} attempts)"
                ) from exc
            time.sleep(delay)
            delay *= 2
        except httpx2.TimeoutException as exc:
            raise GtaInfrastructureError(
                f"{service} did not answer {what} in time: {why(exc)}"
            ) from exc
        except httpx2.TransportError as exc:
            raise GtaInfrastructureError(f"{service} failed on {what}: {why(exc)}") from exc
    raise AssertionError("unreachable")  # pragma: no cover - the loop returns or raises
