"""A GTA-Workflow run's other outputs: ``--gta-report-md``, the job summary, ``--gta-report-html``.

One real run, black-box in a subprocess: the bundled Workflow sample scored from an eval pack
(``tests/data/workflow/pack.json``, its files found by absolute path, one requirement and one
answer made hostile) against the scripted judge server. The markdown and the page must show
the JSON report's numbers, every task's checkpoints and analyses and every judge call, every
text escaped; the page renders in headless Chromium with no policy violation and no request
but its own. A report whose judge did not follow the official protocol is rendered directly.
"""

from __future__ import annotations

import html
import json
import os
import re
from pathlib import Path
from typing import Any

import pytest

from pytest_gta.evalpack import select_trace
from pytest_gta.report.workflow import COLUMNS, render_markdown
from pytest_gta.report.workflow_html import render_workflow_html
from pytest_gta.results.workflow import WorkflowReport, load_workflow_report
from tests.helpers.browser import Chromium, serve_directory
from tests.helpers.gta_run import GtaRun, gta_process
from tests.helpers.judge_server import JudgeServer
from tests.helpers.paths import ROOT

DATA = ROOT / "tests" / "data" / "workflow"
SAMPLE = ROOT / "fixtures" / "gta_workflow_sample"
HOSTILE_REQUIREMENT = '<script>alert("req")</script> & [link](http://x.invalid) | *bold*'
HOSTILE_ANSWER = '<img src="http://x.invalid/a.png"> done | `code`'
HOSTILE_LABEL = "<b>run</b> | [x](http://x.invalid)"
EARLIER_SUMMARY = "## an earlier step's summary\n"


def _absolute(files: Any) -> Any:
    """The pack's file entries (nested lists of paths) as absolute paths."""
    if isinstance(files, list):
        return [_absolute(f) for f in files]
    return str(DATA / files)


