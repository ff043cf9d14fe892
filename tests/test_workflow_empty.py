"""A GTA-Workflow task judged on nothing is flagged in every output, whatever the judge gave.

The reproduction of issue 38's finding 4, black-box in one subprocess run: the project's loop
runs two tasks of the bundled sample with a scripted model (task 2: two failed tool calls, then
an empty final answer, no file; task 4: an answer), and a judge served in pytest's process (a
scripted chat model, as SmolLM2 is served in the demo) answers every checkpoint "Your answer
is 100% correct", which the official number fallback reads as 10. The official arithmetic
stays (task 2's root score is 10, and so is the mean); task 2's test fails, and the terminal,
JUnit, the JSON report, the markdown and the page all say it was judged on an empty
deliverable. The page also names the judge (not the official protocol, served in pytest's
process), shows the model's turns and tool calls, and keeps task 4's passing message out of
the failure box.
"""

from __future__ import annotations

import html
import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.browser import Chromium, serve_directory
from tests.helpers.gta_run import GtaRun, gta_process
from tests.helpers.paths import ROOT

SAMPLE = ROOT / "fixtures" / "gta_workflow_sample"
EMPTY_TASK, ANSWERED_TASK = "workflow-2", "workflow-4"
REPLIES = [
    'Thought: add\nAction: Calculator\nAction Input: {"expression": "1/0"}',
    'Thought: read\nAction: OCR\nAction Input: {"image": "nope.png"}',
    "Thought: done\nFinal Answer:",
]
MODEL_SCRIPT = {
    "responses": {
        "e2e-2": REPLIES,
        "e2e-4": ["Thought: done\nFinal Answer: The deck has three slides."],
    }
}
JUDGE_SCRIPT = {"default": "Your answer is 100% correct."}
FLAG = "judged on an empty deliverable (no file, empty final answer)"


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[GtaRun, Path]:
    where = tmp_path_factory.mktemp("workflow-empty")
    model = where / "model.json"
    model.write_text(json.dumps(MODEL_SCRIPT), encoding="utf-8")
    judge = where / "judge.json"
    judge.write_text(json.dumps(JUDGE_SCRIPT), encoding="utf-8")
    done = gta_process(
        where,
        "-v",  # the header too (gta_process runs -q)
        f"--gta-data={SAMPLE}",
        f"--gta-model=mock:{model}",
        "--gta-ids=2,4",
        "--gta-tools=local",
        f"--gta-judge=mock:{judge}",
        "--gta-judge-api=chat",
        "--gta-cache=off",
        "--junitxml=gta.xml",
        "--gta-report-md=report.md",
        "--gta-report-html=report.html",
        check=False,
    )
    assert done.ret == 1, done.output[-3000:]  # task 2 fails
    return done, where


def _cases(run: tuple[GtaRun, Path]) -> dict[str, dict[str, Any]]:
    return {c["id"]: c for c in run[0].report["cases"]}


def test_the_task_fails_but_keeps_the_root_score_the_judge_gave(
    run: tuple[GtaRun, Path],
) -> None:
    cases = _cases(run)
    empty, answered = cases[EMPTY_TASK], cases[ANSWERED_TASK]
    assert (empty["root_score"], empty["outcome"], empty["passed"]) == (10.0, "failed", False)
    assert empty["empty_deliverable"] is True
    assert empty["final_answer"] == "(empty)"
    assert empty["deliverables"] == []
    assert empty["message"].startswith("the judge scored an empty deliverable")
    assert "root score 10/10 is kept as the judge gave it" in empty["message"]
    assert (answered["outcome"], answered["empty_deliverable"]) == ("passed", False)
    metrics = run[0].report["metrics"]
    # The official arithmetic: both root scores in the mean, as the official scorer has them.
    assert (metrics["root_score"], metrics["scored"], metrics["empty_deliverables"]) == (10.0, 2, 1)


def test_the_terminal_says_it_per_task_and_in_the_summary(run: tuple[GtaRun, Path]) -> None:
    output = run[0].output
    task_line = next(line for line in output.splitlines() if f"  {EMPTY_TASK}: " in line)
    assert task_line.endswith(f"EMPTY DELIVERABLE: {FLAG}")
    assert f"{ANSWERED_TASK}: passed root 10.00" in output
    assert "EMPTY DELIVERABLE" not in next(
        line for line in output.splitlines() if f"  {ANSWERED_TASK}: " in line
    )
    assert f"WARNING: 1 of 2 tasks {FLAG}: {EMPTY_TASK}; their tests fail" in output
    assert f"FAILED gta::test_workflow[{EMPTY_TASK}] - Failed: {EMPTY_TASK}: the judge" in output
    assert f"{EMPTY_TASK}: the judge scored an empty deliverable (no file" in output
    assert "WorkflowCase(" not in output  # the message, not the case's repr


