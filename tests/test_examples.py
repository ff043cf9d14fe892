"""The agent examples (``examples/``) run through pytest-gta and score exactly what the oracle does.

Each example is a real agent framework's loop (the OpenAI Agents SDK, smolagents, LangGraph, and a
plain-Python agent CLI) over the case's MCP endpoint, driven by the perfect function-calling
model of ``tests/helpers/agent_model_server.py`` through the recording proxy, on the bundled
sample with the replay tools. A perfect model makes the reference calls and gives the reference
answers, so the run must reproduce the ``oracle`` model's end-to-end numbers, case for case: proof
that the whole tool path (MCP schemas, arguments, image paths, results, the answer) works in each
framework.

smolagents' and LangGraph's MCP adapters need mcp<2, so those two run as commands with the
python of a virtualenv of their own (``.ci/run`` makes them and names them in
``GTA_SMOLAGENTS_PYTHON`` and ``GTA_LANGGRAPH_PYTHON``; by default ``.venv-smolagents`` and
``.venv-langgraph`` beside the checkout). Where one is missing the test skips, or fails under
``PYTEST_GTA_REQUIRE_EXAMPLES=1`` (``.ci/run`` sets it), as the other required tools do
(``require``, tests/helpers/optional.py).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from pytest_gta import examples
from pytest_gta.dataset import Dataset
from pytest_gta.options.agents import agent_words
from tests.helpers import optional
from tests.helpers.agent_model_server import (
    SCRIPTED_CONFTEST,
    AgentModelServer,
    Conversation,
    FunctionCallingModel,
)
from tests.helpers.gta_run import FAST_SIM, ORACLE, SAMPLE_DATA, GtaRun, gta_process
from tests.helpers.offline_agent import assert_scored_offline
from tests.helpers.optional import require
from tests.test_mcp_server import URL, serve

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
E2E_REPLAY = ("--gta-mode=e2e", "--gta-tools=replay")
#: Each example, and the API its framework asks its model in.
EACH_EXAMPLE = pytest.mark.parametrize(
    ("example", "api"),
    [
        ("openai_agents", "responses"),
        ("cli", "chat.completions"),
        ("langgraph", "chat.completions"),
        ("smolagents", "chat.completions"),
    ],
)
#: The queries an example runs on a model in pytest's process.
IN_PROCESS_IDS = ("1", "5", "7", "12", "13")
SERVED = "agent-fc"


def venv_python(framework: str) -> str:
    """The python of the framework's own virtualenv, or skipped (failed in CI) without it."""
    require(f"{framework}-venv")
    return optional.venv_python(framework)


def agent_option(example: str) -> str:
    """The ``--gta-agent`` or ``--gta-agent-command`` option that runs ``example``."""
    if example == "openai_agents":
        require("openai-agents")
        return f"--gta-agent={EXAMPLES / 'openai_agents_agent.py'}:agent"
    python = sys.executable if example == "cli" else venv_python(example)
    script = EXAMPLES / f"{example}_agent.py"
    words = [python, str(script), "{mcp_url}", "{query_file}", "{model_url}", "{model}"]
    return "--gta-agent-command=" + shlex.join(words)


def comparable(case: dict[str, Any]) -> tuple[Any, ...]:
    """What a perfect agent's case must share with the oracle's.

    The steps too, but for the answer's leading space: the ``oracle`` writes ReAct text and its
    answer is Lagent's raw text after ``Final Answer:`` (`` The answer...``), while an agent's
    is its framework's text (and a command's stdout is stripped). The scores are the same.
    """
    steps = [dict(s) for s in case["steps"]]
    if steps and steps[-1].get("role") == "assistant" and "content" in steps[-1]:
        steps[-1]["content"] = str(steps[-1]["content"]).strip()
    return case["outcome"], case["score"], steps


def assert_oracle_numbers(run: GtaRun, oracle: dict[str, Any]) -> None:
    """The run's end-to-end metrics and its cases are the oracle's."""
    assert run.ret == 0, run.output[-3000:]
    assert run.report["metrics"] == oracle["metrics"]
    cases = {case["id"]: comparable(case) for case in run.report["cases"]}
    assert cases == {case["id"]: comparable(case) for case in oracle["cases"]}
    for case in run.report["cases"]:
        assert len(case["tool_log"]) == sum(s["role"] == "tool" for s in case["steps"])


