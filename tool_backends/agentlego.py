"""``agentlego=URL``: call the tools of a running AgentLego tool server over HTTP.

This is how the official GTA numbers were produced: the GPU tools (LLaVA, GLIP, SDXL, ...) run
in an AgentLego server and the harness talks to it. The protocol is what
``agentlego.server`` generates with FastAPI: ``GET /openapi.json`` lists one ``POST /{Tool}`` path
per tool; image (and audio) inputs travel as multipart file fields, every other input as a form
field that the server converts with the tool's declared type; a 200 answer is JSON (a string, a
number, a base64 PNG for an image, or an array when a tool has several outputs); a tool that
raises answers ``400 {"detail": repr(exception)}``.

Two failure kinds stay apart on purpose. A call the tool rejects (HTTP 4xx/5xx) is a
:class:`~pytest_gta.errors.GtaToolError`: the model sees the message, exactly as with the
official harness. A server that cannot be reached is a
:class:`~pytest_gta.errors.GtaInfrastructureError`, so the case ends as an *error* saying so
instead of a wrong answer that drags the score down. A server that is down when the run starts
still claims the 14 GTA tools, so their cases reach it and end with that clear error rather than
being skipped or silently served by a later backend.

The HTTP client is ``httpx2`` (the httpx API, which the ``openai`` and ``anthropic`` SDKs already
depend on), so no extra install is needed.
"""

from __future__ import annotations

import base64
import binascii
import json
import mimetypes
import os
from typing import Any

import httpx2

from pytest_gta.errors import GtaInfrastructureError, GtaToolError, GtaUsageError
from pytest_gta.flags import OPT_TOOLS
from pytest_gta.models.generation import DEFAULT_MAX_REPLY_BYTES
from pytest_gta.tools import (
    BaseToolBackend,
    ToolBackendContext,
    ToolContext,
    ToolInvocation,
    ToolSpec,
)
from pytest_gta.types import ResultItem, ToolParam, ToolResult
from pytest_gta.urls import check_url
from pytest_gta.vocabulary import tool_category
from tool_backends.http_client import request_with_retries
from tool_backends.paths import resolve_image, save_output_file

#: Input types sent as multipart file fields (the server declares them ``UploadFile``).
FILE_INPUT_TYPES = frozenset({"image", "audio", "file"})
#: Output types that arrive base64-encoded, with the extension they are saved under.
FILE_OUTPUT_EXTENSIONS = {"image": ".png", "audio": ".wav"}


