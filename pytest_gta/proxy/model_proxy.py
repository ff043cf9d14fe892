"""The recording model proxy: one local HTTP server, one secret URL per case.

:class:`ModelProxy` listens on 127.0.0.1 (a random port) in a background thread and forwards
what agents send to the run's model endpoint (:class:`~pytest_gta.proxy.upstream.Upstream`),
through :class:`~pytest_gta.proxy.forward.Forwarder`. Each case gets a :class:`ProxyCase`
whose URLs carry an unguessable secret (``secrets.token_urlsafe``, 192 bits): requests are told
apart by it, so concurrent cases never mix their transcripts, and a request with an unknown or
closed secret (another run's, a closed case's, a guessed one) gets 404 and touches nothing.

Routes under ``/<secret>``: ``POST /v1/chat/completions`` and ``POST /v1/responses`` (an OpenAI
upstream), ``POST /v1/messages`` (an Anthropic one), all three for a model in this process (a
:class:`~pytest_gta.proxy.upstream.LocalModel`, answered by :mod:`pytest_gta.proxy.local`), and
``GET /v1/models``, answered here with the run's model alone (clients and frameworks that list
models first then find it).

The model: whatever model name the agent sends, the request goes out with the run's model id
(:attr:`Upstream.model`), so an agent written for ``gpt-4o`` evaluates the model under test, and
the transcript notes the name the agent asked for. The key: the agent's own ``Authorization``
or ``x-api-key`` is dropped (any key works, the SDKs insist on one); the real key is added on
the way out, so it never reaches the agent, a transcript or a log.

An agent's request body is limited to :data:`MAX_REQUEST_BYTES` (base64 images are large, but
not that large) and must come with a ``Content-Length``; the upstream's answer is limited by
``--gta-max-reply-bytes`` as the adapters' are (:func:`~pytest_gta.endpoint.bound_client`).
"""

from __future__ import annotations

import json
import logging
import secrets
import socket
import threading
import time
from collections.abc import Callable, Mapping
from http.server import BaseHTTPRequestHandler
from typing import Any

import httpx2

from pytest_gta import outward, peers
from pytest_gta.endpoint import bound_client
from pytest_gta.errors import GtaBudgetExhausted
from pytest_gta.loopback import QuickHTTPServer
from pytest_gta.models.cache import ResponseCache
from pytest_gta.models.usage import Budget, Prices
from pytest_gta.proxy.exchange import Exchange
from pytest_gta.proxy.forward import (
    AgentGone,
    Answerer,
    Forwarder,
    Incoming,
    Outcome,
    send_error,
)
from pytest_gta.proxy.local import LocalAnswerer
from pytest_gta.proxy.upstream import ROUTES, LocalModel, Upstream
from pytest_gta.types import Usage

log = logging.getLogger("pytest_gta.proxy")

#: The largest request body an agent may send (a few full-size images in base64 fit).
MAX_REQUEST_BYTES = 32 * 2**20
#: How long :meth:`ModelProxy.close` waits for requests in flight before giving up on them.
CLOSE_WAIT = 10.0
#: Every API the proxy knows, by route (whichever the upstream speaks).
ALL_ROUTES = {route: api for routes in ROUTES.values() for route, api in routes.items()}


