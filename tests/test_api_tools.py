"""The ``api`` backend (Serper GoogleSearch, Mathpix MathOCR) against local HTTP servers."""

from __future__ import annotations

import json
import urllib.parse
from pathlib import Path
from typing import Any

import pytest

from pytest_gta.dataset import Dataset
from pytest_gta.errors import GtaInfrastructureError, GtaToolError
from pytest_gta.tools import ToolBackendContext, ToolContext, ToolInvocation, ToolSpec
from tests.helpers.scripted_server import ScriptedServer, Step
from tests.test_agentlego import form_fields
from tool_backends.api_tools import ApiBackend, format_search_results, make_api

KEYS = {
    "SERPER_API_KEY": "serper-secret",
    "MATHPIX_APP_ID": "mathpix-id",
    "MATHPIX_APP_KEY": "mathpix-secret",
}


@pytest.fixture
def server() -> Any:
    with ScriptedServer(default=Step({"organic": []})) as running:
        yield running


def backend_for(server: ScriptedServer, **env: str) -> ApiBackend:
    environ = {**KEYS, "SERPER_BASE_URL": server.base, "MATHPIX_BASE_URL": server.base, **env}
    return ApiBackend(environ, backoff=0)


def invoke(dataset: Dataset, tool: str, **arguments: Any) -> ToolInvocation:
    return ToolInvocation(dataset.toolmeta[tool], arguments, arguments)


def organic(n: int, snippet: str = "snippet") -> list[dict[str, str]]:
    return [{"title": f"Title {i}", "link": f"https://e/{i}", "snippet": snippet} for i in range(n)]


def test_search_request_is_agentlegos(
    server: ScriptedServer, dataset: Dataset, context: ToolContext
) -> None:
    server.then(Step({"organic": organic(2)}))
    result = backend_for(server).call(
        invoke(dataset, "GoogleSearch", query="eiffel tower height", k=3), context
    )
    assert result.format() == "1 - Title 0: snippet\n\n2 - Title 1: snippet\n\n"
    (request,) = server.requests
    assert request.method == "POST"
    path, _, query = request.path.partition("?")
    assert path == "/search"
    assert urllib.parse.parse_qs(query) == {"k": ["3"], "q": ["eiffel tower height"]}
    assert request.headers["X-API-KEY"] == "serper-secret"
    assert request.headers["Content-Type"] == "application/json"


def test_search_formatting_and_cut() -> None:
    body = {
        "answerBox": {"snippet": "330 m"},
        "knowledgeGraph": {"title": "Eiffel Tower", "type": "Tower", "description": "In Paris"},
        "organic": [{"title": "T", "snippet": "line\nbreak", "attributes": {"Height": "330 m"}}],
    }
    assert format_search_results(body, 10) == (
        "1 - Answer box: 330 m\n\n"
        "2 - Eiffel Tower knowledge graph: Tower. In Paris\n\n"
        "3 - T: line break(Height: 330 m)\n\n"
    )
    long = format_search_results({"organic": organic(10, "x" * 300)}, 10)
    assert len(long) == 1503
    assert long.endswith("...")
    assert format_search_results({"organic": organic(10)}, 2).count(" - ") == 2
    assert format_search_results({}, 10) == "No good Google Search Result was found"


def test_search_error_is_a_tool_error_without_the_key(
    server: ScriptedServer, dataset: Dataset, context: ToolContext
) -> None:
    server.then(Step({"message": "Unauthorized."}, status=403))
    with pytest.raises(GtaToolError) as caught:
        backend_for(server).call(invoke(dataset, "GoogleSearch", query="q"), context)
    assert str(caught.value) == "Error 403: {'message': 'Unauthorized.'}"
    assert "secret" not in str(caught.value)


def test_math_ocr_request_and_text(
    server: ScriptedServer, dataset: Dataset, context: ToolContext
) -> None:
    server.then(Step({"request_id": "r", "text": "$x^{2}=4$", "confidence": 0.99}))
    result = backend_for(server).call(
        invoke(dataset, "MathOCR", image="image/image_1.jpg"), context
    )
    assert result.format() == "$x^{2}=4$"
    (request,) = server.requests
    assert request.path == "/v3/text"
    assert request.headers["app_id"] == "mathpix-id"
    assert request.headers["app_key"] == "mathpix-secret"
    fields = form_fields(request)
    assert fields["file"] == ("image_1.jpg", (dataset.root / "image/image_1.jpg").read_bytes())
    assert json.loads(fields["options_json"][1]) == {
        "math_inline_delimiters": ["$", "$"],
        "rm_spaces": True,
    }


def test_math_ocr_error(server: ScriptedServer, dataset: Dataset, context: ToolContext) -> None:
    server.then(Step({"error": "Image not found", "error_info": {}}))
    with pytest.raises(GtaToolError, match="Mathpix error: Image not found"):
        backend_for(server).call(invoke(dataset, "MathOCR", image="image/image_1.jpg"), context)


def test_missing_keys_are_not_offered_with_a_reason(server: ScriptedServer) -> None:
    backend = backend_for(server, SERPER_API_KEY="", MATHPIX_APP_KEY="")
    assert not backend.offers("GoogleSearch")
    assert not backend.offers("MathOCR")
    assert not backend.offers("OCR")
    assert backend.unavailable_reason("GoogleSearch") == (
        "GoogleSearch needs SERPER_API_KEY set in the environment (api backend)"
    )
    reason = backend.unavailable_reason("MathOCR")
    assert reason is not None
    assert "MATHPIX_APP_KEY" in reason
    assert "MATHPIX_APP_ID" not in reason
    assert backend.unavailable_reason("OCR") is None
    full = backend_for(server)
    assert full.offers("GoogleSearch")
    assert full.offers("MathOCR")
    assert full.unavailable_reason("GoogleSearch") is None


def test_service_down_is_infrastructure(dataset: Dataset, context: ToolContext) -> None:
    with ScriptedServer() as server:
        backend = backend_for(server)
    with pytest.raises(GtaInfrastructureError, match=r"Serper at .* is unreachable") as caught:
        backend.call(invoke(dataset, "GoogleSearch", query="q"), context)
    assert "secret" not in str(caught.value)


def test_factory_reads_the_environment(
    dataset: Dataset, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in [*KEYS, "SERPER_BASE_URL", "MATHPIX_BASE_URL"]:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("SERPER_API_KEY", "k")
    backend = make_api(ToolSpec("api", "api"), ToolBackendContext(dataset, tmp_path))
    assert backend.offers("GoogleSearch")
    assert not backend.offers("MathOCR")
    assert backend.serper_url == "https://google.serper.dev"
