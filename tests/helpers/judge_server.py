"""A scripted LLM judge for GTA-Workflow: a real HTTP server on 127.0.0.1 speaking OpenAI's API.

It answers the subset the official GTA-2 evaluator (``GPTEvaluator`` in the official
``gta_bench_v2.py``) uses through the ``openai`` SDK: ``POST /v1/files`` (a multipart upload,
answered with a FileObject) and ``POST /v1/responses`` (answered with a Response whose one
message holds one ``output_text`` part, so ``response.output_text`` is the scripted text).

Replies are scripted by checkpoint requirement: the text between ``"Checkpoint
requirement:\\n"`` and ``"\\n\\nPlease score"`` of the first ``input_text`` block is looked up in
``replies``; a reply is a string (the output text) or an int (an HTTP error status, every
time: the SDK retries a 5xx twice, then raises). ``default`` answers requirements not in the
script. Uploads can be scripted to fail by file name (``upload_failures``: name -> status).

Every request is recorded in order (:attr:`JudgeServer.requests`): an upload's file name,
content type, sha256, size and purpose; a response request's JSON body and requirement.
``tests/data/workflow/judge_script.json`` is the script of the bundled Workflow sample
(:meth:`JudgeServer.from_script`).
"""

from __future__ import annotations

import contextlib
import email.parser
import email.policy
import hashlib
import json
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest

from pytest_gta.loopback import QuickHTTPServer
from tests.helpers.gta_run import GtaRun, gta
from tests.helpers.paths import ROOT

#: What ``default`` answers when a script gives none.
DEFAULT_REPLY = '{"score": 5, "analysis": "default reply"}'
#: The timestamp every answer carries (a fixed one keeps recorded bodies stable).
CREATED_AT = 1_700_000_000
REQUIREMENT_START = "Checkpoint requirement:\n"
REQUIREMENT_END = "\n\nPlease score"
#: Sent with every error answer: the SDK still retries (twice), but waits this long instead of
#: its exponential backoff.
RETRY_AFTER_MS = "20"

Reply = str | int


@dataclass
class Upload:
    """One ``POST /v1/files`` the server received."""

    filename: str
    content_type: str
    sha256: str
    size: int
    purpose: str
    #: The FileObject id it answered (``file-<n>``), or ``None`` when scripted to fail.
    file_id: str | None
    status: int
    kind: str = "file"


@dataclass
class ResponseCall:
    """One ``POST /v1/responses`` the server received."""

    body: dict[str, Any]
    #: The checkpoint requirement found in the prompt, or ``None`` if there was none.
    requirement: str | None
    status: int
    kind: str = "response"


@dataclass
class Other:
    """A request to any other path (answered 404)."""

    method: str
    path: str
    status: int = 404
    kind: str = "other"


Request = Upload | ResponseCall | Other


def requirement_of(body: Mapping[str, Any]) -> str | None:
    """The checkpoint requirement in the first ``input_text`` block of a Responses body."""
    messages = body.get("input")
    if not isinstance(messages, list):
        return None
    for message in messages:
        content = message.get("content") if isinstance(message, dict) else None
        for block in content if isinstance(content, list) else []:
            if isinstance(block, dict) and block.get("type") == "input_text":
                text = str(block.get("text", ""))
                _, found, rest = text.partition(REQUIREMENT_START)
                if not found:
                    return None
                requirement, found, _ = rest.partition(REQUIREMENT_END)
                return requirement if found else None
    return None


def parse_multipart(content_type: str, raw: bytes) -> dict[str, tuple[str | None, str, bytes]]:
    """The parts of a multipart/form-data body: field name -> (file name, content type, bytes)."""
    head = f"Content-Type: {content_type}\r\nMIME-Version: 1.0\r\n\r\n".encode("latin-1")
    message = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(head + raw)
    parts: dict[str, tuple[str | None, str, bytes]] = {}
    for part in message.iter_parts():
        name = part.get_param("name", header="content-disposition")
        payload = part.get_payload(decode=True)
        if isinstance(name, str):
            data = payload if isinstance(payload, bytes) else b""
            parts[name] = (part.get_filename(), part.get_content_type(), data)
    return parts


