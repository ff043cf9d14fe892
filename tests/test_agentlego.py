"""The ``agentlego=URL`` backend against a real local HTTP server speaking AgentLego's protocol."""

from __future__ import annotations

import base64
import dataclasses
import email.parser
import email.policy
import io
import json
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from pytest_gta.dataset import Dataset
from pytest_gta.errors import GtaInfrastructureError, GtaToolError, GtaUsageError
from pytest_gta.tools import ToolBackendContext, ToolContext, ToolInvocation, ToolSpec
from pytest_gta.types import ToolMeta, ToolParam
from tests.helpers.gta_run import FAST_SIM, SAMPLE_DATA
from tests.helpers.optional import agentlego_server, require
from tests.helpers.scripted_server import Recorded, ScriptedServer, Step
from tool_backends.agentlego import AgentLegoBackend, make_agentlego

LISTED = ["OCR", "Calculator", "TextToBbox", "CountGivenObject", "TextToImage", "MultiOut"]


def openapi(tools: list[str]) -> dict[str, Any]:
    return {"openapi": "3.1.0", "paths": {f"/{t}": {"post": {"operationId": t}} for t in tools}}


def form_fields(record: Recorded) -> dict[str, tuple[str | None, bytes]]:
    """Parse a multipart or urlencoded body into ``name -> (filename, bytes)``."""
    content_type = record.headers.get("Content-Type", "")
    if content_type.startswith("application/x-www-form-urlencoded"):
        pairs = urllib.parse.parse_qsl(record.raw.decode(), keep_blank_values=True)
        return {k: (None, v.encode()) for k, v in pairs}
    if not content_type.startswith("multipart/form-data"):
        return {}
    message = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(
        f"Content-Type: {content_type}\r\n\r\n".encode() + record.raw
    )
    fields = {}
    for part in message.iter_parts():
        name = part.get_param("name", header="content-disposition")
        fields[str(name)] = (part.get_filename(), part.get_payload(decode=True))
    return fields


def png_b64(size: tuple[int, int] = (4, 3)) -> str:
    buffer = io.BytesIO()
    Image.new("RGB", size, "red").save(buffer, format="PNG")
    return base64.b64encode(buffer.getvalue()).decode()


def route(record: Recorded) -> Step:
    """A fake AgentLego server: a few tools answering like the real one."""
    if record.method == "GET" and record.path == "/openapi.json":
        return Step(openapi(LISTED))
    fields = form_fields(record)
    if record.path == "/Calculator":
        expression = fields["expression"][1].decode()
        if expression == "1/0":
            return Step({"detail": "ZeroDivisionError('division by zero')"}, status=400)
        return Step(str(eval(expression)))  # the test's own fixed expressions
    if record.path == "/TextToBbox":
        return Step(f"(1, 2, 3, 4), score 0.9 top1={fields['top1'][1].decode()}")
    if record.path == "/CountGivenObject":
        return Step(7)
    if record.path == "/TextToImage":
        return Step(png_b64())
    if record.path == "/MultiOut":
        return Step(["first", png_b64((2, 2))])
    if record.path == "/OCR":
        return Step({"detail": "CUDA out of memory"}, status=500)
    return Step({"detail": "Not Found"}, status=404)


@pytest.fixture
def server() -> Any:
    with ScriptedServer(default=route) as running:
        yield running


def invoke(dataset: Dataset, tool: str | ToolMeta, **arguments: Any) -> ToolInvocation:
    meta = dataset.toolmeta[tool] if isinstance(tool, str) else tool
    return ToolInvocation(meta, arguments, arguments)


def test_lists_only_the_servers_tools(server: ScriptedServer) -> None:
    backend = AgentLegoBackend(server.base)
    assert backend.offers("Calculator")
    assert backend.offers("TextToImage")
    assert not backend.offers("Plot")
    assert not backend.offers("ImageStylization")
    assert backend.unreachable is None


def test_text_tool(server: ScriptedServer, dataset: Dataset, context: ToolContext) -> None:
    backend = AgentLegoBackend(server.base)
    result = backend.call(invoke(dataset, "Calculator", expression="2+3*4"), context)
    assert result.format() == "14"
    posted = server.requests[-1]
    assert posted.method == "POST"
    assert posted.path == "/Calculator"
    assert form_fields(posted) == {"expression": (None, b"2+3*4")}


def test_image_input_goes_as_a_file_and_bools_as_form_text(
    server: ScriptedServer, dataset: Dataset, context: ToolContext
) -> None:
    backend = AgentLegoBackend(server.base)
    call = invoke(dataset, "TextToBbox", image="image/image_1.jpg", text="cat", top1=False)
    result = backend.call(call, context)
    assert result.format() == "(1, 2, 3, 4), score 0.9 top1=false"
    fields = form_fields(server.requests[-1])
    expected = (dataset.root / "image" / "image_1.jpg").read_bytes()
    assert fields["image"] == ("image_1.jpg", expected)
    assert fields["text"] == (None, b"cat")


