"""A real OpenAI-compatible server on 127.0.0.1 that answers like a perfect model, slowly.

It knows a dataset and answers each chat completion with the reference step the conversation
has reached (the query found by its text, the step by the number of assistant messages so far),
rendered as ReAct text by :func:`pytest_gta.models.oracle.render_reference`. Every request takes
``latency`` seconds, and the server counts requests and the most it held at once, so tests (and
``benchmarks/concurrency.py``) can see how many requests a run keeps in flight.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from pytest_gta.dataset import Dataset
from pytest_gta.models.oracle import render_reference


class OracleServer:
    """``/v1/chat/completions`` and ``/v1/models`` answering with the reference chain."""

    def __init__(
        self,
        dataset: Dataset,
        latency: float = 0.0,
        name: str = "oracle-http",
        wrong: frozenset[str] = frozenset(),
    ) -> None:
        self.dataset = dataset
        #: Queries answered wrongly at once (their cases fail).
        self.wrong = wrong
        self.latency = latency
        self.name = name
        self.calls = 0
        self.in_flight = 0
        self.peak = 0
        self.texts = {q.text.strip(): q.qid for q in dataset.queries.values()}
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                """Quiet."""

            def _send(self, status: int, body: Any) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                """The model list (the adapter asks which name to send)."""
                self._send(200, {"object": "list", "data": [{"id": server.name}]})

            def do_POST(self) -> None:
                """One chat completion, after the latency."""
                length = int(self.headers.get("Content-Length", "0"))
                request = json.loads(self.rfile.read(length))
                with server._lock:
                    server.calls += 1
                    server.in_flight += 1
                    server.peak = max(server.peak, server.in_flight)
                try:
                    time.sleep(server.latency)
                    text = server.answer(request.get("messages", []))
                finally:
                    with server._lock:
                        server.in_flight -= 1
                self._send(
                    200,
                    {
                        "id": "chatcmpl-oracle",
                        "object": "chat.completion",
                        "created": 0,
                        "model": server.name,
                        "choices": [
                            {
                                "index": 0,
                                "message": {"role": "assistant", "content": text},
                                "finish_reason": "stop",
                            }
                        ],
                        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
                    },
                )

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def answer(self, messages: list[dict[str, Any]]) -> str:
        """The reference step this conversation has reached."""
        qid = None
        for message in messages:
            content = message.get("content")
            if message.get("role") == "user" and isinstance(content, str):
                qid = self.texts.get(content.strip(), qid)
        if qid is None or qid in self.wrong:
            return "Thought: I do not know this query.\nFinal Answer: unknown"
        query = self.dataset[qid]
        dialogs = self.dataset.reference_dialogs(query)
        assistants = [dialogs[i] for i in query.assistant_indices]
        turn = sum(1 for m in messages if m.get("role") == "assistant")
        return render_reference(assistants[min(turn, len(assistants) - 1)])

    @property
    def url(self) -> str:
        """The ``--gta-base-url`` of this server."""
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def close(self) -> None:
        """Stop serving."""
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> OracleServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
