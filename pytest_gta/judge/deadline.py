"""One deadline per checkpoint call: a judge that hangs or trickles ends the task in time.

The official client is the ``openai`` SDK with its defaults: a 600 s read timeout per request
and two retries, each after a wait the server may stretch to minutes (``Retry-After``). A
judge that accepts and never answers held a task for half an hour that way, and one run past
90 s under ``--gta-timeout=5``. Here a checkpoint's call (its uploads, the judge's reply, the
client's retries and their waits) has one deadline, ``--gta-judge-timeout`` (default
``--gta-timeout``), kept by the HTTP client the SDK is given, so the SDK's own retry loop still
decides what is retried, and how often: the requests a judge that answers sees are the
official ones (``tests/test_workflow_judge.py`` checks them, retries included).

* every request gets the time left, as a whole (:func:`pytest_gta.endpoint.bound_client`: from
  the connect to the reply's last byte, so a trickling judge times out too);
* a request that would start after the deadline is refused with the SDK's own
  ``APITimeoutError``, which the SDK raises as it is, without another retry;
* an error reply asking to retry later than the deadline is not retried
  (``x-should-retry: false``, the header the SDK obeys), rather than slept on.

Whatever the call then raises, a call past its deadline ends as :class:`JudgeTimeout`, which
names the limit and the option.
"""

from __future__ import annotations

import contextlib
import contextvars
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx2

from pytest_gta.endpoint import bound_client
from pytest_gta.errors import GtaInfrastructureError
from pytest_gta.flags import OPT_JUDGE_TIMEOUT, OPT_TIMEOUT
from pytest_gta.models.chat import parse_retry_after

#: Characters of the last attempt's error quoted in a :class:`JudgeTimeout`.
ENDED_CLIP = 200


class JudgeTimeout(GtaInfrastructureError):
    """A checkpoint's judge call did not end within ``--gta-judge-timeout``: the task errors."""


@dataclass
class LeafDeadline:
    """The deadline of the checkpoint call in flight (a monotonic time) and what cut it."""

    end: float
    seconds: float
    #: Why a request was cut short (a retry the judge asked for past the deadline), if one was.
    cut: str | None = None

    def left(self) -> float:
        """Seconds left (negative once past)."""
        return self.end - time.monotonic()


_DEADLINE: contextvars.ContextVar[LeafDeadline | None] = contextvars.ContextVar(
    "gta_judge_deadline", default=None
)


@contextlib.contextmanager
def leaf_deadline(seconds: float) -> Iterator[LeafDeadline]:
    """Bound the requests made in the block (on this thread) to ``seconds`` in all."""
    deadline = LeafDeadline(time.monotonic() + seconds, seconds)
    token = _DEADLINE.set(deadline)
    try:
        yield deadline
    finally:
        _DEADLINE.reset(token)


def timed_out(deadline: LeafDeadline, exc: BaseException) -> JudgeTimeout | None:
    """The :class:`JudgeTimeout` a call that raised ``exc`` ended in (``None``: it did not)."""
    if deadline.cut is None and deadline.left() > 0:
        return None
    why = f" ({deadline.cut})" if deadline.cut else ""
    ended = f"{type(exc).__name__}: {exc}"
    if len(ended) > ENDED_CLIP:
        ended = ended[:ENDED_CLIP] + "..."
    return JudgeTimeout(
        f"the judge did not answer within {deadline.seconds:g} s{why}: one checkpoint's call, "
        f"its uploads and retries included, is bounded by {OPT_JUDGE_TIMEOUT} (default "
        f"{OPT_TIMEOUT}'s value); the last attempt ended with {ended}"
    )


def _clamp(timeout_error: type[Exception]) -> Any:
    def hook(request: httpx2.Request) -> None:
        deadline = _DEADLINE.get()
        if deadline is None:
            return
        left = deadline.left()
        if left <= 0:
            # An SDK error: raised as it is, not retried (the SDK retries httpx's errors).
            raise timeout_error(request=request)  # type: ignore[call-arg]
        timeouts = request.extensions.get("timeout") or {}
        unset: dict[str, Any] = {"connect": None, "read": None, "write": None, "pool": None}
        request.extensions["timeout"] = {
            name: left if value is None else min(float(value), left)
            for name, value in (unset | dict(timeouts)).items()
        }

    return hook


def _no_wait_past_deadline(response: httpx2.Response) -> None:
    deadline = _DEADLINE.get()
    if deadline is None or response.status_code < 400:
        return
    wait = parse_retry_after(response.headers)
    if wait is not None and wait >= deadline.left():
        deadline.cut = f"it asked to retry after {wait:g} s, past that"
        response.headers["x-should-retry"] = "false"


def judge_http_client(timeout_error: type[Exception], max_reply_bytes: int, **kwargs: Any) -> Any:
    """The HTTP client for the judge's SDK client: bounded replies, the checkpoint's deadline.

    ``timeout_error``: the SDK's ``APITimeoutError`` (the SDK is imported by its caller only).
    ``kwargs``: the SDK's own client settings (limits, redirects).
    """
    client = bound_client(max_reply_bytes, **kwargs)
    hooks = client.event_hooks
    # First: the whole-request deadline bound_client's hook starts reads the clamped timeout.
    client.event_hooks = {
        "request": [_clamp(timeout_error), *hooks["request"]],
        "response": [*hooks["response"], _no_wait_past_deadline],
    }
    return client
