"""The ``vlm`` backend through the real openai SDK against a local OpenAI-compatible server."""

from __future__ import annotations

import base64
import io
from pathlib import Path
from typing import Any

import openai
import pytest
from PIL import Image

from pytest_gta.dataset import Dataset
from pytest_gta.errors import GtaInfrastructureError, GtaToolError, GtaUsageError
from pytest_gta.tools import ToolBackendContext, ToolContext, ToolInvocation, ToolSpec
from tests.helpers.scripted_server import Recorded, ScriptedServer, Step, chat_completion
from tests.test_agentlego import form_fields
from tool_backends.vlm import VlmBackend, format_boxes, make_vlm, parse_bbox, parse_count

IMAGE = "image/image_1.jpg"


def png_b64(size: tuple[int, int] = (5, 6)) -> str:
    buffer = io.BytesIO()
    Image.new("RGB", size, "blue").save(buffer, format="PNG")
    return base64.b64encode(buffer.getvalue()).decode()


def route(record: Recorded) -> Step:
    if record.path.endswith(("/images/generations", "/images/edits")):
        return Step({"created": 0, "data": [{"b64_json": png_b64()}]})
    return Step(chat_completion("A cat on a mat."))


@pytest.fixture
def server() -> Any:
    with ScriptedServer(default=route) as running:
        yield running


@pytest.fixture
def backend(server: ScriptedServer) -> Any:
    client = openai.OpenAI(api_key="test", base_url=server.url, max_retries=0)
    yield VlmBackend(client, "vision-model")
    client.close()


def invoke(dataset: Dataset, tool: str, **arguments: Any) -> ToolInvocation:
    return ToolInvocation(dataset.toolmeta[tool], arguments, arguments)


def sent(server: ScriptedServer) -> tuple[str, bytes]:
    """The prompt and the decoded image bytes of the last chat request."""
    body = server.posted()[-1]
    (message,) = body["messages"]
    parts = {part["type"]: part for part in message["content"]}
    url = parts["image_url"]["image_url"]["url"]
    header, _, encoded = url.partition(",")
    assert header.startswith("data:image/")
    assert header.endswith(";base64")
    return parts["text"]["text"], base64.b64decode(encoded)


def test_image_description_sends_the_image(
    server: ScriptedServer, backend: VlmBackend, dataset: Dataset, context: ToolContext
) -> None:
    result = backend.call(invoke(dataset, "ImageDescription", image=IMAGE), context)
    assert result.format() == "A cat on a mat."
    prompt, image = sent(server)
    assert prompt == "Describe the image in detail"
    assert image == (dataset.root / IMAGE).read_bytes()
    assert server.posted()[-1]["model"] == "vision-model"


def test_region_description_crops_the_box(
    server: ScriptedServer, backend: VlmBackend, dataset: Dataset, context: ToolContext
) -> None:
    call = invoke(
        dataset,
        "RegionAttributeDescription",
        image=IMAGE,
        bbox="(10, 20, 50, 45)",
        attribute="colour of the car",
    )
    backend.call(call, context)
    prompt, image = sent(server)
    assert prompt == "Describe colour of the car on the image in detail"
    with Image.open(io.BytesIO(image)) as cropped:
        assert cropped.size == (40, 25)
    with Image.open(dataset.root / IMAGE) as original:
        assert original.size[0] > 40
        assert original.size[1] > 25


def test_region_description_rejects_a_bad_box(
    backend: VlmBackend, dataset: Dataset, context: ToolContext
) -> None:
    call = invoke(
        dataset, "RegionAttributeDescription", image=IMAGE, bbox="(1, 2, 3)", attribute="x"
    )
    with pytest.raises(GtaToolError, match="bbox"):
        backend.call(call, context)


def test_count(
    server: ScriptedServer, backend: VlmBackend, dataset: Dataset, context: ToolContext
) -> None:
    server.then(Step(chat_completion("There are 3 apples.")))
    result = backend.call(invoke(dataset, "CountGivenObject", image=IMAGE, text="apple"), context)
    assert result.format() == "3"
    prompt, image = sent(server)
    assert prompt == "How many apple are in the image? Reply a digit"
    assert image == (dataset.root / IMAGE).read_bytes()
    server.then(Step(chat_completion("I cannot tell.")))
    with pytest.raises(GtaToolError, match="cannot read a number"):
        backend.call(invoke(dataset, "CountGivenObject", image=IMAGE, text="apple"), context)


def test_parse_count() -> None:
    assert parse_count("7") == 7
    assert parse_count("Two.") == 2
    assert parse_count("There are 12 cars and 3 trucks") == 12
    with pytest.raises(GtaToolError):
        parse_count("none visible... or some")


