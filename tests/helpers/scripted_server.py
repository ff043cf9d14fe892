"""A real HTTP server on 127.0.0.1 that answers from a script and records every request.

It speaks just enough of the OpenAI chat-completions API (``/v1/chat/completions``,
``/v1/models``) and of Anthropic's Messages API (``/v1/messages``) for the official SDKs to
talk to it, so adapter tests exercise the real SDKs, real sockets and real retries. Each
request pops the next scripted step: a JSON answer with a status and headers, raw bytes of any
content type (an HTML page, truncated or non-UTF-8 JSON), a delay (for timeouts), or a dropped
connection (a server dying mid-run), or a chunked body written piece by piece (a server-sent
event stream). When the script runs out the ``default`` answer is used.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any

from pytest_gta.loopback import QuickHTTPServer

#: How long a :attr:`Step.hold` may keep the rest of a stream back before the server sends it
#: anyway: a bound that keeps a client that waits for the whole body from hanging the test.
HOLD_S = 30.0


@dataclass
class Step:
    """One scripted answer."""

    body: Any = None
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0
    #: Close the socket without answering (a crashed server).
    drop: bool = False
    #: Send these bytes as the body instead of ``body`` as JSON.
    raw: bytes | None = None
    #: ``None`` sends no Content-Type header at all.
    content_type: str | None = "application/json"
    #: Send these pieces as a chunked body, one write each, ``chunk_delay`` apart (a stream).
    chunks: list[bytes] | None = None
    chunk_delay: float = 0.0
    #: Hold the chunks after the first until the test sets this (a barrier, not a delay: the
    #: client must have had the first chunk while the rest was still held).
    hold: threading.Event | None = None
    #: Set when :attr:`hold` was never released and the server gave up waiting (a hang bound).
    held_out: bool = False


@dataclass
class Recorded:
    """One request the server received."""

    method: str
    path: str
    headers: dict[str, str]
    raw: bytes

    @property
    def json(self) -> Any:
        """The request body parsed as JSON."""
        return json.loads(self.raw)


def chat_completion(
    text: str,
    *,
    tool_calls: list[dict[str, Any]] | None = None,
    prompt_tokens: int = 11,
    completion_tokens: int = 7,
) -> dict[str, Any]:
    """A chat-completions response body."""
    message: dict[str, Any] = {"role": "assistant", "content": text}
    if tool_calls:
        message["tool_calls"] = tool_calls
    return {
        "id": "chatcmpl-test",
        "object": "chat.completion",
        "created": 0,
        "model": "scripted",
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": "tool_calls" if tool_calls else "stop",
            }
        ],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }


def anthropic_message(
    blocks: list[dict[str, Any]], *, input_tokens: int = 13, output_tokens: int = 5
) -> dict[str, Any]:
    """A Messages API response body."""
    stop = "tool_use" if any(b.get("type") == "tool_use" for b in blocks) else "end_turn"
    return {
        "id": "msg_test",
        "type": "message",
        "role": "assistant",
        "model": "scripted",
        "content": blocks,
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": {"input_tokens": input_tokens, "output_tokens": output_tokens},
    }


class ScriptedServer:
    """``with ScriptedServer(models=[...]) as server: server.url`` -> ``http://127.0.0.1:P/v1``."""

    def __init__(
        self,
        *,
        models: list[str] | None = None,
        default: Step | Callable[[Recorded], Step] | None = None,
    ) -> None:
        self.models = models if models is not None else ["scripted-model"]
        #: Answer ``GET /models`` with this instead of the listing of ``models``.
        self.models_answer: Step | None = None
        self.default = default or Step(chat_completion("Final Answer: ok"))
        self.script: list[Step] = []
        self.requests: list[Recorded] = []
        self._lock = threading.Lock()
        self._connections: list[socket.socket] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def setup(self) -> None:
                super().setup()
                with server._lock:
                    server._connections.append(self.connection)

            def _answer(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                record = Recorded(self.command, self.path, dict(self.headers.items()), raw)
                if self.command == "GET" and self.path.rstrip("/").endswith("/models"):
                    if server.models_answer is not None:
                        self._send(server.models_answer)
                        return
                    body = {
                        "object": "list",
                        "data": [
                            {"id": m, "object": "model", "created": 0, "owned_by": "test"}
                            for m in server.models
                        ],
                    }
                    self._send(Step(body))
                    return
                with server._lock:
                    server.requests.append(record)
                    step = server.script.pop(0) if server.script else None
                if step is None:
                    default = server.default
                    step = default(record) if callable(default) else default
                if step.delay:
                    time.sleep(step.delay)
                if step.drop:
                    self.connection.shutdown(socket.SHUT_RDWR)
                    self.connection.close()
                    self.close_connection = True
                    return
                self._send(step)

            def _send(self, step: Step) -> None:
                if step.chunks is not None:
                    self._stream(step)
                    return
                data = step.raw if step.raw is not None else json.dumps(step.body).encode()
                # A client that gave up (its timeout passed during a delayed step) is gone by
                # the time the head is written: not this server's error, and its thread may
                # end during a later test, whose captured output must not get a traceback.
                try:
                    self.send_response(step.status)
                    if step.content_type is not None:
                        self.send_header("Content-Type", step.content_type)
                    self.send_header("Content-Length", str(len(data)))
                    for key, value in step.headers.items():
                        self.send_header(key, value)
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    self.close_connection = True

            def _stream(self, step: Step) -> None:
                self.send_response(step.status)
                self.send_header("Content-Type", step.content_type or "text/event-stream")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                try:
                    for n, piece in enumerate(step.chunks or []):
                        if n and step.chunk_delay:
                            time.sleep(step.chunk_delay)
                        if n == 1 and step.hold is not None and not step.hold.wait(HOLD_S):
                            step.held_out = True
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
                        self.wfile.flush()
                    self.wfile.write(b"0\r\n\r\n")
                except (BrokenPipeError, ConnectionResetError):
                    pass

            do_GET = _answer
            do_POST = _answer

        self._httpd = QuickHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    @property
    def port(self) -> int:
        return int(self._httpd.server_address[1])

    @property
    def base(self) -> str:
        """``http://127.0.0.1:PORT`` (Anthropic's SDK adds ``/v1`` itself)."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        """The OpenAI-style base URL, ``http://127.0.0.1:PORT/v1``."""
        return f"{self.base}/v1"

    def then(self, *steps: Step) -> ScriptedServer:
        """Queue answers for the next requests."""
        with self._lock:
            self.script.extend(steps)
        return self

    def posted(self) -> list[Any]:
        """Bodies of the POST requests so far."""
        return [r.json for r in self.requests if r.method == "POST"]

    def requests_seen(self, expected: int, within: float = 10.0) -> int:
        """How many requests arrived, once ``expected`` did or ``within`` seconds passed.

        A client that timed out may give up before this server's thread has read its request
        (a loaded machine schedules it late): the request still arrives, a moment after.
        """
        deadline = time.monotonic() + within
        while len(self.requests) < expected and time.monotonic() < deadline:
            time.sleep(0.01)
        return len(self.requests)

    def __enter__(self) -> ScriptedServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop serving, drop open keep-alive connections, free the port (a dead server)."""
        self._httpd.shutdown()
        self._httpd.server_close()
        with self._lock:
            connections, self._connections = self._connections, []
        for connection in connections:
            try:
                connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            connection.close()
