"""GTA's tools over MCP: one streamable-HTTP server per process, one secret path per case.

An agent under test gets its case's URL, ``http://127.0.0.1:PORT/<secret>/mcp``, and nothing
else: the secret is the only token (unguessable, per case), so an agent cannot reach another
case's tools, and a case's path answers 404 once it is closed. Every case has its own MCP
server object (its own tools and log) behind its own session manager; one uvicorn server on a
background thread routes requests to them by path, so concurrent cases never share a handler.

Tool calls block (backends run processes, HTTP requests, models): they run on the gateway's
own thread pool, never on the event loop, and the pool is shut down with the gateway so no
thread outlives it. :func:`serve_stdio` serves one case on stdin/stdout for agents that spawn
their tools as a subprocess.

The MCP SDK, Starlette and uvicorn are imported here only, and only inside the functions that
serve (about 0.7 s of imports): the session layer imports this module in every GTA run, and a
run without an agent neither pays for them nor needs the ``agents`` extra installed.
"""

from __future__ import annotations

import asyncio
import base64
import concurrent.futures
import functools
import json
import mimetypes
import os
import secrets
import socket
import threading
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pytest_gta import loopback, outward, peers
from pytest_gta.errors import GtaInfrastructureError
from pytest_gta.mcp.calls import CallLimitReached, CaseTools, LoggedCall
from pytest_gta.protocol import react as p
from pytest_gta.types import ToolResult
from pytest_gta.version import __version__
from pytest_gta.vocabulary import INVALID_ACTION

if TYPE_CHECKING:
    import mcp_types as types
    import uvicorn
    from mcp.server.lowlevel import Server
    from mcp.server.streamable_http_manager import StreamableHTTPSessionManager

#: Threads that run tool calls for all cases of a gateway (a run's ``--gta-concurrency`` is
#: far below this; calls past it wait for a free thread).
CALL_THREADS = 32
#: Seconds :meth:`McpGateway.start` waits for the server to listen.
START_TIMEOUT = 30.0
#: Seconds :meth:`CaseEndpoint.close` and :meth:`McpGateway.close` wait for the loop.
STOP_TIMEOUT = 30.0
SERVER_NAME = "gta-tools"

_Scope = MutableMapping[str, Any]
_Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
_Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]

_MAGIC = (
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF87a", "image/gif"),
    (b"GIF89a", "image/gif"),
    (b"BM", "image/bmp"),
)


def _mime_type(path: str, data: bytes) -> str:
    """An image's MIME type: from its bytes when they say, else from its name."""
    for magic, mime in _MAGIC:
        if data.startswith(magic):
            return mime
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    guessed, _ = mimetypes.guess_type(path)
    return guessed if guessed and guessed.startswith("image/") else "application/octet-stream"


def _image(path: str) -> types.ImageContent | None:
    """A generated image as MCP image content, or ``None`` when it cannot be read."""
    # the MCP SDK: heavy, loaded only where tools are served (see the module's docstring)
    import mcp_types as types

    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except (OSError, ValueError):
        return None
    encoded = base64.b64encode(data).decode("ascii")
    return types.ImageContent(type="image", data=encoded, mime_type=_mime_type(path, data))


def result_of(logged: LoggedCall) -> types.CallToolResult:
    """A logged call as the MCP result the agent gets.

    Text: the outputs as the ReAct observation shows them (image outputs as ``[image](PATH)``
    with an absolute path the agent can pass to the next tool); each image output also as image
    content. A failed call is an error result whose text is the official error message.
    """
    import mcp_types as types  # see _image

    record = logged.record
    if record.type == INVALID_ACTION:
        # Lagent shows the raw input as the message of an unknown action (the log keeps that
        # official record); an MCP agent is told what is wrong instead.
        return _error(f"{p.INVALID_ACTION_MESSAGE} Unknown tool: {outward.clean_text(logged.name)}")
    if not logged.ok:
        return _error(outward.clean_text(record.errmsg or ""))
    items = record.result or ()
    content: list[Any] = [
        types.TextContent(type="text", text=outward.clean_text(ToolResult(items).format()))
    ]
    for item in items:
        if item.type == "image" and isinstance(item.content, str) and os.path.isabs(item.content):
            image = _image(item.content)
            if image is not None:
                content.append(image)
    return types.CallToolResult(content=content, is_error=False)


def _error(text: str) -> types.CallToolResult:
    import mcp_types as types  # see _image

    return types.CallToolResult(content=[types.TextContent(type="text", text=text)], is_error=True)