def response_object(number: int, body: Mapping[str, Any], text: str) -> dict[str, Any]:
    """A valid Responses API ``Response`` whose ``output_text`` is ``text``."""
    return {
        "id": f"resp_{number}",
        "object": "response",
        "created_at": CREATED_AT,
        "model": body.get("model", "unknown"),
        "status": "completed",
        "error": None,
        "incomplete_details": None,
        "instructions": None,
        "metadata": {},
        "output": [
            {
                "id": f"msg_{number}",
                "type": "message",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": text, "annotations": []}],
            }
        ],
        "parallel_tool_calls": True,
        "temperature": body.get("temperature"),
        "tool_choice": "auto",
        "tools": [],
        "top_p": 1.0,
        "usage": {
            "input_tokens": 100,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": max(1, len(text) // 4),
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": 100 + max(1, len(text) // 4),
        },
    }


@dataclass
class JudgeServer:
    """The scripted judge; a context manager that serves on an ephemeral port."""

    replies: Mapping[str, Reply] = field(default_factory=dict)
    default: Reply = DEFAULT_REPLY
    upload_failures: Mapping[str, int] = field(default_factory=dict)
    requests: list[Request] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._uploads = 0
        self._responses = 0
        self._server: QuickHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @classmethod
    def from_script(cls, path: Path) -> JudgeServer:
        """A server answering from a script file (``judge_script.json``'s layout)."""
        script = json.loads(path.read_text(encoding="utf-8"))
        return cls(
            replies=dict(script.get("replies", {})),
            default=script.get("default", DEFAULT_REPLY),
            upload_failures=dict(script.get("upload_failures", {})),
        )

    # -- lifecycle -------------------------------------------------------------------------------

    @property
    def port(self) -> int:
        assert self._server is not None, "the server is not started"
        return int(self._server.server_address[1])

    @property
    def base_url(self) -> str:
        """The ``base_url`` for the SDK (``OPENAI_BASE_URL``): ``http://127.0.0.1:PORT/v1``."""
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> JudgeServer:
        server = QuickHTTPServer(("127.0.0.1", 0), _handler_for(self))
        server.daemon_threads = True
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def __enter__(self) -> JudgeServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- views -----------------------------------------------------------------------------------

    def uploads(self) -> list[Upload]:
        with self._lock:
            return [r for r in self.requests if isinstance(r, Upload)]

    def response_calls(self) -> list[ResponseCall]:
        with self._lock:
            return [r for r in self.requests if isinstance(r, ResponseCall)]

    def filename_of(self, file_id: str) -> str | None:
        """The file name of the upload that was answered with ``file_id``."""
        return next((u.filename for u in self.uploads() if u.file_id == file_id), None)

    # -- answers ---------------------------------------------------------------------------------

    def answer_upload(self, content_type: str, raw: bytes) -> tuple[int, dict[str, Any]]:
        parts = parse_multipart(content_type, raw)
        filename, part_type, data = parts.get("file", (None, "", b""))
        purpose_part = parts.get("purpose")
        purpose = purpose_part[2].decode("utf-8", "replace") if purpose_part else ""
        name = filename or ""
        status = self.upload_failures.get(name, 200)
        with self._lock:
            file_id = None
            if status == 200:
                self._uploads += 1
                file_id = f"file-{self._uploads}"
            self.requests.append(
                Upload(
                    filename=name,
                    content_type=part_type,
                    sha256=hashlib.sha256(data).hexdigest(),
                    size=len(data),
                    purpose=purpose,
                    file_id=file_id,
                    status=status,
                )
            )
        if file_id is None:
            return status, _error(status, f"upload of {name} scripted to fail")
        return 200, {
            "id": file_id,
            "object": "file",
            "bytes": len(data),
            "created_at": CREATED_AT,
            "filename": name,
            "purpose": "user_data",
            "status": "processed",
        }

    def answer_response(self, raw: bytes) -> tuple[int, dict[str, Any]]:
        try:
            body = json.loads(raw)
        except ValueError:
            body = {"unparsed": raw.decode("utf-8", "replace")}
        if not isinstance(body, dict):
            body = {"unparsed": body}
        requirement = requirement_of(body)
        reply = self.default
        if requirement is not None and requirement in self.replies:
            reply = self.replies[requirement]
        status = reply if isinstance(reply, int) else 200
        with self._lock:
            self.requests.append(ResponseCall(body=body, requirement=requirement, status=status))
            self._responses += 1
            number = self._responses
        if isinstance(reply, int):
            return reply, _error(reply, f"scripted status {reply}")
        return 200, response_object(number, body, reply)

    def answer_other(self, method: str, path: str) -> tuple[int, dict[str, Any]]:
        with self._lock:
            self.requests.append(Other(method=method, path=path))
        return 404, _error(404, f"no route {method} {path}")


#: How long a request held by :attr:`CountingJudge.meet` waits for company: a bound on a hang.
MEET_BOUND_S = 10.0