class ProxyCase:
    """One case's view of the proxy: its URLs, its transcript, its usage.

    Thread-safe: the agent may send requests from many threads at once.
    """

    def __init__(
        self,
        proxy: ModelProxy,
        label: str,
        secret: str,
        epoch: int,
        query: str = "",
        bridged: bool = False,
    ) -> None:
        self.label = label
        self.epoch = epoch
        #: The case's query id (what a model in this process is asked about).
        self.query = query
        #: Whether only a sandbox's bridge may use the URLs (:mod:`pytest_gta.peers`).
        self.bridged = bridged
        self._proxy = proxy
        self._secret = secret
        self._lock = threading.Lock()
        self._turns = 0
        self._exchanges: list[Exchange] = []
        self._closed = False
        self._in_flight = 0
        self._idle = threading.Condition(self._lock)
        #: Set when a request found the session's budget spent: raise it to stop the case
        #: as a budgeted run stops (:class:`~pytest_gta.errors.GtaBudgetExhausted`).
        self.exhausted: GtaBudgetExhausted | None = None

    @property
    def root(self) -> str:
        """``http://127.0.0.1:PORT/<secret>``."""
        return f"{self._proxy.url}/{self._secret}"

    @property
    def openai_base_url(self) -> str:
        """The ``base_url`` of an OpenAI client (ends in ``/v1``)."""
        return f"{self.root}/v1"

    @property
    def anthropic_base_url(self) -> str:
        """The ``base_url`` of an Anthropic client (which adds ``/v1`` itself)."""
        return self.root

    @property
    def closed(self) -> bool:
        """Whether the case's URLs are refused now."""
        return self._closed

    def next_turn(self) -> int:
        """The number of the case's next model request that reaches the model (0, 1, ...)."""
        with self._lock:
            turn, self._turns = self._turns, self._turns + 1
            return turn

    def begin(self) -> None:
        """A request of the case is being answered (the handler calls this)."""
        with self._lock:
            self._in_flight += 1

    def end(self) -> None:
        """A request of the case is answered and recorded."""
        with self._lock:
            self._in_flight -= 1
            self._idle.notify_all()

    def wait(self, timeout: float = CLOSE_WAIT) -> bool:
        """Wait until no request of the case is in flight; ``False`` if some still are.

        An SDK returns a stream to its caller at the stream's last event, a moment before the
        proxy has seen the stream end and recorded it: read the transcript after this (or
        after :meth:`close`, which calls it).
        """
        with self._lock:
            return self._idle.wait_for(lambda: self._in_flight == 0, timeout)

    def record(self, exchange: Exchange, exhausted: GtaBudgetExhausted | None = None) -> None:
        """Append an exchange (the proxy's handler calls this)."""
        with self._lock:
            self._exchanges.append(exchange)
            if exhausted is not None and self.exhausted is None:
                self.exhausted = exhausted

    def exchanges(self) -> list[Exchange]:
        """The transcript so far, in the order the answers ended (a copy)."""
        with self._lock:
            return list(self._exchanges)

    def usage(self) -> Usage:
        """Tokens, paid ``calls`` and ``cached_calls`` of the case's exchanges."""
        total = Usage()
        for exchange in self.exchanges():
            if exchange.usage is not None:
                total += exchange.usage
        return total

    @property
    def retries(self) -> int:
        """Upstream attempts retried over all the case's exchanges."""
        return sum(e.retries for e in self.exchanges())

    def cost(self) -> float | None:
        """USD the case's paid exchanges cost (``None``: the proxy knows no prices)."""
        prices = self._proxy.prices
        if prices is None:
            return None
        return sum(e.cost(prices) or 0.0 for e in self.exchanges())

    def to_json(self) -> list[dict[str, Any]]:
        """The transcript as JSON-able dicts."""
        return [e.to_json() for e in self.exchanges()]

    def close(self, wait: float = CLOSE_WAIT) -> None:
        """Refuse the case's URLs from now on (404); idempotent.

        Then waits up to ``wait`` seconds for the case's requests in flight to be recorded.
        """
        self._closed = True
        self._proxy._forget(self._secret)
        if not self.wait(wait):
            log.warning("model proxy: case %s still has requests in flight", self.label)