def run_call(tools: CaseTools, name: str, arguments: Any) -> types.CallToolResult:
    """One MCP ``tools/call`` on ``tools``: the result, never an exception.

    A backend that is down ends the *case* as an error (:attr:`CaseTools.failure`, which the
    case raises); the agent gets an error result saying so.
    """
    try:
        logged = tools.call(name, {} if arguments is None else arguments)
    except CallLimitReached as exc:
        return _error(str(exc))
    except GtaInfrastructureError as exc:
        return _error(outward.clean_text(f"the tool backend failed ({exc}); this task ends"))
    except Exception as exc:  # a backend's bug: kept as the case's failure, shown as an error
        return _error(outward.clean_text(f"the tool failed unexpectedly: {exc!r}"))
    return result_of(logged)


def case_server(
    tools: CaseTools,
    run: Callable[[Callable[[], types.CallToolResult]], Awaitable[types.CallToolResult]],
) -> Server[Any]:
    """The MCP server object of one case: its tools' list, and calls into its log.

    ``run`` runs a blocking call off the event loop (a thread pool).
    """
    import mcp_types as types  # see _image
    from mcp.server.lowlevel import Server

    schemas = tools.schemas()
    listed = [
        types.Tool(name=s["name"], description=s["description"], input_schema=s["inputSchema"])
        for s in schemas
    ]
    inputs = {s["name"]: s["inputSchema"] for s in schemas}

    async def list_tools(
        ctx: Any, params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=listed)

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        return await run(functools.partial(run_call, tools, params.name, params.arguments))

    return Server(
        SERVER_NAME,
        version=__version__,
        instructions=(
            "GTA benchmark tools. File inputs take absolute paths; image outputs are given "
            "as absolute paths that can be passed to the next tool."
        ),
        # Without it the SDK lists the tools again for every call (to check Mcp-Param headers).
        get_tool_input_schema=inputs.get,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )


@dataclass
class _Case:
    secret: str
    tools: CaseTools
    manager: StreamableHTTPSessionManager
    #: Whether only a sandbox's bridge may use the secret (:mod:`pytest_gta.peers`).
    bridged: bool = False
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task[None] | None = None


class CaseEndpoint:
    """One case's MCP endpoint on a gateway."""

    def __init__(self, gateway: McpGateway, case: _Case, url: str) -> None:
        self._gateway = gateway
        self._case = case
        #: ``http://127.0.0.1:PORT/<secret>/mcp``: usable as it is by any MCP client.
        self.url = url
        #: The case's tools and their log.
        self.tools = case.tools

    def close(self) -> None:
        """Refuse later requests (404) and stop the case's sessions; idempotent."""
        self._gateway._close_case(self._case)

    def __enter__(self) -> CaseEndpoint:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


