"""A tool serves its case, not the benchmark: no tool reads ``end.json`` or ``dataset.json``.

Issue 38's finding 7: ``ReadCSV`` on a GTA-Workflow dataset's ``end.json`` answered every
checkpoint's requirement and weight. What a case's calls may name is decided in one place
(:mod:`pytest_gta.reach`, through :attr:`pytest_gta.tools.ToolContext.reach`) for every backend
and producer. Here: what a GTA-Atomic case and a GTA-Workflow task may name (Atomic keeps the
dataset's data directories, which the release's reference chains need); every spelling of a
benchmark file refused (Hypothesis); a real ``mcp.Client`` against the real gateway asking
``ReadCSV``, ``ReadPDF``, ``ReadDOCX``, ``ImageQualityTest`` and ``OCR`` for them, with the
case's log keeping each refused call as a failed one; and black-box runs of the project's loop
(a scripted model over HTTP) and of an agent program in its sandbox on the Workflow sample.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pytest_gta.benchmarks.gta_workflow.producers import as_dataset
from pytest_gta.dataset import Dataset
from pytest_gta.errors import GtaToolError
from pytest_gta.mcp.calls import CaseTools
from pytest_gta.mcp.gateway import McpGateway
from pytest_gta.protocol import react as p
from pytest_gta.reach import BENCHMARK_FILES
from pytest_gta.tools import ToolBackendContext, ToolContext, ToolSet, ToolSpec, make_backend
from pytest_gta.types import ToolResult
from pytest_gta.validation import load_dataset
from pytest_gta.workflow_data import load_workflow
from tests.helpers.gta_run import gta
from tests.helpers.judge_server import JudgeServer
from tests.helpers.optional import require
from tests.helpers.paths import ROOT
from tests.helpers.scripted_server import ScriptedServer, Step, chat_completion
from tool_backends.paths import resolve_file

WORKFLOW_SAMPLE = ROOT / "fixtures" / "gta_workflow_sample"
ATOMIC_SAMPLE = ROOT / "fixtures" / "gta_sample"
#: What the refusal of a benchmark file says (pytest_gta.reach.withheld_message).
WITHHELD = "is one of the benchmark's own files"
#: Every checkpoint requirement of the Workflow sample: none may reach a model or an agent.
REQUIREMENTS = [
    str(node["requirements"])
    for task in json.loads((WORKFLOW_SAMPLE / "end.json").read_text("utf-8")).values()
    for node in task.get("sub_tasks", [])
    if isinstance(node, dict) and "requirements" in node
]


@pytest.fixture(scope="module")
def workflow_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A private copy of the Workflow sample (links to its files are made beside them)."""
    root = tmp_path_factory.mktemp("reach") / "workflow"
    shutil.copytree(WORKFLOW_SAMPLE, root)
    return root


@pytest.fixture(scope="module")
def atomic_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("reach") / "atomic"
    shutil.copytree(ATOMIC_SAMPLE, root)
    (root / "notes.txt").write_text("a file at the root, beside the benchmark's own")
    return root


def workflow_dataset(root: Path, offered: set[str] | None = None) -> Dataset:
    return as_dataset(load_workflow(root), offered)


def test_a_workflow_task_reaches_its_own_files_and_outputs_only(
    workflow_root: Path, tmp_path: Path
) -> None:
    dataset = workflow_dataset(workflow_root)
    context = ToolContext(dataset, dataset.queries["1"], tmp_path / "out")
    context.output_dir.mkdir()
    made = context.output_dir / "made.csv"
    made.write_text("a,b\n")
    reach = context.reach
    assert reach.judge_path(str(workflow_root / "files" / "report.pdf")) == "visible"
    assert reach.judge_path("files/report.pdf") == "visible"  # relative: to the dataset root
    assert reach.judge_path(str(made)) == "visible"
    # Another task's input: no reference chain needs it, so it is not this task's to read.
    assert reach.judge_path(str(workflow_root / "files" / "sales.csv")) == "outside"
    for name in ("end.json", "toolmeta.json"):
        assert reach.judge_path(str(workflow_root / name)) == "withheld"
    assert reach.judge_path(str(workflow_root / "files" / ".." / "end.json")) == "withheld"
    assert reach.judge_path("/etc/passwd") == "outside"


