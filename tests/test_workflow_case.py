"""One GTA-Workflow case built from a deliverable, and the run's table, directly (no pytest run).

:func:`pytest_gta.run.workflow.judged_case` with a judge answering here (a ``BaseJudge`` whose
call returns a fixed reply): what counts as an empty deliverable, what its case says, that any
trace an eval pack or a producer hands over ends in a case that is written and read back, and
that the table shows no rate over tasks none of which was scored. Where the judge was reached
is said as the run used it, in the renderers' words.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pytest_gta.judge.client import BaseJudge, CallLog
from pytest_gta.report.workflow import judge_where, render_markdown, table_lines
from pytest_gta.report.workflow_html import render_workflow_html
from pytest_gta.results.workflow import (
    JudgeInfo,
    WorkflowCase,
    WorkflowReport,
    dump_workflow_report,
)
from pytest_gta.run.workflow import Deliverable, is_empty, judged_case
from pytest_gta.scoring.workflow import workflow_table

#: A checkpoint tree of two leaves.
TREE = [{"id": "1", "requirements": "a file"}, {"id": "2", "requirements": "an answer"}]
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4)
    ),
    max_leaves=20,
)


class Fixed(BaseJudge):
    """A judge that answers every checkpoint with ``reply`` (or fails, for ``None``)."""

    def __init__(self, reply: str | None) -> None:
        super().__init__("fixed", None, None, None)
        self.reply = reply

    def call(self, prompt: str, files: Any, log: CallLog, workdir: str) -> tuple[str, int, int]:
        if self.reply is None:
            raise ConnectionError("the judge is down")
        return self.reply, 10, 2


def _case(
    deliverable: Deliverable, reply: str | None = "Your answer is 100% correct."
) -> WorkflowCase:
    return judged_case(
        case_id="workflow-1",
        task_id="1",
        nodeid="gta::test_workflow[workflow-1]",
        epoch=None,
        task=None,
        deliverable=deliverable,
        make_judge=lambda: Fixed(reply),
        threshold=7.0,
        started=0.0,
    )


def _deliverable(trace: Any, files: Any = (), **more: Any) -> Deliverable:
    return Deliverable(
        origin_prompt=["the task"],
        trace=trace,
        files=list(files),
        tree=TREE,
        producer="model",
        **more,
    )


def test_what_counts_as_an_empty_deliverable(tmp_path: Path) -> None:
    made = tmp_path / "table.csv"
    made.write_text("a,b\n", encoding="utf-8")
    silent = [{"role": "assistant", "content": "  "}]
    assert is_empty(_deliverable(silent))
    assert is_empty(_deliverable([]))
    assert is_empty(_deliverable(None))
    # A file named but not there is no deliverable.
    assert is_empty(_deliverable(silent, [str(tmp_path / "missing.pdf")]))
    # One the judge leaves out (a CSV) is still the producer's work.
    assert not is_empty(_deliverable(silent, [str(made)]))
    assert not is_empty(_deliverable([{"role": "assistant", "content": "done"}]))
    assert not is_empty(_deliverable("a bare answer"))
    # Files the official code fails on (an object without a path) are no deliverable either.
    assert is_empty(_deliverable(silent, [{"no": "path"}]))


def test_an_empty_deliverable_fails_and_keeps_its_root_score() -> None:
    case = _case(_deliverable([{"role": "assistant", "content": ""}]))
    assert (case.root_score, case.outcome, case.passed, case.empty_deliverable) == (
        10.0,
        "failed",
        False,
        True,
    )
    assert case.message.startswith("the judge scored an empty deliverable")
    assert "2 of 2 checkpoints reached the threshold 7" in case.message
    low = _case(_deliverable([]), reply='{"score": 2}')
    assert (low.outcome, low.empty_deliverable, low.root_score) == ("failed", True, 2.0)
    broken = _case(_deliverable([]), reply=None)
    assert (broken.outcome, broken.empty_deliverable) == ("error", True)
    assert broken.message.endswith(
        "the task was judged on an empty deliverable (no file, empty final answer)"
    )
    answered = _case(_deliverable([{"role": "assistant", "content": "done"}]))
    assert (answered.outcome, answered.passed, answered.empty_deliverable) == (
        "passed",
        True,
        False,
    )


def test_the_producers_turns_and_agent_run_are_kept() -> None:
    trace = [
        {
            "role": "assistant",
            "tool_calls": [
                {
                    "type": "function",
                    "function": {"name": "Calculator", "arguments": {"expression": "6*7"}},
                }
            ],
        },
        {"role": "tool", "content": [{"type": "text", "content": "42"}]},
        {"role": "assistant", "content": "42"},
    ]
    agent = {"name": "agent.py:run", "answer": "42", "duration": 0.5}
    log = [
        {
            "name": "Calculator",
            "arguments": {"expression": "6*7"},
            "output": [{"type": "text", "content": "42"}],
            "error": None,
            "duration": 0.01,
        }
    ]
    case = _case(_deliverable(trace, replies=["r1", "r2"], agent=agent, tool_log=log, exchanges=[]))
    assert [s.root for s in case.steps] == trace
    assert case.replies == ["r1", "r2"]
    assert case.agent is not None
    assert case.agent.answer == "42"
    assert case.tool_log is not None
    assert case.tool_log[0].name == "Calculator"
    assert case.exchanges == []


@given(trace=JSON, files=JSON)
@settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow])
def test_any_trace_ends_in_a_case_that_is_written_and_read_back(trace: Any, files: Any) -> None:
    """NaN, lone surrogates, deep or odd values from a pack or a producer never break a case."""
    case = _case(_deliverable(trace, files if isinstance(files, list) else [files]))
    assert case.outcome in ("passed", "failed", "error")
    report = _report([case])
    again = WorkflowReport.model_validate(json.loads(dump_workflow_report(report)))
    assert again.cases[0].steps == case.steps
    assert again.cases[0].empty_deliverable is case.empty_deliverable


def _report(cases: list[WorkflowCase], judge: JudgeInfo | None = None) -> WorkflowReport:
    info = judge or JudgeInfo(
        model="gpt-5.2",
        api="responses",
        official=True,
        base_url=None,
        served="openai",
        threshold=7.0,
    )
    return WorkflowReport(
        model="m",
        dataset="d",
        judge=info,
        metrics=workflow_table(cases, 7.0),
        judge_usage={"input_tokens": 0, "output_tokens": 0, "calls": 0, "cached_calls": 0},
        cases=cases,
    )


def _categorised(case: WorkflowCase, *categories: str) -> WorkflowCase:
    return case.model_copy(update={"categories": list(categories)})


def test_no_rate_over_tasks_none_of_which_was_scored() -> None:
    broken = _categorised(_case(_deliverable([]), reply=None), "perception")
    table = workflow_table([broken, broken], 7.0)
    assert (table.scored, table.root_score, table.root_sr, table.p_sr, table.leaf_sr) == (
        0,
        None,
        None,
        None,
        None,
    )
    assert table.judge_errors == 2
    zero = _report([broken])
    assert ["-"] * 8 in [line.split() for line in table_lines(zero)]
    assert "| - | - | - | - | - | - | - | - |" in render_markdown(zero)
    page = render_workflow_html(zero)
    cells = re.search(r'<table class="gta-table">.*?<tbody><tr>(.*?)</tr>', page, re.S)
    assert cells is not None
    assert re.findall(r"<td>([^<]*)</td>", cells.group(1)) == ["-"] * 8
    # One scored task in the category: the unscored one counts as a failure, as before.
    good = _categorised(_case(_deliverable([{"role": "assistant", "content": "ok"}])), "perception")
    table = workflow_table([good, broken], 7.0)
    assert (table.root_sr, table.p_sr, table.o_sr) == (50.0, 50.0, None)
    assert table.root_score is not None
    assert math.isclose(table.root_score, 10.0)


@pytest.mark.parametrize(
    ("served", "url", "said"),
    [
        ("openai", None, "at the OpenAI API"),
        ("endpoint", "http://127.0.0.1:8000/v1", "at http://127.0.0.1:8000/v1"),
        ("process", None, "in pytest's process (smollm2 via the chat protocol)"),
        (None, "http://judge.example/v1", "at http://judge.example/v1"),  # an older report
        (
            None,
            None,
            "at the OpenAI API or in pytest's process (a report of an earlier version: "
            "not recorded)",
        ),
    ],
)
def test_where_the_judge_was_reached_is_said_as_recorded(
    served: Any, url: str | None, said: str
) -> None:
    info = JudgeInfo(
        model="smollm2", api="chat", official=False, base_url=url, served=served, threshold=7.0
    )
    assert judge_where(info) == said
    page = render_workflow_html(_report([], info))
    assert f"<dt>judge reached</dt><dd>{said.replace(chr(39), '&#x27;')}</dd>" in page
    assert said.replace("'", "&#x27;") in page[page.index('id="not-official"') :]