def form_value(value: Any) -> str:
    """A non-file input as the form text FastAPI parses back into the declared type."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


class AgentLegoBackend(BaseToolBackend):
    """Serves the tools an AgentLego server lists in its ``openapi.json``."""

    name = "agentlego"

    def __init__(
        self,
        url: str,
        *,
        connect_timeout: float = 10.0,
        read_timeout: float = 600.0,
        retries: int = 2,
        backoff: float = 0.5,
        max_reply_bytes: int = DEFAULT_MAX_REPLY_BYTES,
    ) -> None:
        """Connect to the server and read its tool list.

        Args:
            url: The server's base URL (``http://gpu:16180``).
            connect_timeout: Seconds to wait for a connection; a dead host fails fast.
            read_timeout: Seconds a tool may take; GPU tools like SDXL are slow.
            retries: Extra attempts after a connection error (never after an HTTP answer,
                because the tool ran and would run again).
            backoff: Seconds before the first retry, doubled for each further one.
            max_reply_bytes: Bytes of one answer read at most (``--gta-max-reply-bytes``).
        """
        self.url = url.rstrip("/")
        self.max_reply_bytes = max_reply_bytes
        self.retries = retries
        self.backoff = backoff
        self.connect_timeout = connect_timeout
        self.read_timeout = read_timeout
        self.timeout = httpx2.Timeout(read_timeout, connect=connect_timeout)
        #: Why the server cannot be used, when it could not be reached at start.
        self.unreachable: str | None = None
        self.tools: frozenset[str] = frozenset()
        try:
            self.tools = self._list_tools()
        except GtaInfrastructureError as exc:
            self.unreachable = str(exc)

    def _list_tools(self) -> frozenset[str]:
        response = self._send("GET", "/openapi.json")
        if response.status_code != 200:
            raise GtaInfrastructureError(
                f"agentlego server at {self.url} answered HTTP {response.status_code} for "
                "/openapi.json; is this an AgentLego tool server?"
            )
        try:
            paths = response.json()["paths"]
        except (ValueError, KeyError, TypeError) as exc:
            raise GtaInfrastructureError(
                f"agentlego server at {self.url} sent an unreadable /openapi.json: {exc!r}"
            ) from exc
        return frozenset(str(path).strip("/") for path in paths)

    def _send(
        self, method: str, path: str, timeout: httpx2.Timeout | None = None, **kwargs: Any
    ) -> httpx2.Response:
        """One request, retried on connection errors only (``timeout``: the backend's own)."""
        return request_with_retries(
            method,
            self.url + path,
            service=f"agentlego server at {self.url}",
            what=f"{method} {path}",
            timeout=self.timeout if timeout is None else timeout,
            retries=self.retries,
            backoff=self.backoff,
            max_reply_bytes=self.max_reply_bytes,
            **kwargs,
        )

    def offers(self, tool: str) -> bool:
        """Whether the server lists ``tool``; any GTA tool while the server is unreachable.

        Claiming the GTA tools of a dead server routes their cases here, where ``call`` turns
        them into errors naming the server, instead of quietly skipping them.
        """
        if self.unreachable is not None:
            return tool_category(tool) != "none"
        return tool.replace(" ", "_") in self.tools

    def call(self, invocation: ToolInvocation, context: ToolContext) -> ToolResult:
        """POST the call to ``/{Tool}`` and decode the answer by the tool's declared outputs."""
        if self.unreachable is not None:
            raise GtaInfrastructureError(self.unreachable)
        files: dict[str, tuple[str, bytes, str]] = {}
        data: dict[str, str] = {}
        for key, value in invocation.converted.items():
            param = invocation.tool.input(key)
            if value is None:
                continue
            if param is not None and param.type in FILE_INPUT_TYPES:
                # Confined to the dataset and the output directory: a file sent here leaves
                # the machine, so a model naming /etc/passwd gets a tool error, not an upload.
                path = resolve_image(str(value), context)
                mime = mimetypes.guess_type(path.name)[0] or "application/octet-stream"
                files[key] = (path.name, path.read_bytes(), mime)
            else:
                data[key] = form_value(value)
        # A call started near the case's deadline gets the time left (a GPU tool may be slow).
        left = context.time_left(self.read_timeout)
        timeout = httpx2.Timeout(left, connect=min(self.connect_timeout, left))
        route = "/" + invocation.name.replace(" ", "_")
        response = self._send("POST", route, timeout, data=data, files=files or None)
        if response.status_code != 200:
            raise GtaToolError(self._error_message(invocation.name, response))
        try:
            body = response.json()
        except ValueError as exc:
            raise GtaToolError(
                f"{invocation.name}: the agentlego server answered non-JSON: {response.text[:200]}"
            ) from exc
        return self._decode(invocation, body, context)

    @staticmethod
    def _error_message(tool: str, response: httpx2.Response) -> str:
        """The server's ``detail`` (what the official harness shows), else the status and body."""
        try:
            detail = response.json().get("detail")
        except (ValueError, AttributeError):
            detail = None
        if response.status_code == 400 and isinstance(detail, str):
            return detail
        if detail is not None:
            shown = detail if isinstance(detail, str) else json.dumps(detail, ensure_ascii=False)
            return f"{tool} failed: HTTP {response.status_code}: {shown}"
        return f"{tool} failed: HTTP {response.status_code}: {response.text[:500]}"

    @staticmethod
    def _decode(invocation: ToolInvocation, body: Any, context: ToolContext) -> ToolResult:
        outputs: tuple[ToolParam, ...] = invocation.tool.outputs
        if len(outputs) > 1:
            values = list(body) if isinstance(body, list) else [body]
        else:
            values = [body]
        items = []
        for index, value in enumerate(values):
            kind = outputs[index].type if index < len(outputs) else "text"
            if kind in FILE_OUTPUT_EXTENSIONS:
                if not isinstance(value, str):
                    raise GtaToolError(
                        f"{invocation.name}: expected a base64 {kind}, got {value!r}"
                    )
                try:
                    raw = base64.b64decode(value, validate=True)
                except binascii.Error as exc:
                    raise GtaToolError(
                        f"{invocation.name}: the {kind} output is not valid base64"
                    ) from exc
                path = save_output_file(raw, invocation.name, FILE_OUTPUT_EXTENSIONS[kind], context)
                items.append(ResultItem(kind, path))
            else:
                items.append(ResultItem("text", value if isinstance(value, str) else str(value)))
        return ToolResult(tuple(items))


def make_agentlego(spec: ToolSpec, context: ToolBackendContext) -> AgentLegoBackend:
    """Entry point for ``--gta-tools=agentlego=URL``."""
    url = spec.argument or os.environ.get("GTA_AGENTLEGO_URL", "")
    if not url:
        raise GtaUsageError(
            f"{OPT_TOOLS}={spec.raw}: give the AgentLego server's URL, e.g. "
            f"{OPT_TOOLS}=agentlego=http://127.0.0.1:16180"
        )
    if not url.startswith(("http://", "https://")):
        url = "http://" + url
    where = f"{OPT_TOOLS}=agentlego" if spec.argument else "GTA_AGENTLEGO_URL"
    url = check_url(url, where, "http://127.0.0.1:16180")
    return AgentLegoBackend(url, max_reply_bytes=context.max_reply_bytes)