@dataclass
class CountingJudge(JudgeServer):
    """The scripted judge, answering each request after ``latency`` seconds, counting how many
    requests it holds at once (:attr:`peak`, uploads and responses alike).

    ``meet``: the first requests wait until this many are in flight at once (at most
    :data:`MEET_BOUND_S`, then no request waits), so a run that can overlap its requests is
    seen to, whatever the timing (1: no request waits).
    """

    latency: float = 0.0
    meet: int = 1

    def __post_init__(self) -> None:
        super().__post_init__()
        #: The most requests held at once.
        self.peak = 0
        self._in_flight = 0
        self._met = False
        self._flight = threading.Condition()

    @contextlib.contextmanager
    def _held(self) -> Iterator[None]:
        with self._flight:
            self._in_flight += 1
            self.peak = max(self.peak, self._in_flight)
            if self._in_flight >= self.meet:
                self._met = True
                self._flight.notify_all()
            if not self._met:
                self._flight.wait_for(lambda: self._met, timeout=MEET_BOUND_S)
                self._met = True
        try:
            if self.latency:
                time.sleep(self.latency)
            yield
        finally:
            with self._flight:
                self._in_flight -= 1

    def answer_upload(self, content_type: str, raw: bytes) -> tuple[int, dict[str, Any]]:
        with self._held():
            return super().answer_upload(content_type, raw)

    def answer_response(self, raw: bytes) -> tuple[int, dict[str, Any]]:
        with self._held():
            return super().answer_response(raw)

    def answer_other(self, method: str, path: str) -> tuple[int, dict[str, Any]]:
        with self._held():
            return super().answer_other(method, path)


def _error(status: int, message: str) -> dict[str, Any]:
    kind = "server_error" if status >= 500 else "invalid_request_error"
    return {"error": {"message": message, "type": kind, "param": None, "code": None}}


def _handler_for(judge: JudgeServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            """Keep the test output quiet."""

        def read_body(self) -> bytes:
            if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
                chunks: list[bytes] = []
                while True:
                    size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                    if size == 0:
                        self.rfile.readline()
                        return b"".join(chunks)
                    chunks.append(self.rfile.read(size))
                    self.rfile.readline()
            return self.rfile.read(int(self.headers.get("Content-Length", "0") or 0))

        def send(self, status: int, payload: dict[str, Any]) -> None:
            data = json.dumps(payload).encode("utf-8")
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            if status >= 400:
                self.send_header("retry-after-ms", RETRY_AFTER_MS)
            self.end_headers()
            self.wfile.write(data)

        def do_POST(self) -> None:
            raw = self.read_body()
            path = self.path.split("?", 1)[0].rstrip("/")
            if path == "/v1/files":
                self.send(*judge.answer_upload(self.headers.get("Content-Type", ""), raw))
            elif path == "/v1/responses":
                self.send(*judge.answer_response(raw))
            else:
                self.send(*judge.answer_other("POST", self.path))

        def do_GET(self) -> None:
            self.send(*judge.answer_other("GET", self.path))

    return Handler


#: The scripted judge's data: the eval packs, their deliverables and the reply script.
WORKFLOW_DATA = ROOT / "tests" / "data" / "workflow"
WORKFLOW_SAMPLE = ROOT / "fixtures" / "gta_workflow_sample"


def judged_run(
    pytester: pytest.Pytester,
    *extra: str,
    pack: str = "pack.json",
    script: Path = WORKFLOW_DATA / "judge_script.json",
    judge: JudgeServer | None = None,
) -> tuple[GtaRun, JudgeServer, Path]:
    """The acceptance's command line on the bundled Workflow sample against a scripted judge.

    ``pytest --gta-data=<sample> --gta-model=evalpack:<pack> --gta-judge=openai/gpt-5.2
    --gta-judge-base-url=<server> --gta-concurrency=1`` (the cache off, JUnit XML written), then
    ``extra`` (a later ``--gta-concurrency`` wins); the run, the stopped server (its requests)
    and the JUnit file. ``judge``: the server to start (default: one answering ``script``).
    """
    server = (judge or JudgeServer.from_script(script)).start()
    junit = pytester.path / "junit.xml"
    try:
        run = gta(
            pytester,
            f"--gta-data={WORKFLOW_SAMPLE}",
            f"--gta-model=evalpack:{WORKFLOW_DATA / pack}",
            "--gta-judge=openai/gpt-5.2",
            f"--gta-judge-base-url={server.base_url}",
            "--gta-concurrency=1",
            "--gta-cache=off",
            f"--junitxml={junit}",
            *extra,
        )
    finally:
        server.stop()
    return run, server, junit