def test_an_atomic_case_keeps_the_datasets_data_directories_as_the_reference_chains_need(
    atomic_root: Path, tmp_path: Path
) -> None:
    """Queries 50, 108, 135 and 225 of the release read another query's image (parity)."""
    dataset = load_dataset(atomic_root)
    context = ToolContext(dataset, dataset["0"], tmp_path / "out")
    reach = context.reach
    assert reach.judge_path(str(atomic_root / "image" / "image_0.jpg")) == "visible"
    assert reach.judge_path(str(atomic_root / "image" / "image_5.jpg")) == "visible"
    assert reach.judge_path(str(atomic_root / "notes.txt")) == "outside"  # the root is no data
    for name in ("dataset.json", "toolmeta.json"):
        assert reach.judge_path(str(atomic_root / name)) == "withheld"
        assert reach.judge_path(str(atomic_root / "image" / ".." / name)) == "withheld"


def test_links_to_a_benchmark_file_are_refused_where_the_case_may_read(
    workflow_root: Path, tmp_path: Path
) -> None:
    """A symlink or a hard link in the output directory (whose files a call may name)."""
    dataset = workflow_dataset(workflow_root)
    out = tmp_path / "out"
    out.mkdir()
    (out / "symlink.csv").symlink_to(workflow_root / "end.json")
    hard = workflow_root / "files" / "hard-end.csv"  # same file system as the dataset
    os.link(workflow_root / "end.json", hard)
    try:
        (out / "hard.csv").symlink_to(hard)
        context = ToolContext(dataset, dataset.queries["1"], out)
        for path in (out / "symlink.csv", hard, out / "hard.csv"):
            assert context.reach.judge_path(str(path)) == "withheld", path
            with pytest.raises(GtaToolError, match=WITHHELD):
                resolve_file(str(path), context)
    finally:
        hard.unlink()


class Counting:
    """A tool runner that counts the calls that reached it."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, meta: Any, arguments: Any, converted: Any) -> ToolResult:
        self.calls += 1
        return ToolResult.text("ran")


#: Path segments a model may put before a file name.
SEGMENTS = st.lists(st.sampled_from(["files", "..", ".", "", "image", "files/.."]), max_size=4)


@settings(
    max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    prefix=SEGMENTS,
    name=st.sampled_from(BENCHMARK_FILES),
    spelling=st.sampled_from(["absolute", "relative", "symlink"]),
    tool=st.sampled_from(["ReadCSV", "ReadPDF", "OCR"]),
)
def test_no_spelling_of_a_benchmark_file_reaches_a_tool(
    workflow_root: Path,
    tmp_path_factory: pytest.TempPathFactory,
    prefix: list[str],
    name: str,
    spelling: str,
    tool: str,
) -> None:
    dataset = workflow_dataset(workflow_root)
    out = tmp_path_factory.mktemp("out")
    context = ToolContext(dataset, dataset.queries["1"], out)
    relative = "/".join([*prefix, name])
    value = relative if spelling == "relative" else f"{workflow_root}/{relative}"
    if spelling == "symlink":
        (out / "link").symlink_to(value)
        value = str(out / "link")
    meta = dataset.toolmeta[tool]
    runner = Counting()
    argument = meta.inputs[0].name
    reply = p.ParsedReply("", tool, json.dumps({argument: value}))
    record = p.execute(reply, dataset.toolmeta, runner, visible=context.reach)
    assert runner.calls == 0, value  # nothing of the benchmark's reaches a tool
    assert record.state == "API_ERROR"
    target = os.path.realpath(os.path.join(workflow_root, value))
    if os.path.dirname(target) == os.path.realpath(workflow_root) and os.path.isfile(target):
        assert record.errmsg is not None  # end.json or toolmeta.json, however spelled
        assert record.errmsg.startswith("PermissionError(")
        assert WITHHELD in record.errmsg
    else:  # the spelling led elsewhere, where no such file is
        assert record.errmsg == repr(FileNotFoundError(f"No such file: '{value}'"))


# -- over MCP: an agent's calls -------------------------------------------------------------------


def workflow_tools(root: Path, out: Path, task: str = "1") -> CaseTools:
    """The task's tools as a run serves them (every tool ``local`` and ``workflow`` offer)."""
    whole = workflow_dataset(root)
    context = ToolBackendContext(whole, out)
    toolset = ToolSet([make_backend(ToolSpec(n, n), context) for n in ("local", "workflow")])
    offered = {m for m in whole.toolmeta if any(b.offers(m) for b in toolset.backends)}
    dataset = workflow_dataset(root, offered)
    return CaseTools(dataset, dataset.queries[task], toolset, out / "case", max_calls=20)