def test_a_call_near_the_cases_deadline_waits_for_the_time_left_only(
    server: ScriptedServer, dataset: Dataset, context: ToolContext
) -> None:
    """A slow GPU tool may take 600 s; a call started 1 s before the case ends gets 1 s."""
    backend = AgentLegoBackend(server.base)
    server.then(Step("14", delay=20))
    near = dataclasses.replace(context, deadline=time.monotonic() + 1)
    started = time.monotonic()
    with pytest.raises(GtaInfrastructureError, match="did not answer POST /Calculator in time"):
        backend.call(invoke(dataset, "Calculator", expression="2+3*4"), near)
    assert time.monotonic() - started < 15  # bound: catches a hang
    late = dataclasses.replace(context, deadline=time.monotonic() - 1)
    with pytest.raises(GtaToolError, match="is up: this call was not run"):
        backend.call(invoke(dataset, "Calculator", expression="2+3*4"), late)


def test_int_output_becomes_text(
    server: ScriptedServer, dataset: Dataset, context: ToolContext
) -> None:
    backend = AgentLegoBackend(server.base)
    call = invoke(
        dataset, "CountGivenObject", image=str(dataset.root / "image/image_2.jpg"), text="x"
    )
    assert backend.call(call, context).format() == "7"


def test_image_output_is_decoded_and_saved(
    server: ScriptedServer, dataset: Dataset, context: ToolContext
) -> None:
    backend = AgentLegoBackend(server.base)
    result = backend.call(invoke(dataset, "TextToImage", keywords="a red square"), context)
    (item,) = result.items
    assert item.type == "image"
    path = Path(item.content)
    assert path.is_absolute()
    assert path.parent == context.output_dir
    assert path.suffix == ".png"
    with Image.open(path) as image:
        assert image.size == (4, 3)


def test_several_outputs(server: ScriptedServer, dataset: Dataset, context: ToolContext) -> None:
    meta = ToolMeta(
        "MultiOut",
        "two outputs",
        (ToolParam("text", "x"),),
        (ToolParam("text", None), ToolParam("image", None)),
    )
    result = AgentLegoBackend(server.base).call(invoke(dataset, meta, x="1"), context)
    assert [item.type for item in result.items] == ["text", "image"]
    assert result.items[0].content == "first"
    assert Path(result.items[1].content).exists()


def test_400_detail_is_the_tool_error(
    server: ScriptedServer, dataset: Dataset, context: ToolContext
) -> None:
    backend = AgentLegoBackend(server.base)
    with pytest.raises(GtaToolError) as caught:
        backend.call(invoke(dataset, "Calculator", expression="1/0"), context)
    assert str(caught.value) == "ZeroDivisionError('division by zero')"


def test_5xx_is_a_tool_error_with_the_status(
    server: ScriptedServer, dataset: Dataset, context: ToolContext
) -> None:
    backend = AgentLegoBackend(server.base, retries=2, backoff=0)
    with pytest.raises(GtaToolError, match=r"OCR failed: HTTP 500: CUDA out of memory"):
        backend.call(invoke(dataset, "OCR", image="image/image_1.jpg"), context)
    # An HTTP answer means the tool ran: never retried.
    assert [r.path for r in server.requests].count("/OCR") == 1


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_server_down_is_an_infrastructure_error(dataset: Dataset, context: ToolContext) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    backend = AgentLegoBackend(url, backoff=0)
    assert backend.unreachable is not None
    # The GTA tools still route here so their cases end as errors, not skips.
    assert backend.offers("ImageDescription")
    assert not backend.offers("MyCustomTool")
    with pytest.raises(GtaInfrastructureError, match=rf"agentlego server at {url} is unreachable"):
        backend.call(invoke(dataset, "Calculator", expression="1+1"), context)


def test_server_dying_mid_run_is_an_infrastructure_error(
    dataset: Dataset, context: ToolContext
) -> None:
    with ScriptedServer(default=route) as server:
        backend = AgentLegoBackend(server.base, backoff=0)
    with pytest.raises(GtaInfrastructureError, match="is unreachable"):
        backend.call(invoke(dataset, "Calculator", expression="1+1"), context)


def test_connection_error_is_retried(
    server: ScriptedServer, dataset: Dataset, context: ToolContext
) -> None:
    backend = AgentLegoBackend(server.base, retries=2, backoff=0)
    server.then(Step(drop=True), Step(drop=True))
    result = backend.call(invoke(dataset, "Calculator", expression="6*7"), context)
    assert result.format() == "42"
    assert [r.path for r in server.requests].count("/Calculator") == 3