class ModelProxy:
    """A recording proxy in front of ``upstream``; ``with ModelProxy(...) as proxy:`` starts it.

    ``upstream`` is an HTTP endpoint, or a model in this process that the proxy answers for
    (then ``cache`` is the adapter's own, and unused here).
    """

    def __init__(
        self,
        upstream: Upstream | LocalModel,
        *,
        cache: ResponseCache | None = None,
        budget: Budget | None = None,
        prices: Prices | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        max_request_bytes: int = MAX_REQUEST_BYTES,
    ) -> None:
        self.upstream = upstream
        self.prices = prices
        self.max_request_bytes = max_request_bytes
        self._host, self._port = host, port
        self._cases: dict[str, ProxyCase] = {}
        self._lock = threading.Lock()
        # Cases open from the pool's threads at once: one of them starts the server.
        self._start_lock = threading.Lock()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self._client: httpx2.Client | None = None
        self.forwarder: Answerer
        if isinstance(upstream, LocalModel):
            self.forwarder = LocalAnswerer(upstream, budget=budget)
            return
        # Redacted by value wherever it turns up, even if the adapter did not register it.
        outward.register_secret(upstream.api_key, "the proxy's upstream key")
        for value in upstream.headers.values():
            outward.register_secret(value, "a header of the proxy's upstream")
        self._client = bound_client(
            upstream.max_reply_bytes, timeout=upstream.timeout, follow_redirects=False
        )
        self.forwarder = Forwarder(upstream, self._client, cache=cache, budget=budget)

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT`` (only once started)."""
        if self._server is None:
            raise RuntimeError("the model proxy is not started")
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> None:
        """Listen and serve in a background thread; idempotent and safe from several threads."""
        with self._start_lock:
            if self._server is not None:
                return
            server = _Server((self._host, self._port), _Handler, self)
            self._thread = threading.Thread(
                target=server.serve_forever,
                # How often the loop looks for a shutdown: close() waits up to this long.
                args=(0.05,),
                name="pytest-gta-model-proxy",
                daemon=True,
            )
            self._thread.start()
            self._server = server

    def open(
        self, label: str, *, epoch: int = 0, query: str = "", bridged: bool = False
    ) -> ProxyCase:
        """A new case with its own secret URLs.

        ``epoch`` is the case's sampling epoch, part of the cache key as for the adapters;
        ``query`` its query id, which a model in this process is asked about; ``bridged``: only
        a sandbox's bridge may use the URLs (:mod:`pytest_gta.peers`).
        """
        self.start()
        secret = secrets.token_urlsafe(24)
        case = ProxyCase(self, label, secret, epoch, query, bridged)
        with self._lock:
            self._cases[secret] = case
        return case

    def case_of(self, secret: str) -> ProxyCase | None:
        """The open case of ``secret``."""
        with self._lock:
            return self._cases.get(secret)

    def _forget(self, secret: str) -> None:
        with self._lock:
            self._cases.pop(secret, None)

    def close(self) -> None:
        """Stop serving, end open connections, wait for requests in flight; idempotent."""
        with self._lock:
            cases, self._cases = list(self._cases.values()), {}
        for case in cases:
            case._closed = True
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()
            server.drop_connections()
            server.join(CLOSE_WAIT)
        if self._thread is not None:
            self._thread.join(CLOSE_WAIT)
            self._thread = None
        if self._client is not None:
            self._client.close()

    def __enter__(self) -> ModelProxy:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _Server(QuickHTTPServer):
    """A threading HTTP server that tracks its handler threads and connections to end them."""

    daemon_threads = True

    def __init__(self, address: tuple[str, int], handler: type, proxy: ModelProxy) -> None:
        super().__init__(address, handler)
        self.proxy = proxy
        self._handlers: list[threading.Thread] = []
        self._connections: set[socket.socket] = set()
        self._tracking = threading.Lock()

    def process_request(self, request: Any, client_address: Any) -> None:
        thread = threading.Thread(
            target=self.process_request_thread,
            args=(request, client_address),
            name="pytest-gta-model-proxy-request",
            daemon=True,
        )
        with self._tracking:
            self._handlers = [t for t in self._handlers if t.is_alive()]
            self._handlers.append(thread)
            self._connections.add(request)
        thread.start()

    def handle_error(self, request: Any, client_address: Any) -> None:
        """One line in the log, never a traceback on stderr (whatever a client sent)."""
        log.debug("model proxy: a connection ended with an error", exc_info=True)

    def shutdown_request(self, request: Any) -> None:
        with self._tracking:
            self._connections.discard(request)
        super().shutdown_request(request)

    def drop_connections(self) -> None:
        """End every open connection (idle keep-alive ones included)."""
        with self._tracking:
            connections = list(self._connections)
        for connection in connections:
            try:
                connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def join(self, wait: float) -> None:
        """Wait up to ``wait`` seconds in all for the handler threads to end."""
        deadline = time.monotonic() + wait
        with self._tracking:
            threads = list(self._handlers)
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        left = [t for t in threads if t.is_alive()]
        if left:
            log.warning("model proxy: %d request(s) still waiting on the upstream", len(left))


class _Handler(BaseHTTPRequestHandler):
    """Routes a request to its case and answers through the proxy's forwarder."""

    protocol_version = "HTTP/1.1"
    server: _Server
    #: Socket timeout for reading the agent's request (a stalled sender ends, not hangs).
    timeout = 120

    def log_message(self, format: str, *args: Any) -> None:
        """Nothing: the request line holds the case's secret."""

    def do_GET(self) -> None:
        """``/v1/models``: the run's model, answered here."""
        case, route = self._route()
        if case is None:
            return
        if route.rstrip("/") != "/v1/models":
            self._refuse(404, "not_found", "no such route")
            return
        model = self.server.proxy.upstream.model
        body = {
            "object": "list",
            "data": [
                {
                    "id": model,
                    "object": "model",
                    "type": "model",
                    "created": 0,
                    "created_at": "1970-01-01T00:00:00Z",
                    "owned_by": "pytest-gta",
                    "display_name": model,
                }
            ],
            "has_more": False,
            "first_id": model,
            "last_id": model,
        }
        _Reply(self).send(200, json.dumps(body).encode(), "application/json", {})

    def do_POST(self) -> None:
        """A model request: read, forward, record."""
        case, route = self._route()
        if case is None:
            return
        case.begin()
        try:
            self._post(case, route)
        except Exception as exc:  # a bug of the proxy's: the agent gets a 500, the case a record
            log.warning("model proxy: a request of case %s failed: %r", case.label, exc)
            self._refuse(500, "proxy_error", f"pytest-gta proxy: {exc!r}", case=case)
        finally:
            case.end()

    def _post(self, case: ProxyCase, route: str) -> None:
        proxy = self.server.proxy
        api = ALL_ROUTES.get(route.rstrip("/"))
        if api is None:
            self._refuse(404, "not_found", "no such route")
            return
        if api not in ROUTES[proxy.upstream.kind].values():
            other = "anthropic_base_url" if api == "messages" else "openai_base_url"
            self._refuse(
                400,
                "invalid_request_error",
                f"the run's model ({proxy.upstream.model}) speaks the "
                f"{proxy.upstream.kind} API, not {api}; this URL is not its {other}",
                case=case,
                api=api,
            )
            return
        raw = self._body(case, api)
        if raw is None:
            return
        headers = dict(self.headers.items())
        incoming = Incoming(api, raw, headers, case.epoch, case.query, case.next_turn)
        outcome = Outcome(api, time.monotonic())
        reply = _Reply(self, lambda: case.record(outcome.exchange(), outcome.budget))
        try:
            proxy.forwarder.answer(incoming, reply, outcome)
        except AgentGone:
            self.close_connection = True
        finally:
            reply.finish()

    def _route(self) -> tuple[ProxyCase | None, str]:
        """The case of the path's secret and the rest of the path; refuses unknown secrets."""
        path = self.path.split("?", 1)[0]
        _, secret, rest = [*path.split("/", 2), "", ""][:3]
        case = self.server.proxy.case_of(secret) if secret else None
        if (
            case is not None
            and case.bridged
            and not peers.trusted(self.client_address, self.server.server_address)
        ):
            case = None
        if case is None:
            self._drain()
            self._refuse(404, "not_found", "no such case (unknown or closed URL)")
            return None, ""
        return case, "/" + rest

    def _drain(self) -> None:
        """Read a small refused body so the connection stays usable; drop a large one."""
        length = self.headers.get("Content-Length", "")
        if length.isdigit() and int(length) <= 65536:
            self.rfile.read(int(length))
        elif length or self.headers.get("Transfer-Encoding"):
            self.close_connection = True

    def _refuse(
        self,
        status: int,
        kind: str,
        message: str,
        *,
        case: ProxyCase | None = None,
        api: str = "",
        note: str | None = None,
    ) -> None:
        outcome = Outcome(api, time.monotonic(), request=note, status=status)
        outcome.error = outcome.reply = message
        reply = _Reply(self, None if case is None else lambda: case.record(outcome.exchange()))
        try:
            send_error(reply, status, kind, message)
        except AgentGone:
            self.close_connection = True
        reply.finish()

    def _body(self, case: ProxyCase, api: str) -> bytes | None:
        """The request body, or ``None`` after refusing it (recorded on the case)."""
        limit = self.server.proxy.max_request_bytes
        length = self.headers.get("Content-Length", "").strip()
        problem = None
        if self.headers.get("Transfer-Encoding") or not length:
            status, problem = 411, "send the body with a Content-Length"
        elif not length.isdigit() or len(length) > 19:
            status, problem = 400, "the Content-Length is not a number"
        elif int(length) > limit:
            status, problem = 413, f"the body is larger than {limit:,} bytes"
        if problem is None:
            try:
                return self.rfile.read(int(length))
            except OSError as exc:  # a timeout or reset mid-body
                status, problem = 400, f"the body could not be read: {exc}"
        self.close_connection = True
        self._refuse(
            status,
            "invalid_request_error",
            f"pytest-gta proxy: {problem}",
            case=case,
            api=api,
            note=f"[not forwarded: {problem}]",
        )
        return None