def call_over_mcp(url: str, calls: list[tuple[str, dict[str, str]]]) -> list[Any]:
    import mcp  # the agents extra: required by the test that calls this

    async def session() -> list[Any]:
        async with mcp.Client(url) as client:
            return [await client.call_tool(name, arguments) for name, arguments in calls]

    return asyncio.run(asyncio.wait_for(session(), 120))


@pytest.mark.slow
def test_an_agent_over_mcp_is_refused_the_checkpoints_and_the_log_keeps_each_call(
    workflow_root: Path, tmp_path: Path
) -> None:
    require("mcp")
    require("workflow")
    tools = workflow_tools(workflow_root, tmp_path)
    out = tools.output_dir
    (out / "cheat.csv").symlink_to(workflow_root / "end.json")
    end = str(workflow_root / "end.json")
    refused = [
        ("ReadCSV", {"csv_file": end}, WITHHELD),
        ("ReadCSV", {"csv_file": f"{workflow_root}/files/../end.json"}, WITHHELD),
        ("ReadCSV", {"csv_file": "end.json"}, WITHHELD),
        ("ReadCSV", {"csv_file": "../end.json"}, "No such file: '../end.json'"),
        ("ReadPDF", {"file": str(out / "cheat.csv")}, WITHHELD),
        ("ReadDOCX", {"file": str(workflow_root / "toolmeta.json")}, WITHHELD),
        ("ImageQualityTest", {"image": end}, WITHHELD),
        # Another task's input file is not this task's to read.
        ("ReadCSV", {"csv_file": str(workflow_root / "files" / "sales.csv")}, "No such file"),
    ]
    own = ("ReadPDF", {"file": str(workflow_root / "files" / "report.pdf")})
    with McpGateway() as gateway:
        endpoint = gateway.open(tools)
        results = call_over_mcp(endpoint.url, [(n, a) for n, a, _ in refused] + [own])
    texts = [" ".join(c.text for c in r.content if c.type == "text") for r in results]
    for (name, _, said), result, text in zip(refused, results, texts, strict=False):
        assert result.is_error, (name, text)
        assert said in text, (name, text)
    assert not results[-1].is_error, texts[-1]
    assert "Quarterly Operations Report" in texts[-1]  # the task's own file still reads
    for requirement in REQUIREMENTS:
        assert all(requirement not in text for text in texts)
    # The case's log holds every call, the refused ones as failed calls of their tool.
    log = tools.log()
    assert [(c.name, c.ok) for c in log] == [(n, False) for n, _, _ in refused] + [
        ("ReadPDF", True)
    ]
    for logged in log[:-1]:
        assert logged.record.type == logged.name
        assert logged.record.state == "API_ERROR"
    steps = tools.predictions()
    assert [s["error"]["type"] for s in steps[::2] if "error" in s] == ["API_ERROR"] * len(refused)


