"""GTA-Workflow deliverables produced by running something, then judged.

The project's own ReAct loop with a scripted model, an agent program (in its sandbox) that
writes files to ``{deliverables_dir}``, and the judge's chat variant against a local
OpenAI-compatible server: each case's deliverable reaches the judge and is scored.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.gta_run import gta
from tests.helpers.judge_server import JudgeServer
from tests.helpers.paths import ROOT
from tests.helpers.scripted_server import Recorded, ScriptedServer, Step, chat_completion

SAMPLE = ROOT / "fixtures" / "gta_workflow_sample"
#: Task 2 of the sample: two leaves (2.1, 2.2), equal weights.
TASK = "2"


def _judge(replies: dict[str, str]) -> JudgeServer:
    return JudgeServer(replies=replies, default='{"score": 5, "analysis": "default"}').start()


def _report(run: Any) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(run.report_path.read_text(encoding="utf-8"))
    return loaded


def _agent_run(pytester: pytest.Pytester, agent: str, *extra: str) -> tuple[Any, JudgeServer]:
    """Task 2 run by the agent under test (``agent``: its option), judged by the scripted judge."""
    judge = _judge({})
    try:
        run = gta(
            pytester,
            f"--gta-data={SAMPLE}",
            "--gta-model=oracle",
            f"--gta-ids={TASK}",
            "--gta-tools=local",
            agent,
            f"--gta-judge-base-url={judge.base_url}",
            *extra,
        )
    finally:
        judge.stop()
    return run, judge


def _command_run(
    pytester: pytest.Pytester, agent: Path, source: str, args: str
) -> tuple[Any, JudgeServer]:
    """Task 2 run by the agent program ``source`` (``deliverables_dir answer_file args``)."""
    agent.write_text(source, encoding="utf-8")
    command = f"{sys.executable} {agent} {{deliverables_dir}} {{answer_file}} {args}"
    return _agent_run(pytester, f"--gta-agent-command={command}")


def test_the_projects_loop_produces_the_deliverable_the_judge_scores(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    script = pytester.path / "script.json"
    script.write_text(
        json.dumps(
            {
                "responses": {
                    f"e2e-{TASK}": [
                        'Thought: add\nAction: Calculator\nAction Input: {"expression": "1+1"}',
                        "Thought: done\nFinal Answer: The clip is clip.mp3 (2 seconds).",
                    ]
                }
            }
        ),
        encoding="utf-8",
    )
    judge = _judge({"The clip is exported as MP3.": '{"score": 9, "analysis": "mp3"}'})
    try:
        run = gta(
            pytester,
            f"--gta-data={SAMPLE}",
            f"--gta-model=mock:{script}",
            f"--gta-ids={TASK}",
            "--gta-tools=local",
            f"--gta-judge-base-url={judge.base_url}",
        )
    finally:
        judge.stop()
    (case,) = _report(run)["cases"]
    assert case["producer"] == "model"
    assert case["final_answer"] == "The clip is clip.mp3 (2 seconds)."
    assert (case["tool_calls"], case["tool_call_errors"], case["tools"]) == (1, 0, ["Calculator"])
    assert case["root_score"] == (5 + 9) / 2
    # Every tool call is kept with its arguments and output, and every turn's raw reply.
    call, output, answer = case["steps"]
    assert call["tool_calls"][0]["function"] == {
        "name": "Calculator",
        "arguments": {"expression": "1+1"},
    }
    assert "error" not in call
    assert output == {"role": "tool", "content": [{"type": "text", "content": "2"}]}
    assert answer == {"role": "assistant", "content": " The clip is clip.mp3 (2 seconds)."}
    assert len(case["replies"]) == 2
    assert case["replies"][0].endswith('Action Input: {"expression": "1+1"}')
    assert case["empty_deliverable"] is False
    prompts = [c.body["input"][0]["content"][0]["text"] for c in judge.response_calls()]
    assert len(prompts) == 2
    assert all("Final answer:\nThe clip is clip.mp3 (2 seconds).\n" in p for p in prompts)


AGENT = """
import base64, pathlib, sys
out = pathlib.Path(sys.argv[1])
(out / "notes").mkdir()
(out / "notes" / "summary.md").write_text("# Summary\\nThe clip is ready.\\n")
(out / "chart.png").write_bytes(base64.b64decode(sys.argv[3]))
(out / "escape").symlink_to("/etc/hostname")
pathlib.Path(sys.argv[2]).write_text("Wrote notes/summary.md and chart.png.")
"""
#: A 1x1 PNG.
PNG = (
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAAB"
    "JRU5ErkJggg=="
)


def test_an_agent_command_writes_deliverables_that_are_judged(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    run, judge = _command_run(pytester, tmp_path / "agent.py", AGENT, PNG)
    (case,) = _report(run)["cases"]
    assert case["producer"] == "agent", case["message"]
    assert case["final_answer"] == "Wrote notes/summary.md and chart.png."
    # The link the agent left is not followed out of its sandbox.
    assert sorted(case["deliverables"]) == ["chart.png", "summary.md"]
    # Each leaf uploads both again: the PNG as it is, the markdown as summary.pdf.
    names = [u.filename for u in judge.uploads()]
    assert sorted(names) == ["chart.png", "chart.png", "summary.pdf", "summary.pdf"]
    assert case["root_score"] == 5.0


def test_the_chat_judge_renders_files_and_is_marked_not_official(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")

    def answer(request: Recorded) -> Step:
        parts = request.json["messages"][0]["content"]
        kinds = sorted({p["type"] for p in parts})
        return Step(
            chat_completion(json.dumps({"score": 8 if kinds == ["image_url", "text"] else 2}))
        )

    with ScriptedServer(default=answer) as server:
        run = gta(
            pytester,
            "--gta-data=workflow-sample",
            f"--gta-model=evalpack:{ROOT / 'tests' / 'data' / 'workflow' / 'pack.json'}",
            "--gta-ids=1",
            "--gta-judge=local-judge",
            "--gta-judge-api=chat",
            f"--gta-judge-base-url={server.url}",
        )
        posted = server.posted()
    report = _report(run)
    assert report["judge"] == {
        "model": "local-judge",
        "api": "chat",
        "official": False,
        "base_url": server.url,
        "served": "endpoint",
        "threshold": 7.0,
    }
    assert "NOT the official protocol" in run.output
    (case,) = report["cases"]
    assert case["root_score"] == 8.0
    assert {p["model"] for p in posted} == {"local-judge"}
    texts = [
        part["text"]
        for p in posted
        for part in p["messages"][0]["content"]
        if part["type"] == "text"
    ]
    assert any(t.startswith("[Attached file: summary.pdf]") for t in texts)


CHEAT = """
import json, pathlib, sys
found = {}
for path in sys.argv[3:]:
    try:
        found[path] = pathlib.Path(path).read_bytes()[:200].decode("latin-1")
    except OSError as exc:
        found[path] = type(exc).__name__
