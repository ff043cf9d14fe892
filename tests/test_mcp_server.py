"""GTA's tools over MCP (pytest_gta.mcp): a real ``mcp.Client`` against the real server.

Everything runs on 127.0.0.1 with the bundled sample and real backends (``replay``, ``local``);
the module entry point and the stdio transport run as real subprocesses.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx2 as httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pytest_gta.dataset import Dataset
from pytest_gta.errors import GtaInfrastructureError
from pytest_gta.mcp.calls import MAX_ARGUMENT_CHARS, CallLimitReached, CaseTools
from pytest_gta.tools import ToolBackendContext, ToolSet, ToolSpec, make_backend
from pytest_gta.vocabulary import INVALID_ACTION
from tests.helpers.optional import require

require("mcp")
import mcp  # noqa: E402
from mcp.client.stdio import StdioServerParameters  # noqa: E402

from pytest_gta.mcp.gateway import McpGateway  # noqa: E402

TIMEOUT = 60


def toolset(dataset: Dataset, tmp_path: Path, *names: str) -> ToolSet:
    context = ToolBackendContext(dataset, tmp_path)
    return ToolSet([make_backend(ToolSpec(name, name), context) for name in names])


def case_tools(
    dataset: Dataset, tmp_path: Path, qid: str, *backends: str, max_calls: int = 20
) -> CaseTools:
    tools = toolset(dataset, tmp_path, *(backends or ("replay",)))
    return CaseTools(
        dataset, dataset.queries[qid], tools, tmp_path / f"out-{qid}", max_calls=max_calls
    )


def image(dataset: Dataset, name: str) -> str:
    return str(dataset.root / "image" / name)


async def session(url: str, calls: list[tuple[str, Any]]) -> tuple[list[Any], list[Any]]:
    """List the tools at ``url`` and make ``calls`` in order with a real MCP client."""
    async with mcp.Client(url) as client:
        listed = (await client.list_tools()).tools
        results = [await client.call_tool(name, arguments) for name, arguments in calls]
    return listed, results


def run_session(url: str, calls: list[tuple[str, Any]]) -> tuple[list[Any], list[Any]]:
    return asyncio.run(asyncio.wait_for(session(url, calls), TIMEOUT))


def texts(result: Any) -> list[str]:
    return [c.text for c in result.content if c.type == "text"]


@pytest.fixture
def gateway():
    with McpGateway() as gw:
        yield gw


# -- listing and calling --------------------------------------------------------------------------


def test_lists_the_case_tools_with_schemas(gateway, sample_dataset, tmp_path):
    endpoint = gateway.open(case_tools(sample_dataset, tmp_path, "3"))
    listed, _ = run_session(endpoint.url, [])
    assert [t.name for t in listed] == ["CountGivenObject", "OCR", "Calculator"]
    by_name = {t.name: t for t in listed}
    assert by_name["OCR"].description == sample_dataset.toolmeta["OCR"].description
    assert by_name["OCR"].input_schema == {
        "type": "object",
        "properties": {
            "image": {"type": "string", "description": "(absolute path of the image file)"}
        },
        "required": ["image"],
    }
    count = by_name["CountGivenObject"].input_schema
    assert count["required"] == ["image", "text"]
    assert count["properties"]["text"]["type"] == "string"
    assert endpoint.tools.backends == {
        "CountGivenObject": "replay",
        "OCR": "replay",
        "Calculator": "replay",
    }


def test_all_tools_serves_every_tool_of_toolmeta(sample_dataset, tmp_path):
    tools = CaseTools(
        sample_dataset,
        sample_dataset.queries["0"],
        toolset(sample_dataset, tmp_path, "replay"),
        tmp_path,
        max_calls=5,
        all_tools=True,
    )
    assert len(tools.metas) == len(sample_dataset.toolmeta) == 14
    schemas = {s["name"]: s["inputSchema"] for s in tools.schemas()}
    assert schemas["GoogleSearch"]["properties"]["k"]["type"] == "integer"


@pytest.mark.slow  # 3 s in a full run: slow by cost (issue 39)
def test_replay_calls_and_their_official_records(gateway, sample_dataset, tmp_path):
    endpoint = gateway.open(case_tools(sample_dataset, tmp_path, "0"))
    receipt = image(sample_dataset, "image_0.jpg")
    calls = [
        ("OCR", {"image": receipt}),
        ("Calculator", {"expression": "1.29+3.45+4.50"}),
        ("Calculator", {"expression": "1+1", "precision": 2}),  # an unknown argument
        ("Calculator", {}),  # a missing one
        ("OCR", {"image": "/no/such/receipt.jpg"}),
        ("OCR", {"image": "/etc/passwd"}),  # exists, but outside what a tool may read
        ("Translate", {"text": "hi"}),  # a tool this case does not have
    ]
    _, results = run_session(endpoint.url, calls)
    assert [r.is_error for r in results] == [False, False, True, True, True, True, True]
    assert "FRESHMART" in texts(results[0])[0]
    assert texts(results[1]) == ["9.24"]
    assert texts(results[2]) == ["unknown arguments: {'precision'}"]
    assert texts(results[3]) == ["missing required arguments: {'expression'}"]
    assert texts(results[4]) == ["FileNotFoundError(\"No such file: '/no/such/receipt.jpg'\")"]
    assert texts(results[5]) == ["FileNotFoundError(\"No such file: '/etc/passwd'\")"]
    assert texts(results[6]) == [
        "The action is invalid, please check the action name. Unknown tool: Translate"
    ]

    log = endpoint.tools.log()
    assert [c.name for c in log] == [name for name, _ in calls]
    entries = [c.to_json() for c in log]
    assert set(entries[0]) == {"name", "arguments", "output", "error", "duration"}
    assert entries[1]["arguments"] == {"expression": "1.29+3.45+4.50"}
    assert entries[1]["output"] == [{"type": "text", "content": "9.24"}]
    assert entries[1]["error"] is None
    assert all(0 <= e["duration"] < TIMEOUT for e in entries)  # bound: within the call timeout
    assert [e["error"]["type"] for e in entries[2:]] == [
        "ARGS_ERROR",
        "ARGS_ERROR",
        "API_ERROR",
        "API_ERROR",
        "API_ERROR",
    ]
    assert log[6].record.type == INVALID_ACTION  # the official invalid-action record
    predictions = endpoint.tools.predictions()
    assert predictions[2] == {
        "role": "assistant",
        "tool_calls": [
            {
                "type": "function",
                "function": {"name": "Calculator", "arguments": {"expression": "1.29+3.45+4.50"}},
            }
        ],
    }
    assert predictions[3] == {"role": "tool", "content": [{"type": "text", "content": "9.24"}]}
    assert predictions[4]["error"] == {
        "type": "ARGS_ERROR",
        "msg": "unknown arguments: {'precision'}",
    }
    assert len(predictions) == 2 * len(calls)


def test_drawbox_returns_a_path_and_the_image_and_takes_the_path_back(
    gateway, sample_dataset, tmp_path
):
    require("pillow")
    endpoint = gateway.open(case_tools(sample_dataset, tmp_path, "11", "local", "replay"))
    assert endpoint.tools.backends["DrawBox"] == "local"
    balls = image(sample_dataset, "image_5.jpg")
    first = ("DrawBox", {"image": balls, "bbox": "(688, 256, 752, 320)", "annotation": "green"})
    _, (result,) = run_session(endpoint.url, [first])
    assert not result.is_error
    (text,) = texts(result)
    match = re.fullmatch(r"\[image\]\((.+)\)", text)
    assert match, text
    drawn = Path(match.group(1))
    assert drawn.is_absolute()
    assert drawn.is_file()
    (picture,) = [c for c in result.content if c.type == "image"]
    assert base64.b64decode(picture.data) == drawn.read_bytes()
    assert picture.mime_type in ("image/png", "image/jpeg")

    second = (
        "DrawBox",
        {"image": str(drawn), "bbox": "(59, 387, 125, 453)", "annotation": "green"},
    )
    _, (again,) = run_session(endpoint.url, [second])
    assert not again.is_error, texts(again)
    assert [c.record.state for c in endpoint.tools.log()] == ["SUCCESS", "SUCCESS"]


# -- isolation, limits, shutdown ------------------------------------------------------------------


def test_a_wrong_secret_and_a_closed_case_are_refused(gateway, sample_dataset, tmp_path):
    endpoint = gateway.open(case_tools(sample_dataset, tmp_path, "0"))
    base = endpoint.url.rsplit("/", 2)[0]
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    for url in (f"{base}/not-the-secret/mcp", f"{base}/mcp", f"{base}/"):
        assert httpx.post(url, json=body).status_code == 404
    run_session(endpoint.url, [("Calculator", {"expression": "1+1"})])
    endpoint.close()
    assert httpx.post(endpoint.url, json=body).status_code == 404
    # The SDK wraps its error in task groups (an ExceptionGroup on Python 3.11+).
    with pytest.raises(Exception, match=r"unhandled errors|Not Found") as refused:
        run_session(endpoint.url, [("Calculator", {"expression": "2+2"})])
    assert "Not Found" in repr(refused.value)
    assert len(endpoint.tools.log()) == 1
    endpoint.close()  # idempotent


@pytest.mark.slow  # 2 s in a full run: slow by cost (issue 39)
def test_concurrent_cases_never_mix_their_calls(gateway, sample_dataset, tmp_path):
    endpoints = [
        gateway.open(case_tools(sample_dataset, tmp_path / str(i), "0", "local")) for i in range(8)
    ]
    errors: list[BaseException] = []

    def agent(i: int) -> None:
        try:
            run_session(
                endpoints[i].url,
                [("Calculator", {"expression": f"{i}*1000+{n}"}) for n in range(5)],
            )
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=agent, args=(i,)) for i in range(len(endpoints))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(TIMEOUT)
    assert not errors
    for i, endpoint in enumerate(endpoints):
        log = endpoint.tools.log()
        assert [c.arguments["expression"] for c in log] == [f"{i}*1000+{n}" for n in range(5)]
        assert [c.record.result[0].content for c in log] == [str(i * 1000 + n) for n in range(5)]


def test_the_call_limit_ends_the_calls(gateway, sample_dataset, tmp_path):
    endpoint = gateway.open(
        case_tools(sample_dataset, tmp_path, "0", "local", "replay", max_calls=2)
    )
    calls = [("Calculator", {"expression": f"{n}+1"}) for n in range(4)]
    _, results = run_session(endpoint.url, calls)
    assert [r.is_error for r in results] == [False, False, True, True]
    assert "limit of 2 tool calls" in texts(results[2])[0]
    assert len(endpoint.tools.log()) == 2
    with pytest.raises(CallLimitReached):
        endpoint.tools.call("Calculator", {"expression": "1"})


class DownBackend:
    """A backend whose server is unreachable: not the agent's mistake, the case must error."""

    name = "down"

    def offers(self, tool: str) -> bool:
        return True

    def call(self, invocation: Any, context: Any) -> Any:
        raise GtaInfrastructureError("the tool server at http://127.0.0.1:9 refused the connection")