@pytest.mark.slow
def test_an_atomic_agent_over_mcp_is_refused_the_answers(atomic_root: Path, tmp_path: Path) -> None:
    require("mcp")
    dataset = load_dataset(atomic_root)
    toolset = ToolSet(
        [make_backend(ToolSpec("replay", "replay"), ToolBackendContext(dataset, tmp_path))]
    )
    tools = CaseTools(dataset, dataset["0"], toolset, tmp_path / "case", max_calls=5)
    with McpGateway() as gateway:
        endpoint = gateway.open(tools)
        results = call_over_mcp(
            endpoint.url,
            [
                ("OCR", {"image": str(atomic_root / "dataset.json")}),
                ("OCR", {"image": "dataset.json"}),
            ],
        )
    for result in results:
        assert result.is_error
        assert WITHHELD in result.content[0].text
    assert [(c.name, c.record.state) for c in tools.log()] == [("OCR", "API_ERROR")] * 2


# -- the case's deadline ends its tool calls ------------------------------------------------------


@pytest.mark.slow
def test_a_call_near_the_agents_deadline_gets_the_time_left_and_none_runs_after_it(
    workflow_root: Path, tmp_path: Path
) -> None:
    """``--gta-agent-timeout`` bounds the agent's tool calls too (play_agent's deadline)."""
    require("workflow")
    whole = workflow_dataset(workflow_root)
    toolset = ToolSet(
        [make_backend(ToolSpec("workflow", "workflow"), ToolBackendContext(whole, tmp_path))]
    )
    offered = {m for m in whole.toolmeta if toolset.backends[0].offers(m)}
    dataset = workflow_dataset(workflow_root, offered)
    deadline = time.monotonic() + 3
    tools = CaseTools(
        dataset, dataset.queries["3"], toolset, tmp_path / "case", max_calls=5, deadline=deadline
    )
    slides = json.dumps([{"title": f"{n}"} for n in range(20_000)])  # within MCP's argument limit
    started = time.monotonic()
    deck = tools.call("PptxFileGenerator", {"filename": "deck", "slides_content_str": slides})
    assert time.monotonic() - started < 30  # bound: catches a hang
    assert deck.record.errmsg is not None
    limit = re.fullmatch(
        r"PptxFileGenerator did not finish: time limit exceeded \(([\d.]+) s wall clock\)",
        deck.record.errmsg,
    )
    assert limit is not None, deck.record.errmsg
    assert float(limit.group(1)) <= 3  # the time left, not the generator's 20 s
    late = tools.call("ReadCSV", {"csv_file": str(workflow_root / "files" / "sales.csv")})
    assert late.record.errmsg is not None
    assert "time (--gta-agent-timeout) is up: this call was not run" in late.record.errmsg
    assert [c.record.state for c in tools.log()] == ["API_ERROR", "API_ERROR"]


# -- black-box runs on the Workflow sample --------------------------------------------------------


def _judge() -> JudgeServer:
    return JudgeServer(replies={}, default='{"score": 5, "analysis": "default"}').start()


def _case(run: Any) -> dict[str, Any]:
    report: dict[str, Any] = json.loads(run.report_path.read_text(encoding="utf-8"))
    (case,) = report["cases"]
    return case