pathlib.Path(sys.argv[2]).write_text(json.dumps(found))
(pathlib.Path(sys.argv[1]) / "out.txt").write_text("x")
"""


def test_a_workflow_agent_sees_its_inputs_but_not_the_checkpoints(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The dataset's end.json (the trees the agent is judged on) is hidden, even when named."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    end = SAMPLE / "end.json"
    wav = SAMPLE / "files" / "interview.wav"
    run, _ = _command_run(pytester, tmp_path / "cheat.py", CHEAT, f"{end} {wav}")
    report = _report(run)
    (case,) = report["cases"]
    seen = json.loads(case["final_answer"])
    assert seen[str(end)] in ("FileNotFoundError", "PermissionError", "IsADirectoryError"), seen
    assert seen[str(wav)] != "FileNotFoundError"  # the task's own input file is shown
    assert case["deliverables"] == ["out.txt"]


PACK = ROOT / "tests" / "data" / "workflow" / "pack.json"


@pytest.mark.parametrize(
    ("args", "collected"),
    [
        (("--gta-ids=1,3",), ["workflow-1", "workflow-3"]),
        (("--gta-limit=2",), ["workflow-1", "workflow-2"]),
        (("-k", "workflow-5 or workflow-7"), ["workflow-5", "workflow-7"]),
        (("--gta-shard=2/3",), ["workflow-2", "workflow-5", "workflow-8"]),
        (("--gta-ids=4", "--gta-epochs=2"), ["workflow-4@epoch0", "workflow-4@epoch1"]),
        (("-m", "gta_tool_ReadPDF"), ["workflow-1"]),
    ],
)
def test_tasks_are_selected_as_atomic_queries_are(
    pytester: pytest.Pytester, args: tuple[str, ...], collected: list[str]
) -> None:
    result = pytester.runpytest(
        "--collect-only", "-q", f"--gta-data={SAMPLE}", f"--gta-model=evalpack:{PACK}", *args
    )
    ids = [
        line.split("[", 1)[1].rstrip("]")
        for line in result.stdout.lines
        if line.startswith("gta::test_workflow[")
    ]
    assert ids == collected, result.stdout.str()


def test_epochs_judge_each_repetition(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    judge = _judge({})
    try:
        run = gta(
            pytester,
            f"--gta-data={SAMPLE}",
            f"--gta-model=evalpack:{PACK}",
            "--gta-ids=4",
            "--gta-epochs=2",
            "--gta-cache=off",
            f"--gta-judge-base-url={judge.base_url}",
        )
    finally:
        judge.stop()
    cases = _report(run)["cases"]
    assert [(c["id"], c["epoch"], c["root_score"]) for c in cases] == [
        ("workflow-4@epoch0", 0, 5.0),
        ("workflow-4@epoch1", 1, 5.0),
    ]
    assert len(judge.response_calls()) == 4  # two leaves, twice


def test_bad_input_is_a_usage_error_naming_the_file(
    pytester: pytest.Pytester, tmp_path: Path
) -> None:
    data = tmp_path / "wf"
    data.mkdir()
    (data / "end.json").write_text('{"1": []}', encoding="utf-8")
    result = pytester.runpytest(f"--gta-data={data}", f"--gta-model=evalpack:{PACK}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*{data / 'end.json'}: task '1' is list, not an object*"])
    missing = pytester.runpytest(f"--gta-data={SAMPLE}", "--gta-model=evalpack:nope.json")
    assert missing.ret == pytest.ExitCode.USAGE_ERROR
    missing.stderr.fnmatch_lines(["*evalpack:*nope.json: no such file*"])
    local = pytester.runpytest(
        f"--gta-data={SAMPLE}", f"--gta-model=evalpack:{PACK}", "--gta-judge=smollm2"
    )
    assert local.ret == pytest.ExitCode.USAGE_ERROR or "--gta-judge-api=chat" in local.stdout.str()


TOOL_AGENT = """
def run(task):
    task.tools.call("Calculator", expression="6*7")
    task.tools.call("Calculator", expression="1/0")
    return "The answer is 42."