def test_junit_carries_the_flag_and_the_failure(run: tuple[GtaRun, Path]) -> None:
    tree = ET.parse(run[1] / "gta.xml")
    cases = {c.get("name"): c for c in tree.iter("testcase")}
    empty = cases[f"test_workflow[{EMPTY_TASK}]"]
    props = {p.get("name"): p.get("value") for p in empty.iter("property")}
    assert props["gta_empty_deliverable"] == "True"
    assert props["gta_passed"] == "False"
    assert props["gta_root_score"] == "10.0"
    failure = empty.find("failure")
    assert failure is not None
    assert "the judge scored an empty deliverable" in (failure.get("message") or "")
    answered = cases[f"test_workflow[{ANSWERED_TASK}]"]
    props = {p.get("name"): p.get("value") for p in answered.iter("property")}
    assert props["gta_empty_deliverable"] == "False"
    assert answered.find("failure") is None


def test_the_markdown_warns_and_flags_the_task(run: tuple[GtaRun, Path]) -> None:
    text = (run[1] / "report.md").read_text(encoding="utf-8")
    assert f"**Warning**: 1 of 2 tasks {FLAG}: {EMPTY_TASK}" in text
    assert (
        f"- {EMPTY_TASK}: failed root 10.00, 2/2 checkpoints, 0 files (model) EMPTY DELIVERABLE"
        in text
    )
    assert "in pytest's process (mock:" in text
    assert "**NOT the official protocol**" in text


def _templates(page: str) -> dict[str, str]:
    return dict(re.findall(r'<template id="t-([^"]+)">(.*?)</template>', page, re.S))


def _row(page: str, case_id: str) -> str:
    found = re.search(rf'<tr class="case" data-id="{case_id}".*?</tr>', page, re.S)
    assert found is not None, case_id
    return found.group(0)


def test_the_page_badges_warns_and_names_the_judge(run: tuple[GtaRun, Path]) -> None:
    page = (run[1] / "report.html").read_text(encoding="utf-8")
    warning = re.search(r'<p class="warn" id="empty-deliverables">([^<]*)</p>', page)
    assert warning is not None
    assert html.unescape(warning.group(1)).startswith(f"1 of 2 tasks {FLAG}")
    assert 'class="flag empty-deliverable"' in _row(page, EMPTY_TASK)
    assert "empty-deliverable" not in _row(page, ANSWERED_TASK)
    judge = run[0].report["judge"]["model"]
    where = f"in pytest's process ({judge} via the chat protocol)"
    assert f"<dt>judge reached</dt><dd>{html.escape(where)}</dd>" in page
    not_official = re.search(r'<p class="warn" id="not-official">([^<]*)</p>', page)
    assert not_official is not None
    assert html.unescape(not_official.group(1)).startswith(f"The judge, {judge} {where}, did not")
    templates = _templates(page)
    empty, answered = templates[EMPTY_TASK], templates[ANSWERED_TASK]
    assert '<p class="warn empty-deliverable">' in empty
    assert '<pre class="why">the judge scored an empty deliverable' in empty
    # A passing task's message is a note, not in the failure box.
    assert '<pre class="verdict">root score 10/10 (at or above the threshold 7)' in answered
    assert 'class="why"' not in answered
    assert "empty-deliverable" not in answered


def test_the_report_and_page_keep_every_tool_call_and_turn(run: tuple[GtaRun, Path]) -> None:
    case = _cases(run)[EMPTY_TASK]
    assert case["replies"] == [r.strip() for r in REPLIES]
    calls = [s for s in case["steps"] if s.get("tool_calls")]
    assert [
        (c["tool_calls"][0]["function"]["name"], c["tool_calls"][0]["function"]["arguments"])
        for c in calls
    ] == [("Calculator", {"expression": "1/0"}), ("OCR", {"image": "nope.png"})]
    assert [c["error"]["type"] for c in calls] == ["API_ERROR", "API_ERROR"]
    assert "ZeroDivisionError" in calls[0]["error"]["msg"]
    assert [s["content"] for s in case["steps"] if s["role"] == "tool"] == [None, None]
    assert case["steps"][-1] == {"role": "assistant", "content": ""}
    assert (case["tool_calls"], case["tool_call_errors"]) == (2, 2)
    detail = _templates((run[1] / "report.html").read_text(encoding="utf-8"))[EMPTY_TASK]
    section = detail[detail.index("<h4>The model&#x27;s turns and tool calls</h4>") :]
    shown = re.findall(r'<b class="tool">([^<]+)</b>', section)
    assert shown == ["Calculator", "OCR"]
    assert "<pre>1/0</pre>" in section
    assert "API_ERROR: ZeroDivisionError" in section
    assert section.count("<summary>raw reply</summary>") == 3


def test_the_drilldown_shows_the_flag_in_a_browser(
    run: tuple[GtaRun, Path], chromium: Chromium
) -> None:
    _, where = run
    with serve_directory(where) as server:
        result = chromium.dump_dom(f"{server.url('report.html')}#case={EMPTY_TASK}")
    assert result.csp_violations == [], result.stderr[-3000:]
    panel = re.search(
        r'<section id="drilldown" data-case="([^"]+)">(.*?)</section>', result.dom, re.S
    )
    assert panel is not None
    assert panel.group(1) == EMPTY_TASK
    assert "empty deliverable</span> This task was judged on an empty deliverable" in panel.group(2)
