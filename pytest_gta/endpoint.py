"""What pytest-gta takes from an HTTP endpoint: a bounded reply, within one deadline, at a URL.

Every HTTP client that talks to a model or tool endpoint (the ``openai`` and ``anthropic``
SDKs of the chat adapters, the ``vlm`` backend's SDK client, the ``agentlego`` and ``api``
backends) is an ``httpx2.Client`` passed through :func:`bound_client`, which adds two limits
that httpx itself does not have:

* **Reply size.** A reply is read in chunks and counted; past ``max_reply_bytes``
  (``--gta-max-reply-bytes``, :data:`~pytest_gta.models.generation.DEFAULT_MAX_REPLY_BYTES` by
  default) reading stops with :class:`ReplyTooLarge`, so memory stays bounded whatever the
  endpoint sends (a 100 MB reply once took 5.3 GB and three minutes; 300 MB crashed the
  tokenizer). A ``Content-Length`` over the limit is refused before a byte is read. The
  client asks for uncompressed replies (``Accept-Encoding: identity``) and refuses a compressed
  one, since a few megabytes of gzip can inflate to gigabytes after counting.
* **One deadline.** httpx's timeouts bound each socket operation, so a server sending one byte
  a second never times out. Here the request's timeout (the largest of its connect, read,
  write and pool timeouts, i.e. ``--gta-timeout`` for a model) bounds the whole request:
  every socket operation gets at most the time left, from the connect to the last byte of the
  body, headers included. Each attempt of a retried request has its own deadline.

The deadline lives in a context variable, set by the client's request hook and read by the
network backend installed under its connection pools; a request runs on one thread, and only
pools of bounded clients read it. That backend is installed through two private attributes of
httpx2 and httpcore2 (``_pool``, ``_network_backend``): httpx offers no public way to reach
the socket operations, and :func:`bound_client` fails loudly if they ever move.
"""

from __future__ import annotations

import contextvars
import ssl
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from functools import partial
from typing import Any, TypeVar

import httpcore2
import httpx2

from pytest_gta.errors import GtaError
from pytest_gta.flags import OPT_MAX_REPLY_BYTES

T = TypeVar("T")


class ReplyTooLarge(GtaError):
    """An endpoint's reply is over the size limit, or compressed (it was not read further).

    For a model this is the model's outcome (its turn is scored, see
    :meth:`~pytest_gta.models.chat.ChatAdapter.generate`); for a tool endpoint the case errors.
    """

    def __init__(self, message: str, limit: int) -> None:
        super().__init__(message)
        self.limit = limit


def size_text(size: int) -> str:
    """``8 MiB``, ``1536 KiB``, ``1000 bytes``: a size as ``--gta-max-reply-bytes`` takes it."""
    for unit, name in ((2**30, "GiB"), (2**20, "MiB"), (2**10, "KiB")):
        if size % unit == 0:
            return f"{size // unit} {name}"
    return f"{size:,} bytes"


def too_large(limit: int, detail: str = "") -> ReplyTooLarge:
    """The :class:`ReplyTooLarge` of a reply over ``limit`` (no URL: messages reach the model)."""
    return ReplyTooLarge(
        f"the reply is larger than {size_text(limit)} ({OPT_MAX_REPLY_BYTES}){detail}; "
        "it was not read further",
        limit,
    )


def reply_limit_of(exc: BaseException | None) -> ReplyTooLarge | None:
    """The :class:`ReplyTooLarge` behind ``exc``, if any (SDKs wrap what their client raised)."""
    seen = 0
    while exc is not None and seen < 16:
        if isinstance(exc, ReplyTooLarge):
            return exc
        exc = exc.__cause__ or exc.__context__
        seen += 1
    return None


# -- the whole-request deadline --------------------------------------------------------------


@dataclass(frozen=True)
class Deadline:
    """When the request in flight on this thread must be done, and its timeout for messages."""

    at: float
    seconds: float

    def left(self, error: type[Exception], slack: float = 0.0) -> float:
        """Seconds left, else ``error`` (an httpcore timeout, which httpx maps to its own).

        ``slack``: count this many seconds left as none (a socket's timer is not ours).
        """
        left = self.at - time.monotonic()
        if left <= slack:
            raise error(f"the whole request took longer than its {self.seconds:g} s timeout")
        return left


_DEADLINE: contextvars.ContextVar[Deadline | None] = contextvars.ContextVar(
    "pytest_gta_deadline", default=None
)


def _clamp(timeout: float | None, error: type[Exception]) -> float | None:
    deadline = _DEADLINE.get()
    if deadline is None:
        return timeout
    left = deadline.left(error)
    return left if timeout is None else min(timeout, left)


def _bounded(
    operation: Callable[[float | None], T], timeout: float | None, error: type[Exception]
) -> T:
    """``operation(timeout)`` with the timeout clamped to the deadline, its expiry said so.

    A socket timing out because the deadline came says "timed out" like any other; the
    error says which timeout ran out, so a trickling server is told from a silent one.
    """
    try:
        return operation(_clamp(timeout, error))
    except httpcore2.TimeoutException:
        deadline = _DEADLINE.get()
        if deadline is not None:
            deadline.left(error, slack=0.01)
        raise