def test_text_to_bbox(
    server: ScriptedServer, backend: VlmBackend, dataset: Dataset, context: ToolContext
) -> None:
    reply = '```json\n[{"bbox": [1.2, 2, 30, 40], "score": 0.876}, {"bbox": [5, 5, 9, 9]}]\n```'
    server.then(Step(chat_completion(reply)), Step(chat_completion(reply)))
    top1 = backend.call(invoke(dataset, "TextToBbox", image=IMAGE, text="cat"), context)
    assert top1.format() == "(1, 2, 30, 40), score 0.88"
    prompt, _ = sent(server)
    assert prompt.startswith("Find every cat in the image. The image is ")
    every = backend.call(
        invoke(dataset, "TextToBbox", image=IMAGE, text="cat", top1=False), context
    )
    assert every.format() == "(1, 2, 30, 40), score 0.88\n(5, 5, 9, 9), score 1.0"


def test_format_boxes() -> None:
    assert format_boxes("[]", 10, 10, True) == "No object found."
    assert format_boxes('[{"bbox": [-5, 0, 50, 8], "score": 0.5}]', 20, 10, True) == (
        "(0, 0, 20, 8), score 0.5"
    )
    with pytest.raises(GtaToolError):
        format_boxes("no boxes here", 10, 10, True)
    assert parse_bbox("(1, 2.6, 3, 4)") == (1, 3, 3, 4)


def test_text_to_image_is_saved(
    server: ScriptedServer, backend: VlmBackend, dataset: Dataset, context: ToolContext
) -> None:
    result = backend.call(invoke(dataset, "TextToImage", keywords="a blue square"), context)
    (item,) = result.items
    assert item.type == "image"
    assert Path(item.content).parent == context.output_dir
    with Image.open(item.content) as image:
        assert image.size == (5, 6)
    body = server.posted()[-1]
    assert body["prompt"] == "a blue square"
    assert body["model"] == "gpt-image-1"


def test_image_stylization_uploads_the_image(
    server: ScriptedServer, backend: VlmBackend, dataset: Dataset, context: ToolContext
) -> None:
    call = invoke(dataset, "ImageStylization", image=IMAGE, instruction="make it a sketch")
    result = backend.call(call, context)
    assert Path(result.items[0].content).exists()
    request = server.requests[-1]
    assert request.path.endswith("/images/edits")
    fields = form_fields(request)
    assert fields["image"][1] == (dataset.root / IMAGE).read_bytes()
    assert fields["prompt"][1] == b"make it a sketch"


def test_endpoint_errors(
    server: ScriptedServer, backend: VlmBackend, dataset: Dataset, context: ToolContext
) -> None:
    server.then(Step({"error": {"message": "content policy"}}, status=400))
    with pytest.raises(GtaToolError, match="content policy"):
        backend.call(invoke(dataset, "TextToImage", keywords="x"), context)
    server.then(Step({"error": {"message": "bad key"}}, status=401))
    with pytest.raises(GtaInfrastructureError):
        backend.call(invoke(dataset, "ImageDescription", image=IMAGE), context)


def test_endpoint_down(dataset: Dataset, context: ToolContext) -> None:
    with ScriptedServer() as server:
        url = server.url
    client = openai.OpenAI(api_key="test", base_url=url, max_retries=0)
    with pytest.raises(GtaInfrastructureError, match="unreachable"):
        VlmBackend(client, "m").call(invoke(dataset, "ImageDescription", image=IMAGE), context)
    client.close()


def test_factory(
    server: ScriptedServer, dataset: Dataset, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    context = ToolBackendContext(dataset, tmp_path)
    for name in ("GTA_VLM_BASE_URL", "OPENAI_BASE_URL", "OPENAI_API_KEY", "GTA_VLM_IMAGE_MODEL"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(GtaUsageError, match="OPENAI_API_KEY"):
        make_vlm(ToolSpec("vlm=openai/m", "vlm", "openai/m"), context)
    with pytest.raises(GtaUsageError, match="name the vision model"):
        make_vlm(ToolSpec("vlm", "vlm", ""), context)
    monkeypatch.setenv("GTA_VLM_BASE_URL", server.url)
    monkeypatch.setenv("GTA_VLM_IMAGE_MODEL", "none")
    backend = make_vlm(ToolSpec("vlm=openai/m", "vlm", "openai/m"), context)
    assert backend.model == "m"
    assert backend.offers("ImageDescription")
    assert not backend.offers("TextToImage")
    assert not backend.offers("OCR")
    backend.client.close()