async def _not_found(send: _Send) -> None:
    body = json.dumps({"error": "not found"}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": 404, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class McpGateway:
    """One streamable-HTTP MCP server per process on 127.0.0.1; one random path per case."""

    def __init__(self, *, host: str = "127.0.0.1", port: int = 0) -> None:
        self.host = host
        self.port = port
        self._cases: dict[str, _Case] = {}
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None
        self._socket: socket.socket | None = None
        self._closed = False
        self._ready = threading.Event()

    @property
    def base_url(self) -> str:
        """``http://HOST:PORT`` of the running server."""
        return f"http://{self.host}:{self.port}"

    def start(self) -> None:
        """Listen and serve on a background thread; idempotent.

        Raises:
            GtaInfrastructureError: the server could not listen (the port is taken...).
        """
        with self._lock:
            if self._closed:
                return
            if self._thread is not None:
                # Another thread is starting it: wait as it does (cases open in pool threads).
                ready = self._ready
            else:
                ready = self._begin()
        if not ready.wait(START_TIMEOUT) or self._server is None or not self._server.started:
            self.close()
            raise GtaInfrastructureError("the MCP server did not start")

    def _begin(self) -> threading.Event:
        """Listen and start the server thread (under the lock); its event is set when it serves."""
        import uvicorn  # see _image

        try:
            sock = loopback.listen(self.host, self.port)
        except OSError as exc:
            raise GtaInfrastructureError(
                f"the MCP server cannot listen on {self.host}:{self.port}: {exc}"
            ) from None
        self._socket = sock
        self.port = sock.getsockname()[1]
        self._pool = concurrent.futures.ThreadPoolExecutor(
            CALL_THREADS, thread_name_prefix="gta-mcp-call"
        )
        config = uvicorn.Config(
            self._asgi,
            interface="asgi3",
            lifespan="off",
            log_level="warning",
            access_log=False,
            timeout_graceful_shutdown=1,
        )
        self._server = uvicorn.Server(config)
        ready = threading.Event()
        self._thread = threading.Thread(
            target=self._serve, args=(sock, ready), name="gta-mcp-server", daemon=True
        )
        self._thread.start()
        self._ready = ready
        return ready

    def _serve(self, sock: socket.socket, ready: threading.Event) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        server = self._server
        assert server is not None

        async def main() -> None:
            serving = asyncio.ensure_future(server.serve(sockets=[sock]))
            while not server.started and not serving.done():
                await asyncio.sleep(0.005)
            ready.set()
            await serving

        try:
            loop.run_until_complete(main())
        finally:
            ready.set()
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

    def open(self, tools: CaseTools, *, bridged: bool = False) -> CaseEndpoint:
        """Serve ``tools`` at a new secret path (starts the gateway if needed).

        ``bridged``: the path answers only connections of a sandbox's bridge
        (:func:`pytest_gta.peers.trusted`), 404 to anyone else who learnt the URL.
        """
        # the MCP SDK, see _image
        from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
        from mcp.server.transport_security import TransportSecuritySettings

        self.start()
        loop = self._loop
        if loop is None or self._closed:
            raise GtaInfrastructureError("the MCP server is closed")
        hosts = [f"127.0.0.1:{self.port}", f"localhost:{self.port}", f"{self.host}:{self.port}"]
        security = TransportSecuritySettings(
            enable_dns_rebinding_protection=True,
            allowed_hosts=hosts,
            allowed_origins=[f"http://{h}" for h in hosts],
        )
        manager = StreamableHTTPSessionManager(
            app=case_server(tools, self._run),
            stateless=True,
            json_response=True,
            security_settings=security,
        )
        case = _Case(secrets.token_urlsafe(24), tools, manager, bridged)
        asyncio.run_coroutine_threadsafe(self._start_case(case), loop).result(STOP_TIMEOUT)
        with self._lock:
            self._cases[case.secret] = case
        return CaseEndpoint(self, case, f"{self.base_url}/{case.secret}/mcp")

    async def _run(self, call: Callable[[], types.CallToolResult]) -> types.CallToolResult:
        assert self._pool is not None
        return await asyncio.get_running_loop().run_in_executor(self._pool, call)

    async def _start_case(self, case: _Case) -> None:
        running = asyncio.Event()

        async def hold() -> None:
            async with case.manager.run():
                running.set()
                await case.stop.wait()

        case.task = asyncio.create_task(hold())
        waiter = asyncio.ensure_future(running.wait())
        await asyncio.wait({case.task, waiter}, return_when=asyncio.FIRST_COMPLETED)
        waiter.cancel()
        if case.task.done():
            case.task.result()

    async def _stop_case(self, case: _Case) -> None:
        case.stop.set()
        if case.task is not None:
            await asyncio.gather(case.task, return_exceptions=True)

    def _close_case(self, case: _Case) -> None:
        with self._lock:
            if self._cases.pop(case.secret, None) is None:
                return
        loop = self._loop
        if loop is not None and not loop.is_closed():
            try:
                future = asyncio.run_coroutine_threadsafe(self._stop_case(case), loop)
                future.result(STOP_TIMEOUT)
            except (RuntimeError, concurrent.futures.TimeoutError):
                pass  # the loop is stopping: the case's task ends with it

    async def _asgi(self, scope: _Scope, receive: _Receive, send: _Send) -> None:
        if scope["type"] != "http":
            return
        parts = str(scope.get("path", "")).strip("/").split("/")
        case = None
        if len(parts) == 2 and parts[1] == "mcp":
            with self._lock:
                case = self._cases.get(parts[0])
        if (
            case is not None
            and case.bridged
            and not peers.trusted(scope.get("client"), scope.get("server"))
        ):
            case = None
        if case is None:
            await _not_found(send)
            return
        await case.manager.handle_request(scope, receive, send)

    def close(self) -> None:
        """Close every case, stop the server and its threads; idempotent."""
        with self._lock:
            self._closed = True
            cases = list(self._cases.values())
        for case in cases:
            self._close_case(case)
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(STOP_TIMEOUT)
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
        if self._socket is not None:
            self._socket.close()

    def __enter__(self) -> McpGateway:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def serve_stdio(tools: CaseTools) -> None:
    """Serve ``tools`` as MCP over stdin/stdout until the client closes stdin."""
    import anyio  # see _image
    from mcp.server.stdio import stdio_server

    pool = concurrent.futures.ThreadPoolExecutor(CALL_THREADS, thread_name_prefix="gta-mcp-call")

    async def run(call: Callable[[], types.CallToolResult]) -> types.CallToolResult:
        return await asyncio.get_running_loop().run_in_executor(pool, call)

    server = case_server(tools, run)

    async def main() -> None:
        async with stdio_server() as (read_stream, write_stream):
            await server.run(read_stream, write_stream, server.create_initialization_options())

    try:
        anyio.run(main)
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