class _DeadlineStream(httpcore2.NetworkStream):
    """A connection whose every operation ends by the deadline of the request using it."""

    def __init__(self, inner: httpcore2.NetworkStream) -> None:
        self._inner = inner

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return _bounded(partial(self._inner.read, max_bytes), timeout, httpcore2.ReadTimeout)

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        _bounded(partial(self._inner.write, buffer), timeout, httpcore2.WriteTimeout)

    def close(self) -> None:
        self._inner.close()

    def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore2.NetworkStream:
        tls = partial(self._inner.start_tls, ssl_context, server_hostname)
        return _DeadlineStream(_bounded(tls, timeout, httpcore2.ConnectTimeout))

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


class _DeadlineBackend(httpcore2.NetworkBackend):
    """httpcore's network backend with every connection bounded by the request's deadline."""

    def __init__(self, inner: httpcore2.NetworkBackend) -> None:
        self._inner = inner

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore2.NetworkStream:
        def connect(seconds: float | None) -> httpcore2.NetworkStream:
            return self._inner.connect_tcp(host, port, seconds, local_address, socket_options)

        return _DeadlineStream(_bounded(connect, timeout, httpcore2.ConnectTimeout))

    def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore2.NetworkStream:
        connect = partial(self._inner.connect_unix_socket, path, socket_options=socket_options)
        return _DeadlineStream(_bounded(connect, timeout, httpcore2.ConnectTimeout))

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


def request_seconds(request: httpx2.Request) -> float | None:
    """The request's whole-request timeout: the largest of its timeouts (``None``: none set)."""
    timeouts = request.extensions.get("timeout") or {}
    values = [float(v) for v in timeouts.values() if isinstance(v, int | float)]
    return max(values) if values else None


def _start_deadline(request: httpx2.Request) -> None:
    seconds = request_seconds(request)
    _DEADLINE.set(None if seconds is None else Deadline(time.monotonic() + seconds, seconds))


# -- the reply size cap ------------------------------------------------------------------------

#: Codings httpx would decode (and so inflate) after our count.
_COMPRESSED = frozenset({"gzip", "x-gzip", "deflate", "br", "zstd", "compress"})


class _CappedStream(httpx2.SyncByteStream):
    """A response body that stops with :class:`ReplyTooLarge` once it passes ``limit`` bytes."""

    def __init__(self, inner: httpx2.SyncByteStream, limit: int) -> None:
        self._inner = inner
        self._limit = limit

    def __iter__(self) -> Iterator[bytes]:
        seen = 0
        for chunk in self._inner:
            seen += len(chunk)
            if seen > self._limit:
                raise too_large(self._limit)
            yield chunk

    def close(self) -> None:
        self._inner.close()


def _cap_reply(limit: int) -> Any:
    def check(response: httpx2.Response) -> None:
        codings = {
            c.strip().lower() for c in response.headers.get("content-encoding", "").split(",")
        }
        if codings & _COMPRESSED:
            shown = ", ".join(sorted(codings & _COMPRESSED))
            raise ReplyTooLarge(
                f"the reply is compressed ({shown}) although pytest-gta asked for none "
                "(Accept-Encoding: identity); it was not read, since its size after "
                "decompression cannot be bounded",
                limit,
            )
        length = response.headers.get("content-length", "").strip()
        if length.isdigit() and (len(length) > 19 or int(length) > limit):
            raise too_large(limit, f": it announced {length[:40]} bytes")
        stream = response.stream
        if not isinstance(stream, httpx2.SyncByteStream):  # pragma: no cover - sync clients only
            raise TypeError("bound_client works on synchronous clients only")
        response.stream = _CappedStream(stream, limit)

    return check


class ClosingClient(httpx2.Client):
    """An ``httpx2.Client`` that closes its connections when collected, as the SDKs' own do.

    An adapter's client lives as long as the adapter and nobody closes it; without this its
    pooled sockets would be left for the garbage collector to find open.
    """

    def __del__(self) -> None:
        if not self.is_closed:
            try:
                self.close()
            except Exception:  # nothing to do about it at collection time
                pass


def bound_client(
    max_reply_bytes: int, client: httpx2.Client | None = None, **kwargs: Any
) -> httpx2.Client:
    """A client whose replies are capped at ``max_reply_bytes``, with one deadline per request.

    ``client`` (default: a :class:`ClosingClient` of ``kwargs``, e.g. the SDK's
    ``timeout``, ``limits`` and ``follow_redirects``) keeps its settings and the proxies of
    the environment.

    Raises:
        RuntimeError: httpx2 no longer has the attributes the deadline is installed through.
    """
    client = ClosingClient(**kwargs) if client is None else client
    client.headers["Accept-Encoding"] = "identity"
    hooks = client.event_hooks
    client.event_hooks = {
        "request": [_start_deadline, *hooks["request"]],
        "response": [_cap_reply(max_reply_bytes), *hooks["response"]],
    }
    transports = [client._transport, *client._mounts.values()]
    for transport in transports:
        pool = getattr(transport, "_pool", None)
        backend = getattr(pool, "_network_backend", None)
        if transport is not None and backend is None:
            raise RuntimeError(
                f"cannot bound the requests of {type(transport).__name__}: httpx2's internals "
                "changed (pytest_gta.endpoint installs a network backend in its pools)"
            )
        if backend is not None and not isinstance(backend, _DeadlineBackend):
            pool._network_backend = _DeadlineBackend(backend)  # type: ignore[union-attr]
    return client