class _Reply:
    """Answers on a handler's connection (whole, or chunked for streams).

    ``record`` runs once, just before the last bytes of the answer go out (or when the
    answer ends otherwise), so the transcript holds an exchange before its agent sees it end.
    """

    def __init__(
        self, handler: BaseHTTPRequestHandler, record: Callable[[], None] | None = None
    ) -> None:
        self.handler = handler
        self._record = record

    def finish(self) -> None:
        """Record the exchange, if not done yet."""
        record, self._record = self._record, None
        if record is not None:
            record()

    def _write(self, data: bytes) -> None:
        try:
            self.handler.wfile.write(data)
            self.handler.wfile.flush()
        except OSError as exc:  # broken pipe, reset, a closed socket
            self.handler.close_connection = True
            raise AgentGone(str(exc)) from None

    def _head(self, status: int, headers: Mapping[str, str]) -> None:
        try:
            self.handler.send_response(status)
            for name, value in headers.items():
                self.handler.send_header(name, value)
            self.handler.end_headers()
        except OSError as exc:
            self.handler.close_connection = True
            raise AgentGone(str(exc)) from None

    def send(self, status: int, body: bytes, content_type: str, headers: Mapping[str, str]) -> None:
        """A whole answer with a Content-Length."""
        self._head(
            status,
            {"Content-Type": content_type, "Content-Length": str(len(body)), **headers},
        )
        self.finish()
        self._write(body)

    def start(self, status: int, content_type: str) -> None:
        """Headers of a chunked (streamed) answer."""
        self._head(
            status,
            {
                "Content-Type": content_type,
                "Transfer-Encoding": "chunked",
                "Cache-Control": "no-cache",
            },
        )

    def chunk(self, data: bytes) -> None:
        """One chunk, sent at once."""
        if data:
            self._write(b"%x\r\n%s\r\n" % (len(data), data))

    def end(self, complete: bool) -> None:
        """The last chunk, or for a broken stream the connection closed instead.

        A stream cut off without its last chunk is what the agent's client reports as an
        incomplete answer.
        """
        self.finish()
        if complete:
            self._write(b"0\r\n\r\n")
        else:
            self.handler.close_connection = True
            try:
                self.handler.connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