@pytest.mark.slow
def test_the_projects_loop_gets_the_refusal_and_the_call_is_reported(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, workflow_root: Path
) -> None:
    """A model (over HTTP, through the project's ReAct loop) asks ReadCSV for end.json."""
    require("workflow")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    asks = [str(workflow_root / "end.json"), f"{workflow_root}/files/../end.json"]
    turns = [
        f"Thought: read\nAction: ReadCSV\nAction Input: {json.dumps({'csv_file': path})}"
        for path in asks
    ]
    judge = _judge()
    try:
        # A name the official max_tokens rule gives a 32k window: the prompt of every offered
        # tool is past 4,096 tokens, where the official client sends nothing.
        with ScriptedServer(models=["scripted-32k"]) as model:
            model.then(*(Step(chat_completion(t)) for t in turns))
            model.default = Step(chat_completion("Thought: done\nFinal Answer: nothing to read"))
            run = gta(
                pytester,
                f"--gta-data={workflow_root}",
                "--gta-model=openai/scripted-32k",
                f"--gta-base-url={model.url}",
                "--gta-cache=off",
                "--gta-ids=2",
                "--gta-tools=local,workflow",
                f"--gta-judge-base-url={judge.base_url}",
            )
            posted = model.posted()
    finally:
        judge.stop()
    case = _case(run)
    assert case["producer"] == "model", run.output[-3000:]
    assert (case["tool_calls"], case["tool_call_errors"], case["tools"]) == (2, 2, ["ReadCSV"])
    assert len(posted) == 3
    for request in posted[1:]:
        observation = request["messages"][-1]["content"]
        assert observation.startswith("Response:PermissionError("), observation
        assert WITHHELD in observation
    seen = json.dumps(posted)
    assert all(requirement not in seen for requirement in REQUIREMENTS)


CHECKPOINT_READER = """
import asyncio, json, os, pathlib, sys
from mcp import Client

async def read(paths):
    out = []
    async with Client(os.environ["GTA_MCP_URL"]) as client:
        for path in paths:
            result = await client.call_tool("ReadCSV", {"csv_file": path})
            out.append([result.is_error, " ".join(getattr(c, "text", "") for c in result.content)])
    return out

got = asyncio.run(read(sys.argv[3:]))
pathlib.Path(sys.argv[2]).write_text(json.dumps(got))
(pathlib.Path(sys.argv[1]) / "out.txt").write_text("x")
"""


@pytest.mark.slow
def test_a_workflow_agent_asking_its_tools_for_the_checkpoints_is_refused(
    pytester: pytest.Pytester,
    monkeypatch: pytest.MonkeyPatch,
    workflow_root: Path,
    tmp_path: Path,
) -> None:
    """Issue 38's acceptance: the agent (in its sandbox, over MCP) gets a refusal per call, and
    the run's report counts each call as a failed one."""
    require("mcp")
    require("workflow")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    agent = tmp_path / "reader.py"
    agent.write_text(CHECKPOINT_READER, encoding="utf-8")
    asks = [str(workflow_root / "end.json"), f"{workflow_root}/files/../toolmeta.json"]
    judge = _judge()
    try:
        run = gta(
            pytester,
            f"--gta-data={workflow_root}",
            "--gta-model=oracle",
            "--gta-ids=2",
            "--gta-tools=local,workflow",
            f"--gta-agent-command={sys.executable} {agent} {{deliverables_dir}} {{answer_file}} "
            + " ".join(asks),
            f"--gta-judge-base-url={judge.base_url}",
        )
    finally:
        judge.stop()
    case = _case(run)
    assert case["producer"] == "agent", case["message"]
    got = json.loads(case["final_answer"])
    assert [error for error, _ in got] == [True, True]
    assert all(WITHHELD in text for _, text in got), got
    assert all(r not in case["final_answer"] for r in REQUIREMENTS)
    assert (case["tool_calls"], case["tool_call_errors"], case["tools"]) == (2, 2, ["ReadCSV"])


def test_the_withheld_names_are_the_files_at_both_layouts_roots() -> None:
    atomic = {p.name for p in ATOMIC_SAMPLE.iterdir() if p.suffix == ".json"}
    workflow = {p.name for p in WORKFLOW_SAMPLE.iterdir() if p.suffix == ".json"}
    assert atomic | workflow == set(BENCHMARK_FILES)
