"""``api``: the two GTA tools that the official deployment runs on paid web APIs.

GoogleSearch calls Serper (``SERPER_API_KEY``) and MathOCR calls Mathpix (``MATHPIX_APP_ID`` and
``MATHPIX_APP_KEY``), sending the same requests and formatting the answers the same way as
AgentLego's ``GoogleSearch`` and ``MathOCR`` tools, which produced the published numbers. A tool
whose keys are missing is not offered, and :meth:`ApiBackend.unavailable_reason` names the
missing variables so the skipped case says what to set. Keys go only into request headers: never
into a message, a log line or a recorded cassette.

``SERPER_BASE_URL`` and ``MATHPIX_BASE_URL`` point the requests elsewhere (a proxy, or a local
server in tests).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

import httpx2

from pytest_gta.errors import GtaToolError
from pytest_gta.models.generation import DEFAULT_MAX_REPLY_BYTES
from pytest_gta.tools import (
    BaseToolBackend,
    ToolBackendContext,
    ToolContext,
    ToolInvocation,
    ToolSpec,
)
from pytest_gta.types import ToolResult
from pytest_gta.urls import check_url
from tool_backends.http_client import request_with_retries
from tool_backends.paths import resolve_image

#: Tool -> the environment variables it needs.
API_TOOLS: dict[str, tuple[str, ...]] = {
    "GoogleSearch": ("SERPER_API_KEY",),
    "MathOCR": ("MATHPIX_APP_ID", "MATHPIX_APP_KEY"),
}
SERPER_BASE_URL = "https://google.serper.dev"
MATHPIX_BASE_URL = "https://api.mathpix.com"
#: AgentLego's ``GoogleSearch(max_out_len=1500)``.
MAX_SEARCH_CHARS = 1500
#: The options AgentLego's ``MathOCR`` sends with every image.
MATHPIX_OPTIONS = {"math_inline_delimiters": ["$", "$"], "rm_spaces": True}


def format_search_results(results: Mapping[str, Any], k: int) -> str:
    """Serper's JSON as AgentLego's ``GoogleSearch._parse_results`` renders it.

    An answer box and a knowledge graph come first when present, then the first ``k`` organic
    results as ``title: snippet``; each becomes a ``N - text`` block followed by a blank line,
    and the whole is cut at 1500 characters with ``...`` appended.
    """
    snippets = []
    answer_box = results.get("answerBox") or {}
    if answer_box:
        content = "Answer box: "
        for key in ("answer", "snippet", "snippetHighlighted"):
            if answer_box.get(key):
                content += str(answer_box[key])
                break
        snippets.append(content)
    graph = results.get("knowledgeGraph") or {}
    if graph:
        content = "Knowledge graph: "
        if graph.get("title"):
            content = f"{graph['title']} knowledge graph: "
        if graph.get("type"):
            content += f"{graph['type']}. "
        if graph.get("description"):
            content += str(graph["description"])
        if graph.get("attributes"):
            attributes = ", ".join(f"{a}: {v}" for a, v in graph["attributes"].items())
            content += f"({attributes})"
        snippets.append(content)
    for item in list(results.get("organic") or [])[:k]:
        content = ""
        if item.get("title"):
            content += f"{item['title']}: "
        if item.get("snippet"):
            content += str(item["snippet"])
        if item.get("attributes"):
            attributes = ", ".join(f"{a}: {v}" for a, v in item["attributes"].items())
            content += f"({attributes})"
        snippets.append(content)
    if not snippets:
        return "No good Google Search Result was found"
    text = "".join(
        f"{i} - {snippet.strip().replace(chr(10), ' ')}\n\n"
        for i, snippet in enumerate(snippets, 1)
    )
    if len(text) > MAX_SEARCH_CHARS:
        text = text[:MAX_SEARCH_CHARS] + "..."
    return text


class ApiBackend(BaseToolBackend):
    """Serves GoogleSearch and MathOCR when their API keys are set."""

    name = "api"

    def __init__(
        self,
        environ: Mapping[str, str] | None = None,
        *,
        timeout: float = 60.0,
        retries: int = 2,
        backoff: float = 0.5,
        max_reply_bytes: int = DEFAULT_MAX_REPLY_BYTES,
    ) -> None:
        """Read keys and base URLs once, from ``environ`` (default: ``os.environ``).

        Args:
            environ: Where the keys and base URLs are read from.
            timeout: Seconds per request.
            retries: Extra attempts after a connection error (an HTTP answer is never retried).
            backoff: Seconds before the first retry, doubled for each further one.
            max_reply_bytes: Bytes of one answer read at most (``--gta-max-reply-bytes``).

        Raises:
            GtaUsageError: ``SERPER_BASE_URL`` or ``MATHPIX_BASE_URL`` is not an http(s) URL.
        """
        env = dict(os.environ if environ is None else environ)
        self._keys = {name: env.get(name, "") for names in API_TOOLS.values() for name in names}
        serper = env.get("SERPER_BASE_URL", SERPER_BASE_URL)
        mathpix = env.get("MATHPIX_BASE_URL", MATHPIX_BASE_URL)
        self.serper_url = check_url(serper, "SERPER_BASE_URL", SERPER_BASE_URL).rstrip("/")
        self.mathpix_url = check_url(mathpix, "MATHPIX_BASE_URL", MATHPIX_BASE_URL).rstrip("/")
        self.max_reply_bytes = max_reply_bytes
        self.timeout = timeout
        self.retries = retries
        self.backoff = backoff

    def _missing(self, tool: str) -> list[str]:
        return [name for name in API_TOOLS.get(tool, ()) if not self._keys.get(name)]

    def offers(self, tool: str) -> bool:
        """Whether ``tool`` is one of ours and its keys are set."""
        return tool in API_TOOLS and not self._missing(tool)

    def unavailable_reason(self, tool: str) -> str | None:
        """Why ``tool`` is not offered though it is one of ours: the unset variables."""
        missing = self._missing(tool)
        if tool not in API_TOOLS or not missing:
            return None
        return f"{tool} needs {' and '.join(missing)} set in the environment (api backend)"

    def call(self, invocation: ToolInvocation, context: ToolContext) -> ToolResult:
        """Run GoogleSearch or MathOCR."""
        if invocation.name == "GoogleSearch":
            return ToolResult.text(self._search(invocation, context))
        if invocation.name == "MathOCR":
            return ToolResult.text(self._math_ocr(invocation, context))
        raise GtaToolError(f"the api backend does not serve {invocation.name}")

    def _post(self, service: str, url: str, context: ToolContext, **kwargs: Any) -> httpx2.Response:
        """POST with retries on connection errors; a service out of reach is infrastructure.

        Each attempt gets :attr:`timeout`, or the time left before the case's deadline.
        """
        return request_with_retries(
            "POST",
            url,
            service=f"{service} at {url}",
            what="POST",
            timeout=context.time_left(self.timeout),
            retries=self.retries,
            backoff=self.backoff,
            show_errors=False,
            max_reply_bytes=self.max_reply_bytes,
            **kwargs,
        )

    def _search(self, invocation: ToolInvocation, context: ToolContext) -> str:
        """AgentLego's request: ``POST /search?k=K&q=QUERY`` with ``X-API-KEY``.

        ``k`` is sent as AgentLego sends it and also cuts the organic results locally.
        """
        query = str(invocation.converted["query"])
        k = int(invocation.converted.get("k", 10))
        response = self._post(
            "Serper",
            f"{self.serper_url}/search",
            context,
            params={"k": k, "q": query},
            headers={
                "X-API-KEY": self._keys["SERPER_API_KEY"],
                "Content-Type": "application/json",
            },
        )
        try:
            body = response.json()
        except ValueError:
            body = response.text[:500]
        if response.status_code != 200:
            # AgentLego raises ConnectionError(f'Error {status_code}: {results}').
            raise GtaToolError(f"Error {response.status_code}: {body}")
        if not isinstance(body, Mapping):
            raise GtaToolError(f"Serper answered an unexpected body: {str(body)[:200]}")
        return format_search_results(body, k)

    def _math_ocr(self, invocation: ToolInvocation, context: ToolContext) -> str:
        """AgentLego's request: the image as a multipart ``file`` plus ``options_json``.

        AgentLego returns the whole response body; we return its ``text`` field (the LaTeX),
        which is what a model needs and what the recorded GTA outputs look like.
        """
        path = resolve_image(str(invocation.converted["image"]), context)
        response = self._post(
            "Mathpix",
            f"{self.mathpix_url}/v3/text",
            context,
            files={"file": (path.name, path.read_bytes(), "application/octet-stream")},
            data={"options_json": json.dumps(MATHPIX_OPTIONS)},
            headers={
                "app_id": self._keys["MATHPIX_APP_ID"],
                "app_key": self._keys["MATHPIX_APP_KEY"],
            },
        )
        try:
            body = response.json()
        except ValueError:
            body = None
        if response.status_code != 200 or not isinstance(body, Mapping):
            raise GtaToolError(f"Mathpix error {response.status_code}: {response.text[:500]}")
        if body.get("error"):
            raise GtaToolError(f"Mathpix error: {body['error']}")
        return str(body.get("text", ""))


def make_api(spec: ToolSpec, context: ToolBackendContext) -> ApiBackend:
    """Entry point for ``--gta-tools=api``."""
    return ApiBackend(max_reply_bytes=context.max_reply_bytes)