@pytest.fixture(scope="module")
def oracle_report(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The oracle's end-to-end run on the sample: what each example must reproduce."""
    cwd = tmp_path_factory.mktemp("oracle")
    return gta_process(cwd, ORACLE, SAMPLE_DATA, FAST_SIM, *E2E_REPLAY).report


@pytest.fixture(scope="module")
def model_server(sample_dataset: Dataset) -> Iterator[AgentModelServer]:
    with AgentModelServer(sample_dataset, served=SERVED) as server:
        yield server


@EACH_EXAMPLE
def test_example_gets_the_oracle_numbers(
    example: str,
    api: str,
    oracle_report: dict[str, Any],
    model_server: AgentModelServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    option = agent_option(example)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-unused-by-the-fake-model")
    model_server.model.reset()
    run = gta_process(
        tmp_path,
        f"--gta-model=openai/{SERVED}",
        f"--gta-base-url={model_server.url}",
        "--gta-cache=off",
        SAMPLE_DATA,
        FAST_SIM,
        *E2E_REPLAY,
        option,
        check=False,
    )
    assert_oracle_numbers(run, oracle_report)
    assert model_server.model.unknown == 0
    # Every model request went through the recording proxy, one per turn of the agent's loop.
    report = run.report
    assert report["usage"]["calls"] == model_server.model.calls
    for case in report["cases"]:
        exchanges = case["exchanges"]
        assert len(exchanges) == len(case["tool_log"]) + 1, case["id"]
        assert {e["api"] for e in exchanges} == {api}
        assert all(e["status"] == 200 for e in exchanges)


@EACH_EXAMPLE
def test_example_on_a_model_in_process_gets_the_oracle_cases(
    example: str,
    api: str,
    oracle_report: dict[str, Any],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The same perfect model, run in pytest's process (no HTTP endpoint): the recording proxy
    answers each framework's requests for it, tool calls and results included. Five queries
    (a calculation, six calls, a subjective answer, image generation, a chain that ends on a
    call) keep it short; the run above covers the sample."""
    option = agent_option(example)
    (tmp_path / "conftest.py").write_text(SCRIPTED_CONFTEST)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    run = gta_process(
        tmp_path,
        "--gta-model=scripted-fc",
        f"--gta-ids={','.join(IN_PROCESS_IDS)}",
        SAMPLE_DATA,
        FAST_SIM,
        *E2E_REPLAY,
        option,
        check=False,
    )
    assert run.ret == 0, run.output[-3000:]
    report = run.report
    expected = {c["id"]: comparable(c) for c in oracle_report["cases"]}
    assert {c["id"]: comparable(c) for c in report["cases"]} == {
        f"e2e-{qid}": expected[f"e2e-{qid}"] for qid in IN_PROCESS_IDS
    }
    assert report["usage"]["calls"] == sum(len(case["exchanges"]) for case in report["cases"])
    for case in report["cases"]:
        exchanges = case["exchanges"]
        assert len(exchanges) == len(case["tool_log"]) + 1, case["id"]
        assert {e["api"] for e in exchanges} == {api}
        assert all(e["status"] == 200 and e["error"] is None for e in exchanges)
        assert {e["request"]["model"] for e in exchanges} == {"scripted-fc"}


@pytest.mark.parametrize(("example", "api"), [("langgraph", "chat.completions")])
def test_example_runs_offline_on_the_bundled_smollm2(
    example: str, api: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A real model in pytest's process, no network, no key: a 135M model is no tool agent and
    the case fails, but it runs and is scored, every request answered through the proxy.

    The OpenAI Agents SDK example and the agent CLI run so from the wheel, as docs/agents.md
    writes them (tests/test_doc_commands.py, the same checks). smolagents' requests answered
    for a model in pytest's process are
    ``test_example_on_a_model_in_process_gets_the_oracle_cases[smolagents-chat.completions]``'s
    (it asked SmolLM2 21 times a case, 50 s, for what the other runs check; issue 39).
    """
    require("transformers")
    option = agent_option(example)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    run = gta_process(
        tmp_path,
        "--gta-model=smollm2",
        "--gta-ids=0",
        "--gta-max-tokens=16",
        "--gta-cache=off",
        SAMPLE_DATA,
        FAST_SIM,
        *E2E_REPLAY,
        option,
        check=False,
    )
    assert run.ret in (0, 1), run.output[-3000:]
    assert_scored_offline(run.report, api, run.output)


DOCUMENTED = [
    EXAMPLES / "cli_agent.py",
    EXAMPLES / "langgraph_agent.py",
    EXAMPLES / "smolagents_agent.py",
    ROOT / "docs" / "agents.md",
]


@pytest.mark.parametrize("page", DOCUMENTED, ids=lambda p: p.name)
def test_documented_commands_reach_the_agent_as_its_words(page: Path) -> None:
    """Each ``--gta-agent-command='...'`` shown, as bash hands it over, splits into the program,
    its script (a checkout's ``examples/``, a shipped ``example:NAME`` or the user's copy) and
    the four placeholders: a line break inside the quotes is a space, but a backslash there
    would reach the agent as a word of its own."""
    shown = re.findall(r"--gta-agent-command='[^']*\{mcp_url\}[^']*'", page.read_text())
    assert shown
    for snippet in shown:
        argv = subprocess.run(
            ["bash", "-c", f"printf '%s\\0' {snippet}"], capture_output=True, check=True
        ).stdout.decode()
        option, rest = argv.split("\0", 1)
        assert rest == "", snippet  # one word for bash
        words = agent_words(option.removeprefix("--gta-agent-command="))
        assert words[2:] == ["{mcp_url}", "{query_file}", "{model_url}", "{model}"], snippet
        script = words[1]
        if script.startswith("example:"):
            assert script.removeprefix("example:") in examples.BY_NAME, snippet
        elif script != "my_agent.py":  # docs/agents.md's copy of the agent CLI
            assert script.startswith("examples/"), snippet
            assert script.endswith("_agent.py"), snippet


# -- the model itself, through the official SDK --------------------------------------------------


@pytest.fixture
def fc_model(sample_dataset: Dataset) -> FunctionCallingModel:
    return FunctionCallingModel(sample_dataset)


def first_turn(dataset: Dataset, qid: str) -> str:
    """The user's text the examples send: the query, then its images' absolute paths."""
    query = dataset[qid]
    return f"{query.text}\n\nInput images: {', '.join(dataset.abs_files(query))}"


def test_streamed_chat_and_responses_give_the_reference_call(sample_dataset: Dataset) -> None:
    prompt = first_turn(sample_dataset, "0")
    tool = {"type": "function", "function": {"name": "OCR", "parameters": {"type": "object"}}}
    with AgentModelServer(sample_dataset) as server:
        client = openai.OpenAI(base_url=server.url, api_key="unused")
        chunks = client.chat.completions.create(
            model=SERVED,
            messages=[{"role": "user", "content": prompt}],
            tools=[tool],  # type: ignore[list-item]
            stream=True,
            stream_options={"include_usage": True},
        )
        calls = [c for chunk in chunks for ch in chunk.choices for c in ch.delta.tool_calls or ()]
        assert [(c.function.name, c.function.arguments) for c in calls if c.function] == [
            ("OCR", json.dumps({"image": sample_dataset.abs_files(sample_dataset["0"])[0]}))
        ]
        events = client.responses.create(
            model=SERVED,
            input=[
                {"role": "user", "content": prompt},
                {"type": "function_call", "call_id": "c0", "name": "OCR", "arguments": "{}"},
                {"type": "function_call_output", "call_id": "c0", "output": "receipt text"},
            ],
            tools=[{"type": "function", "name": "Calculator", "parameters": {}, "strict": False}],
            stream=True,
        )
        done = [e for e in events if e.type == "response.completed"]
        item = done[0].response.output[0]
        assert (item.type, item.name, json.loads(item.arguments)) == (
            "function_call",
            "Calculator",
            {"expression": "1.29+3.45+4.50"},
        )
        final = client.responses.create(
            model=SERVED,
            input=[
                {"role": "user", "content": prompt},
                *[
                    {"type": "function_call_output", "call_id": f"c{i}", "output": ""}
                    for i in (0, 1)
                ],
            ],
        )
        expected = sample_dataset.reference_dialogs(sample_dataset["0"])[-1]["content"]
        assert final.output_text == expected


def test_every_release_query_is_found_by_its_text_and_images(release_dataset: Dataset) -> None:
    """The release has queries alike but for their images ("Can you explain this meme?" ten
    times) and texts inside others' ("What is x in the equation?"): each is found all the same."""
    model = FunctionCallingModel(release_dataset)
    found = {q.qid: model.locate((first_turn(release_dataset, q.qid),)) for q in release_dataset}
    assert found == {q.qid: q.qid for q in release_dataset}
    assert model.locate(("What is the weather like?",)) is None


def test_smolagents_results_and_final_answer_tool(fc_model: FunctionCallingModel) -> None:
    """smolagents sends tool results as user text and ends through its final_answer tool."""
    prompt = first_turn(fc_model.dataset, "0")
    body = {
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": f"New task:\n{prompt}"}]},
            {"role": "assistant", "content": "Calling tools:\n[...]"},
            {"role": "user", "content": [{"type": "text", "text": "Observation:\nFRESHMART"}]},
            {"role": "assistant", "content": "Calling tools:\n[...]"},
            {"role": "user", "content": "Call id: call_1\nError:\nno such file"},
        ],
        "tools": [{"type": "function", "function": {"name": n}} for n in ("OCR", "final_answer")],
    }
    move = fc_model.move(Conversation.of_chat(body))
    assert move is not None
    assert move.name == "final_answer"
    answer = fc_model.dataset.reference_dialogs(fc_model.dataset["0"])[-1]["content"]
    assert json.loads(move.arguments) == {"answer": answer}


@pytest.mark.slow
def test_agent_concurrency_benchmark_prints_its_row_and_matches_the_oracle(tmp_path: Path) -> None:
    require("openai-agents")
    command = [
        sys.executable,
        str(ROOT / "benchmarks" / "agent_concurrency.py"),
        "--agent=openai-agents",
        f"--data={ROOT / 'fixtures' / 'gta_sample'}",
        "--queries=4",
        "--latency=0.01",
        "--concurrency=4",
        "--sim-model=all-MiniLM-L6-v2",
    ]
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    done = subprocess.run(
        command, cwd=tmp_path, env=env, capture_output=True, text=True, check=False, timeout=600
    )
    assert done.returncode == 0, done.stdout + done.stderr
    row = next(line for line in done.stdout.splitlines() if line.startswith("| openai-agents"))
    cells = [c.strip() for c in row.split("|")[1:-1]]
    # The first 4 sample chains take 3+3+3+6 model calls (their turns and answers).
    assert cells[1] == "15"
    assert 1 <= int(cells[2]) <= 4
    assert float(cells[3]) > float(cells[4]) > 0
    assert "metrics and per-case outcomes equal the oracle's (4)" in done.stdout
    assert "PROBLEM" not in done.stdout


#: A third-party MCP client (langchain-mcp-adapters over mcp 1.x, in the LangGraph example's
#: virtualenv) lists the standalone server's tools and calls one.
THIRD_PARTY_CLIENT = """
import asyncio, sys
from langchain_mcp_adapters.client import MultiServerMCPClient

async def main(url):
    client = MultiServerMCPClient({"gta": {"url": url, "transport": "streamable_http"}})
    tools = {tool.name: tool for tool in await client.get_tools()}
    print(" ".join(sorted(tools)))
    print(await tools["Calculator"].ainvoke({"expression": "6*7"}))

asyncio.run(main(sys.argv[1]))
"""


@pytest.mark.slow
def test_the_standalone_server_serves_a_third_party_client(tmp_path):
    """``python -m pytest_gta.mcp`` as the docs show it, called by another MCP implementation."""
    python = venv_python("langgraph")
    served = serve(tmp_path, "--gta-tools=local,replay")
    try:
        assert served.stdout is not None
        first = served.stdout.readline()
        url = URL.search(first)
        assert url, first + served.stdout.read(2000)
        client = subprocess.run(
            [python, "-c", THIRD_PARTY_CLIENT, url.group(1)],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert client.returncode == 0, client.stderr[-2000:]
        names, answer = client.stdout.strip().splitlines()[-2:]
        assert {"Calculator", "OCR", "DrawBox", "ImageDescription"} <= set(names.split())
        assert "42" in answer
    finally:
        os.killpg(served.pid, 2)  # Ctrl-C, as a user stops it
        served.communicate(timeout=30)
    assert served.returncode == 0
