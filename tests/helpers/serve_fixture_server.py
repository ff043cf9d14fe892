"""A real OpenAI-compatible server process for the ``--gta-serve-command`` tests.

``python tests/helpers/serve_fixture_server.py --port {port} --model {model} --record FILE``: serves
``/health``, ``/v1/models`` and ``/v1/chat/completions`` on 127.0.0.1 (final answers, always the
same), and appends to FILE what the tests check: ``started PID``, ``child PID`` (a process it
starts in its own process group, as vLLM starts its engine workers) and ``request MODEL TEXT``
for each completion (the last message, which names the case). The other flags make it
misbehave the ways a real server does: exit at once, never become healthy, load slowly, answer
slowly, or have no ``/health`` at all.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from scripted_server import chat_completion  # this file runs from tests/ as a script

LOCK = threading.Lock()


def record(path: Path, line: str) -> None:
    """Append one line to the record file, whole."""
    with LOCK, path.open("a", encoding="utf-8") as out:
        out.write(line + "\n")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--model", required=True)
    parser.add_argument("--record", type=Path, required=True)
    parser.add_argument("--exit-at-once", type=int, default=None, help="exit with this status")
    parser.add_argument("--never-healthy", action="store_true")
    parser.add_argument("--no-health", action="store_true", help="/health is 404")
    parser.add_argument("--load-s", type=float, default=0.0, help="503 on /health this long")
    parser.add_argument("--answer-s", type=float, default=0.0, help="each completion takes this")
    opts = parser.parse_args()
    record(opts.record, f"started {os.getpid()}")
    print(f"fixture server for {opts.model} on port {opts.port}", flush=True)
    if opts.exit_at_once is not None:
        print("fatal: the fixture server was told to fail", flush=True)
        return int(opts.exit_at_once)
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"])
    record(opts.record, f"child {child.pid}")
    ready_at = time.monotonic() + opts.load_s

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _send(self, status: int, body: Any) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            if self.path == "/health":
                if opts.no_health:
                    self._send(404, {"detail": "Not Found"})
                elif opts.never_healthy or time.monotonic() < ready_at:
                    self._send(503, {"status": "loading"})
                else:
                    self._send(200, {"status": "ok"})
            elif self.path == "/v1/models":
                listing = [{"id": opts.model, "object": "model", "created": 0, "owned_by": "t"}]
                self._send(200, {"object": "list", "data": listing})
            else:
                self._send(404, {"detail": "Not Found"})

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length) or b"{}")
            last = str(body.get("messages", [{}])[-1].get("content", ""))
            record(opts.record, f"request {body.get('model')} {json.dumps(last[-80:])}")
            time.sleep(opts.answer_s)
            self._send(200, chat_completion("Thought: done\nFinal Answer: 4"))

    httpd = ThreadingHTTPServer((opts.host, opts.port), Handler)
    httpd.daemon_threads = True
    httpd.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