def test_a_backend_that_is_down_is_the_case_failure_not_a_logged_call(
    gateway, sample_dataset, tmp_path
):
    tools = CaseTools(
        sample_dataset, sample_dataset.queries["0"], ToolSet([DownBackend()]), tmp_path, max_calls=5
    )
    endpoint = gateway.open(tools)
    _, (result,) = run_session(endpoint.url, [("Calculator", {"expression": "1+1"})])
    assert result.is_error
    assert "the tool backend failed" in texts(result)[0]
    assert isinstance(tools.failure, GtaInfrastructureError)
    assert tools.log() == []
    with pytest.raises(GtaInfrastructureError):
        tools.call("Calculator", {"expression": "1+1"})


def test_closing_the_gateway_leaves_no_thread_or_socket(sample_dataset, tmp_path):
    before = set(threading.enumerate())
    gateway = McpGateway()
    endpoint = gateway.open(case_tools(sample_dataset, tmp_path, "0"))
    run_session(endpoint.url, [("Calculator", {"expression": "1+1"})])
    port = gateway.port
    gateway.close()
    gateway.close()
    assert set(threading.enumerate()) <= before
    with pytest.raises(httpx.ConnectError):
        httpx.post(endpoint.url, json={})
    assert port


# -- hostile arguments ----------------------------------------------------------------------------

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=20,
)
HOSTILE = st.one_of(
    JSON,
    st.dictionaries(st.sampled_from(["expression", "x", ""]), JSON, max_size=3),
    st.builds(lambda n: {"expression": 10**n}, st.integers(4300, 6000)),
    st.builds(lambda n: {"expression": "\ud800" * n}, st.integers(1, 3)),
    st.builds(lambda d: {"expression": json.loads("[" * d + "]" * d)}, st.integers(60, 900)),
    st.just({"expression": "1" * (MAX_ARGUMENT_CHARS + 1)}),
    st.just(object()),
    st.just({1: 2, (3,): "tuple key"}),
)


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(arguments=HOSTILE)
def test_hostile_arguments_end_as_logged_records(sample_dataset, tmp_path, arguments):
    tools = case_tools(sample_dataset, tmp_path, "0", max_calls=10)
    logged = tools.call("Calculator", arguments)
    assert tools.log() == [logged]
    entry = logged.to_json()
    json.dumps(entry, ensure_ascii=False, allow_nan=False).encode("utf-8")  # writable as it is
    if logged.record.state == "SUCCESS":
        assert isinstance(arguments, dict)
        assert set(arguments) == {"expression"}
    else:
        assert entry["error"]["type"] in ("ARGS_ERROR", "API_ERROR")
        assert len(entry["error"]["msg"]) < 2000