def test_retries_are_bounded(
    server: ScriptedServer, dataset: Dataset, context: ToolContext
) -> None:
    backend = AgentLegoBackend(server.base, retries=1, backoff=0)
    server.then(Step(drop=True), Step(drop=True), Step(drop=True))
    with pytest.raises(GtaInfrastructureError, match="after 2 attempts"):
        backend.call(invoke(dataset, "Calculator", expression="6*7"), context)


def test_factory(
    server: ScriptedServer,
    dataset: Dataset,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("GTA_AGENTLEGO_URL", raising=False)
    context = ToolBackendContext(dataset, tmp_path)
    backend = make_agentlego(
        ToolSpec(f"agentlego={server.base}", "agentlego", server.base), context
    )
    assert backend.offers("OCR")
    bare = server.base.removeprefix("http://")
    assert make_agentlego(ToolSpec("x", "agentlego", bare), context).offers("OCR")
    with pytest.raises(GtaUsageError, match="URL"):
        make_agentlego(ToolSpec("agentlego", "agentlego", ""), context)


@pytest.fixture(scope="module")
def real_server(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The real ``agentlego-server`` from PyPI serving Calculator, when it is installed.

    Found on PATH or through ``GTA_AGENTLEGO_SERVER`` (it can live in its own virtualenv, since
    it pins an older FastAPI than llama-cpp-python's server wants).
    """
    require("agentlego-server")
    executable = agentlego_server()
    assert executable is not None
    port = free_port()
    command = [executable, "start", "Calculator", "--host", "127.0.0.1", "--port", str(port)]
    log_path = tmp_path_factory.mktemp("agentlego") / "server.log"
    log = log_path.open("wb")  # a file, not a pipe: a full pipe would stall the server
    process = subprocess.Popen([*command, "--device", "cpu"], stdout=log, stderr=log)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                with urllib.request.urlopen(f"{url}/openapi.json", timeout=2):
                    break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"agentlego-server did not start: {log_path.read_text()[-2000:]}")
                time.sleep(0.3)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()


def test_real_agentlego_server(real_server: str, dataset: Dataset, context: ToolContext) -> None:
    backend = AgentLegoBackend(real_server)
    assert backend.offers("Calculator")
    assert not backend.offers("OCR")
    assert backend.call(invoke(dataset, "Calculator", expression="2+3*4"), context).format() == "14"
    with pytest.raises(GtaToolError) as caught:
        backend.call(invoke(dataset, "Calculator", expression="1/0"), context)
    assert str(caught.value) == "ZeroDivisionError('division by zero')"


def test_files_outside_the_dataset_are_never_uploaded(
    server: ScriptedServer, dataset: Dataset, context: ToolContext
) -> None:
    backend = AgentLegoBackend(server.base)
    listed = len(server.requests)
    for value in ("/etc/passwd", "../../etc/passwd", "image/../../outside.jpg"):
        with pytest.raises(GtaToolError, match="is not one of the task's files"):
            backend.call(invoke(dataset, "TextToBbox", image=value, text="cat"), context)
    for value in ("dataset.json", str(dataset.root / "toolmeta.json")):
        with pytest.raises(GtaToolError, match="is one of the benchmark's own files"):
            backend.call(invoke(dataset, "TextToBbox", image=value, text="cat"), context)
    assert len(server.requests) == listed
    call = invoke(dataset, "TextToBbox", image="image/image_0.jpg", text="cat", top1=True)
    backend.call(call, context)
    assert form_fields(server.requests[-1])["image"][0] == "image_0.jpg"


@pytest.mark.slow  # 2 s in a full run: slow by cost (issue 39)
def test_server_down_is_an_error_outcome_not_a_failed_score(pytester):
    port = free_port()  # nobody listens there
    result = pytester.runpytest(
        SAMPLE_DATA,
        FAST_SIM,
        "--gta-model=oracle",
        "--gta-ids=0",
        f"--gta-tools=agentlego=127.0.0.1:{port}",
        "--gta-report=r.json",
    )
    outcomes = result.parseoutcomes()
    assert outcomes.get("errors", outcomes.get("error")) == 1
    assert "failed" not in outcomes
    case = json.loads((pytester.path / "r.json").read_text())["cases"][0]
    assert case["outcome"] == "error"
    assert f"agentlego server at http://127.0.0.1:{port} is unreachable" in case["message"]


def test_remote_backends_do_not_need_pillow():
    """Pillow is in the ``tools`` extra; the remote backends use tool_backends.paths without it."""
    code = (
        "import sys\n"
        "import tool_backends.agentlego, tool_backends.api_tools, tool_backends.vlm\n"
        "print('PIL' in sys.modules)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert out.stdout == "False\n"