"""


def test_an_agents_tool_calls_are_kept_and_shown_in_the_drilldown(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """As the atomic report keeps an agent's calls: the server's log, the steps, the page."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    agent = tmp_path / "tool_agent.py"
    agent.write_text(TOOL_AGENT, encoding="utf-8")
    run, _ = _agent_run(pytester, f"--gta-agent={agent}:run", "--gta-report-html=page.html")
    (case,) = _report(run)["cases"]
    assert case["producer"] == "agent", case["message"]
    log = case["tool_log"]
    assert [(c["name"], c["arguments"]) for c in log] == [
        ("Calculator", {"expression": "6*7"}),
        ("Calculator", {"expression": "1/0"}),
    ]
    assert (log[0]["output"], log[0]["error"]) == ([{"type": "text", "content": "42"}], None)
    assert log[1]["output"] is None
    assert "ZeroDivisionError" in log[1]["error"]["msg"]
    assert case["agent"]["answer"] == "The answer is 42."
    assert [s["role"] for s in case["steps"]] == [
        "assistant",
        "tool",
        "assistant",
        "tool",
        "assistant",
    ]
    assert (case["tool_calls"], case["tool_call_errors"]) == (2, 1)
    page = (pytester.path / "page.html").read_text(encoding="utf-8")
    detail = page[page.index(f'<template id="t-workflow-{TASK}">') :]
    detail = detail[: detail.index("</template>")]
    assert "The agent&#x27;s tool calls and answer" in detail
    assert detail.count('<b class="tool">Calculator</b>') == 2
    assert "<pre>6*7</pre>" in detail
    assert "2 tool call(s) logged by the server" in detail