@settings(
    max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(name=st.text(max_size=300) | st.just("x" * 100_000) | st.just("\ud800Calculator"))
def test_hostile_tool_names_are_invalid_actions(sample_dataset, tmp_path, name):
    tools = case_tools(sample_dataset, tmp_path, "0")
    logged = tools.call(name, {"expression": "1+1"})
    json.dumps(logged.to_json(), ensure_ascii=False).encode("utf-8")
    assert len(logged.name) <= 210
    if name not in ("OCR", "Calculator", "OCR.run", "Calculator.run"):
        assert logged.record.state == "API_ERROR"


def test_hostile_arguments_over_mcp_are_error_results(gateway, sample_dataset, tmp_path):
    endpoint = gateway.open(case_tools(sample_dataset, tmp_path, "0"))
    nested: Any = "1"
    for _ in range(100):  # deeper than any GTA input (jsonsafe.MAX_DEPTH), within JSON parsers'
        nested = [nested]
    calls = [
        ("Calculator", {"expression": nested}),
        ("Calculator", {"expression": "x" * 2_000_000}),
        ("FinishAction", {"text": "the answer"}),  # a built-in action is no tool
    ]
    _, results = run_session(endpoint.url, calls)
    assert all(r.is_error for r in results)
    log = endpoint.tools.log()
    assert [c.record.state for c in log[:2]] == ["ARGS_ERROR", "ARGS_ERROR"]
    assert all("invalid json format" in c.record.errmsg for c in log[:2])
    assert len(log[1].record.errmsg) < 1000
    assert len(json.dumps(log[1].to_json())) < 2000  # the log keeps a placeholder, not 2 MB
    assert log[2].record.type == INVALID_ACTION


@pytest.mark.parametrize(
    "arguments",
    [
        "9" * 5000,  # past Python's int digits
        "[" * 5000 + "]" * 5000,  # past every parser's nesting
        '"\\ud800"',  # a lone surrogate
        "[1, 2]",  # not an object
        '"text"',
    ],
)
def test_a_malformed_request_is_a_protocol_error_and_the_server_lives(
    gateway, sample_dataset, tmp_path, arguments
):
    """What the SDK refuses before a tool is named is no call: a JSON-RPC error, nothing logged."""
    endpoint = gateway.open(case_tools(sample_dataset, tmp_path, "0"))
    body = (
        '{"jsonrpc": "2.0", "id": 1, "method": "tools/call", '
        f'"params": {{"name": "Calculator", "arguments": {{"expression": {arguments}}}}}}}'
    )
    if not arguments.startswith(("9", "[" * 2, '"\\')):
        body = body.replace(f'{{"expression": {arguments}}}', arguments)
    headers = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
    reply = httpx.post(endpoint.url, content=body, headers=headers, timeout=TIMEOUT)
    assert reply.status_code in (200, 400)
    assert "error" in reply.json()
    assert endpoint.tools.log() == []
    _, (result,) = run_session(endpoint.url, [("Calculator", {"expression": "1.29+3.45+4.50"})])
    assert texts(result) == ["9.24"]


def test_calls_import_no_mcp_sdk():
    code = (
        "import sys, pytest_gta.mcp.calls; "
        "assert not {'mcp', 'uvicorn', 'starlette'} & set(sys.modules), sorted(sys.modules)"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=TIMEOUT)


# -- the command: python -m pytest_gta.mcp --------------------------------------------------------

SERVE = [sys.executable, "-m", "pytest_gta.mcp", "--gta-data=sample", "-p", "no:cacheprovider"]
URL = re.compile(r"(http://127\.0\.0\.1:\d+/[\w-]+/mcp)")


def serve(cwd: Path, *args: str) -> subprocess.Popen[str]:
    """``python -m pytest_gta.mcp`` on the sample in ``cwd``, in its own session, output piped."""
    return subprocess.Popen(
        [*SERVE, *args],
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )


@pytest.mark.slow
def test_stdio_transport_in_a_subprocess(tmp_path):
    params = StdioServerParameters(
        command=sys.executable,
        args=[*SERVE[1:], "--gta-tools=replay", "--gta-mcp-transport=stdio", "--gta-mcp-query=0"],
        cwd=str(tmp_path),
        env={**os.environ},
    )

    async def talk() -> tuple[list[str], Any]:
        async with mcp.Client(params) as client:
            listed = [t.name for t in (await client.list_tools()).tools]
            return listed, await client.call_tool("Calculator", {"expression": "1.29+3.45+4.50"})

    listed, result = asyncio.run(asyncio.wait_for(talk(), TIMEOUT))
    assert listed == ["OCR", "Calculator"]
    assert texts(result) == ["9.24"]


def _children_gone(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return True
    return False


@pytest.mark.slow
@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM])
def test_the_module_prints_a_url_serves_and_stops_on_a_signal(tmp_path, stop):
    # Started in a project whose warnings are errors: pytest's note that it cannot rewrite the
    # already imported plugin once stopped the server there.
    (tmp_path / "pytest.ini").write_text("[pytest]\nfilterwarnings =\n    error\n")
    process = serve(tmp_path, "--gta-tools=local")
    try:
        lines = []
        assert process.stdout is not None
        deadline = time.monotonic() + TIMEOUT
        while time.monotonic() < deadline:
            line = process.stdout.readline()
            assert line, "".join(lines)
            lines.append(line)
            if URL.search(line):
                break
        match = URL.search(lines[-1])
        assert match, "".join(lines)
        listed, (result,) = run_session(match.group(1), [("Calculator", {"expression": "6*7"})])
        assert {"Calculator", "OCR", "DrawBox"} <= {t.name for t in listed}
        assert texts(result) == ["42"]
        process.send_signal(stop)
        out, _ = process.communicate(timeout=TIMEOUT)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    assert process.returncode == 0, out
    assert "stopped after 1 tool call" in out
    assert _children_gone(process.pid)
    assert not (tmp_path / ".pytest_cache").exists()


@pytest.mark.slow
def test_the_module_refuses_an_unknown_query(tmp_path):
    result = subprocess.run(
        [*SERVE, "--gta-mcp-query=nope"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert result.returncode == pytest.ExitCode.USAGE_ERROR
    assert "--gta-mcp-query=nope: no such query" in result.stderr


@pytest.mark.slow
def test_a_port_in_use_is_a_usage_error_naming_the_option(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = subprocess.run(
            [*SERVE, "--gta-tools=replay", f"--gta-mcp-port={port}"],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
        )
    assert result.returncode == pytest.ExitCode.USAGE_ERROR, result.stderr
    assert f"--gta-mcp-port={port}: the MCP server cannot listen on 127.0.0.1:{port}" in (
        result.stderr
    )
    assert "or 0 for any free one" in result.stderr
    assert "Traceback" not in result.stdout + result.stderr