def _hostile_pack(where: Path) -> Path:
    """``pack.json`` with absolute file paths, a ``<script>`` requirement and an HTML answer."""
    pack: dict[str, Any] = json.loads((DATA / "pack.json").read_text(encoding="utf-8"))
    for task in pack["tasks"]:
        task["attached_files"] = _absolute(task["attached_files"])
    first = pack["tasks"][0]
    node = first["full_tree"][0]
    while node.get("sub_tasks"):
        node = node["sub_tasks"][0]
    node["requirements"] = HOSTILE_REQUIREMENT
    first["assistant_outputs"][0][-1]["content"] = HOSTILE_ANSWER
    path = where / "pack.json"
    path.write_text(json.dumps(pack), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[GtaRun, Path]:
    """The sample scored from the hostile pack, with the markdown, the page and a job summary."""
    where = tmp_path_factory.mktemp("workflow-outputs")
    pack = _hostile_pack(where)
    summary = where / "summary.md"
    summary.write_text(EARLIER_SUMMARY, encoding="utf-8")
    server = JudgeServer.from_script(DATA / "judge_script.json").start()
    try:
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("OPENAI_API_KEY", "sk-test")
            mp.setenv("GITHUB_STEP_SUMMARY", str(summary))
            # The run imports this checkout, whatever a relative PYTHONPATH or an editable
            # install of another one would give in the run's directory.
            mp.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
            done = gta_process(
                where,
                f"--gta-data={SAMPLE}",
                f"--gta-model=evalpack:{pack}",
                # The pack attaches the deliverables of tests/data/workflow by absolute path.
                f"--gta-evalpack-root={DATA}",
                "--gta-judge=openai/gpt-5.2",
                f"--gta-judge-base-url={server.base_url}",
                "--gta-concurrency=1",
                "--gta-cache=off",
                "--gta-report-md=report.md",
                "--gta-report-html=report.html",
                f"--gta-label={HOSTILE_LABEL}",
                check=False,
            )
    finally:
        server.stop()
    assert done.ret == 1, done.output[-3000:]  # some tasks fail their threshold
    return done, where


def _report(where: Path) -> WorkflowReport:
    return load_workflow_report(where / "gta.json")


def _cells(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _templates(page: str) -> dict[str, str]:
    return dict(re.findall(r'<template id="t-([^"]+)">(.*?)</template>', page, re.S))


def test_the_terminal_says_where_each_file_went(run: tuple[GtaRun, Path]) -> None:
    done, where = run
    for name in ("gta.json", "report.md", "report.html"):
        assert f"report written to {where / name}" in done.output or (
            f"report written to {name}" in done.output
        ), name
    assert "could not write" not in done.output


def test_markdown_shows_the_reports_numbers_judge_and_tasks(run: tuple[GtaRun, Path]) -> None:
    _, where = run
    report = _report(where)
    text = (where / "report.md").read_text(encoding="utf-8")
    metrics = report.metrics
    header = "| " + " | ".join(name for name, _ in COLUMNS) + " |"
    row = "| " + " | ".join(_cells(getattr(metrics, key)) for _, key in COLUMNS) + " |"
    lines = text.splitlines()
    assert lines[lines.index(header) + 2] == row
    assert metrics.root_score is not None
    assert metrics.scored > 0
    assert f"judged by {report.judge.model} (official protocol)" in text
    assert f"{metrics.scored} of {metrics.tasks} tasks scored" in text
    assert report.sr_note in text
    for case in report.cases:
        score = "-" if case.root_score is None else f"{case.root_score:.2f}"
        assert f"- {case.id}: {case.outcome} root {score}," in text, case.id
    # The label is shown literally, escaped as the atomic markdown escapes it.
    assert report.label == HOSTILE_LABEL
    assert "- label: \\<b\\>run\\</b\\> \\| \\[x\\](http://x.invalid)" in lines


def test_the_job_summary_gets_the_markdown_after_earlier_steps(run: tuple[GtaRun, Path]) -> None:
    _, where = run
    summary = (where / "summary.md").read_text(encoding="utf-8")
    markdown = (where / "report.md").read_text(encoding="utf-8")
    assert summary == EARLIER_SUMMARY + markdown + "\n"


def test_the_page_shows_the_table_every_checkpoint_and_judge_call(
    run: tuple[GtaRun, Path],
) -> None:
    _, where = run
    report = _report(where)
    page = (where / "report.html").read_text(encoding="utf-8")
    cells = re.search(r'<table class="gta-table">.*?<tbody><tr>(.*?)</tr>', page, re.S)
    assert cells is not None
    expected = [_cells(getattr(report.metrics, key)) for _, key in COLUMNS]
    assert re.findall(r"<td>([^<]*)</td>", cells.group(1)) == expected
    assert html.escape(report.sr_note, quote=True) in page
    assert 'id="not-official"' not in page
    rows = re.findall(r'<tr class="case" data-id="([^"]+)" data-outcome="([^"]+)"', page)
    assert rows == [(c.id, c.outcome) for c in report.cases]
    templates = _templates(page)
    assert sorted(templates) == sorted(c.id for c in report.cases)
    for case in report.cases:
        detail = templates[case.id]
        shown = re.findall(r'<tr class="checkpoint (?:leaf|node)" data-path="([^"]*)">', detail)
        assert shown == [c.path for c in case.checkpoints], case.id
        for node in case.checkpoints:
            assert html.escape(node.requirement, quote=True) in detail, (case.id, node.path)
            if node.analysis:
                assert html.escape(node.analysis, quote=True) in detail, (case.id, node.path)
        assert detail.count('<details class="judge-call">') == len(case.judge_calls), case.id
        for call in case.judge_calls:
            assert html.escape(call.reply, quote=True) in detail, case.id
            for sent in call.files:
                assert html.escape(sent["name"], quote=True) in detail, case.id
        for name in case.deliverables:
            assert f"<li>{html.escape(name, quote=True)}</li>" in detail, case.id
        assert html.escape(case.final_answer, quote=True) in detail, case.id
    # The hostile texts reached the page only as text.
    assert HOSTILE_REQUIREMENT in {n.requirement for c in report.cases for n in c.checkpoints}
    assert html.escape(HOSTILE_REQUIREMENT, quote=True) in page
    assert 'alert("req")' not in page
    assert '<img src="http://x.invalid' not in page
    assert "<b>run</b>" not in page
    assert html.escape(HOSTILE_LABEL, quote=True) in page


def test_the_page_renders_in_chromium_without_a_request(
    run: tuple[GtaRun, Path], chromium: Chromium
) -> None:
    _, where = run
    first = _report(where).cases[0]
    with serve_directory(where) as server:
        result = chromium.dump_dom(f"{server.url('report.html')}#case={first.id}")
        requests = [(r.method, r.path, r.status) for r in server.requests]
    assert requests == [("GET", "/report.html", 200)]
    assert result.csp_violations == [], result.stderr[-3000:]
    dom = result.dom
    assert 'data-ready="1"' in dom
    assert 'data-csp-violations="0"' in dom
    # The drill-down of the first task is open, its checkpoint tree laid out.
    panel = re.search(r'<section id="drilldown" data-case="([^"]+)">(.*?)</section>', dom, re.S)
    assert panel is not None
    assert panel.group(1) == first.id
    assert html.escape(HOSTILE_REQUIREMENT, quote=False) in panel.group(2)
    assert "<script>alert" not in dom


def test_a_judge_off_the_official_protocol_is_said_everywhere(run: tuple[GtaRun, Path]) -> None:
    _, where = run
    official = _report(where)
    chat = official.model_copy(deep=True)
    chat.judge.official = False
    chat.judge.api = "chat"
    page = render_workflow_html(chat)
    warning = re.search(r'<p class="warn" id="not-official">([^<]*)</p>', page)
    assert warning is not None
    assert "not comparable with the GTA-2 board" in warning.group(1)
    assert "chat API" in warning.group(1)
    markdown = render_markdown(chat)
    assert "(**NOT the official protocol** (chat))" in markdown
    assert "NOT the official" not in render_markdown(official)
    assert 'id="not-official"' not in render_workflow_html(official)


def test_the_page_leaves_out_the_judges_prompts_to_stay_under_its_size(
    run: tuple[GtaRun, Path],
) -> None:
    _, where = run
    report = _report(where)
    whole = render_workflow_html(report)
    prompt = next(call.prompt for case in report.cases for call in case.judge_calls)
    assert html.escape(prompt, quote=True) in whole
    small = render_workflow_html(report, max_bytes=len(whole) - 1)
    assert html.escape(prompt, quote=True) not in small
    assert "the judge's prompts and replies are left out" in small
    # The checkpoints stay.
    for case in report.cases:
        for node in case.checkpoints:
            assert html.escape(node.requirement, quote=True) in small


def test_the_pack_trace_is_kept_and_each_message_sits_in_its_outcomes_box(
    run: tuple[GtaRun, Path],
) -> None:
    """An eval pack's trace is the report's steps and the drill-down's chain, as it is."""
    _, where = run
    report = _report(where)
    pack = json.loads((where / "pack.json").read_text(encoding="utf-8"))
    traces = {}
    for task in pack["tasks"]:
        trace = select_trace(task["assistant_outputs"])  # the official scorer's choice
        traces[str(task["task_id"])] = trace if isinstance(trace, list) else [trace]
    templates = _templates((where / "report.html").read_text(encoding="utf-8"))
    for case in report.cases:
        assert [s.root for s in case.steps] == traces[case.task_id], case.id
        assert case.replies == []
        detail = templates[case.id]
        assert "<h4>The eval pack&#x27;s trace</h4>" in detail, case.id
        assert "<dd>not counted for an eval pack (its trace is below)</dd>" in detail
        calls = [s.call.name for s in case.steps if s.call is not None]
        assert re.findall(r'<b class="tool">([^<]+)</b>', detail) == calls, case.id
        box = {"failed": "why", "error": "error-record", "passed": "verdict"}[case.outcome]
        assert f'<pre class="{box}">{html.escape(case.message[:40], quote=True)}' in detail
    assert "ReadPDF" in templates["workflow-1"]
    assert report.judge.served == "endpoint"
    assert report.judge.base_url is not None
    page = (where / "report.html").read_text(encoding="utf-8")
    assert f"<dt>judge reached</dt><dd>at {html.escape(report.judge.base_url)}</dd>" in page
