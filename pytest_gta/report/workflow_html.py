"""The self-contained HTML page of a GTA-Workflow run (``--gta-report-html`` on Workflow data).

The run's page in the atomic report's shell (:func:`~pytest_gta.report.page.scripted_page`: its
stylesheet, ``report.js`` under a strict Content-Security-Policy, nothing fetched): the header
(model, dataset, judge, protocol, where the judge was reached, threshold, the SR note, a
warning when the judge did not follow the official protocol, another when tasks were judged on
an empty deliverable), the Workflow table as the terminal prints it
(:mod:`pytest_gta.report.workflow`), a row per task (filtered by outcome, searched, sorted; an
empty deliverable badged), and per task a drill-down: the checkpoint tree as the judge scored
it, the final answer, the deliverables, the producer's turns and tool calls (the atomic page's
renderer: :func:`~pytest_gta.report.html.turns_html`, :func:`~pytest_gta.report.html.agent_html`)
and each judge call (prompt, files and what became of each, reply, tokens).

It takes the typed report (:class:`~pytest_gta.results.workflow.WorkflowReport`) and scores
nothing. Every text from the report (requirements, answers, replies) is written escaped.
"""

from __future__ import annotations

from typing import get_args

from pytest_gta.flags import OPT_REPORT, OPT_REPORT_HTML_MAX_MB
from pytest_gta.report.explain import duration_text
from pytest_gta.report.html import PAGE_OVERHEAD, select_html, table_html
from pytest_gta.report.html_transcript import agent_html, turns_html
from pytest_gta.report.page import clip, esc, scripted_page
from pytest_gta.report.robustness import faulted_steps, faults_html
from pytest_gta.report.workflow import (
    COLUMNS,
    empty_line,
    judge_line,
    judge_where,
    note_line,
    table_row,
)
from pytest_gta.results.workflow import (
    EMPTY_DELIVERABLE,
    Checkpoint,
    JudgeCall,
    WorkflowCase,
    WorkflowOutcome,
    WorkflowReport,
)

#: The case table's columns: name and how ``report.js`` sorts it.
CASE_COLUMNS = (
    ("task", "text"),
    ("outcome", "text"),
    ("root score", "num"),
    ("checkpoints", "text"),
    ("files", "num"),
    ("producer", "text"),
    ("judge calls", "num"),
    ("message", "text"),
)
#: What the page says when the judge did not follow the official protocol.
NOT_OFFICIAL = (
    "The judge, {model} {where}, did not follow the official protocol ({api} API instead of "
    "the Responses API with uploads): these scores are not comparable with the GTA-2 board."
)
#: The outcome's box in a drill-down: a failure, an error, or a plain note for a pass.
MESSAGE_CLASS = {"failed": "why", "error": "error-record"}


def _score(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _facts(items: list[tuple[str, str]]) -> str:
    rows = "".join(f"<dt>{esc(k)}</dt><dd>{esc(v)}</dd>" for k, v in items)
    return f'<dl class="facts">{rows}</dl>'


def header_html(report: WorkflowReport) -> str:
    """The warning (not the official protocol), the run's facts, the Workflow table, the note."""
    judge = report.judge
    usage = report.judge_usage
    warning = ""
    if not judge.official:
        said = NOT_OFFICIAL.format(model=judge.model, where=judge_where(judge), api=judge.api)
        warning = f'<p class="warn" id="not-official">{esc(said)}</p>'
    empty = empty_line(report)
    if empty is not None:
        warning += f'<p class="warn" id="empty-deliverables">{esc(empty)}</p>'
    facts = [
        ("model", report.model),
        *([("label", report.label)] if report.label else []),
        ("dataset", report.dataset),
        ("judge", judge.model),
        ("protocol", "official" if judge.official else f"NOT official ({judge.api})"),
        ("judge API", judge.api),
        ("judge reached", judge_where(judge)),
        ("SR threshold", f"{judge.threshold:g}"),
        (
            "judge calls",
            f"{usage.calls} ({usage.cached_calls} cached), "
            f"{usage.input_tokens} tokens in, {usage.output_tokens} out",
        ),
    ]
    table = table_html("GTA-Workflow", [name for name, _ in COLUMNS], [table_row(report)])
    return (
        f'{warning}<section id="run"><p>{esc(judge_line(report))}</p>{_facts(facts)}</section>'
        f'<section id="tables"><h2>Tables</h2>{table}'
        f'<p class="muted" id="sr-note">{esc(note_line(report))}</p></section>'
    )


def _leaves(case: WorkflowCase) -> str:
    leaves = [c for c in case.checkpoints if c.leaf]
    return f"{sum(1 for c in leaves if c.succeeded)}/{len(leaves)}"


#: The badge of a task judged on nothing, in its row and its drill-down.
EMPTY_BADGE = (
    f'<span class="flag empty-deliverable" title="{esc(EMPTY_DELIVERABLE)}">'
    "empty deliverable</span>"
)


def _case_row(case: WorkflowCase) -> str:
    said = [case.id, case.task_id, case.message, case.final_answer]
    if case.empty_deliverable:
        said.append("empty deliverable")
    search = " ".join(said).lower()
    score = -1.0 if case.root_score is None else case.root_score
    flag = f" {EMPTY_BADGE}" if case.empty_deliverable else ""
    return (
        f'<tr class="case" data-id="{esc(case.id)}" data-outcome="{esc(case.outcome)}" '
        f'data-search="{esc(search)}">'
        f'<td><a href="#case={esc(case.id)}">{esc(case.id)}</a></td>'
        f'<td><span class="badge {esc(case.outcome)}">{esc(case.outcome)}</span>{flag}</td>'
        f'<td data-sort="{score:.6f}">{_score(case.root_score)}</td>'
        f"<td>{_leaves(case)}</td>"
        f'<td data-sort="{len(case.deliverables)}">{len(case.deliverables)}</td>'
        f"<td>{esc(case.producer)}</td>"
        f'<td data-sort="{len(case.judge_calls)}">{len(case.judge_calls)}</td>'
        f'<td class="msg">{esc(clip(case.message, 160))}</td></tr>'
    )


def cases_html(report: WorkflowReport) -> str:
    """The task table and its filters."""
    filters = (
        select_html("outcome", "outcome", list(get_args(WorkflowOutcome)))
        + '<label>search <input type="search" id="search" '
        'placeholder="id, message, answer"></label>'
    )
    headers = "".join(
        f'<th data-col="{i}" data-kind="{kind}" tabindex="0">{esc(name)}</th>'
        for i, (name, kind) in enumerate(CASE_COLUMNS)
    )
    rows = "".join(_case_row(case) for case in report.cases)
    shown = len(report.cases)
    return (
        f'<section id="cases"><h2>Tasks</h2><div class="filters">{filters}'
        f'<span id="shown">{shown} of {shown} cases</span></div>'
        f'<table id="case-table"><thead><tr>{headers}</tr></thead><tbody>{rows}</tbody></table>'
        "</section>"
    )


def _checkpoint_row(node: Checkpoint) -> str:
    succeeded = "" if node.succeeded is None else ("yes" if node.succeeded else "no")
    weight = "-" if node.weight is None else f"{node.weight:g}"
    kind = "leaf" if node.leaf else "node"
    return (
        f'<tr class="checkpoint {kind}" data-path="{esc(node.path)}">'
        f'<td style="padding-left:{0.3 + node.depth}em">{esc(node.path or "root")}</td>'
        f"<td>{esc(node.id)}</td><td>{esc(node.requirement)}</td><td>{weight}</td>"
        f"<td>{_score(node.score)}</td><td>{succeeded}</td><td>{esc(node.parsed or '')}</td>"
        f'<td class="analysis">{esc(clip(node.analysis or "", 4000))}</td></tr>'
    )


def checkpoints_html(case: WorkflowCase) -> str:
    """The checkpoint tree as the judge scored it, depth first, indented by depth."""
    if not case.checkpoints:
        return '<p class="muted">(no checkpoint: the judge did not reach the tree)</p>'
    head = "".join(
        f"<th>{h}</th>"
        for h in (
            "path",
            "id",
            "requirement",
            "weight",
            "score",
            "succeeded",
            "read as",
            "analysis",
        )
    )
    rows = "".join(_checkpoint_row(node) for node in case.checkpoints)
    return f'<table class="checkpoints"><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>'


def _call_html(index: int, call: JudgeCall, *, full: bool) -> str:
    files = "".join(
        f"<li>{esc(f.get('name', '?'))}: "
        f"{esc(', '.join(f'{k} {v}' for k, v in f.items() if k != 'name') or '-')}</li>"
        for f in call.files
    )
    summary = (
        f"call {index}: {call.input_tokens} tokens in, {call.output_tokens} out, "
        f"{'cached' if call.cached else 'not cached'}, {duration_text(call.duration)}"
    )
    parts = [f'<details class="judge-call"><summary>{esc(summary)}</summary>']
    if call.error:
        parts.append(f'<pre class="error-record">{esc(clip(call.error, 4000))}</pre>')
    parts.append(f"<h5>files</h5><ul>{files}</ul>" if files else '<p class="muted">no file</p>')
    if full:
        parts.append(f"<h5>prompt</h5><pre>{esc(clip(call.prompt))}</pre>")
        parts.append(f"<h5>reply</h5><pre>{esc(clip(call.reply))}</pre>")
    else:
        parts.append(f'<p class="muted">prompt and reply left out ({OPT_REPORT_HTML_MAX_MB})</p>')
    return "".join(parts) + "</details>"


def case_detail(case: WorkflowCase, *, full: bool = True) -> str:
    """One task's drill-down; ``full=False`` leaves out the judge's prompts and replies."""
    facts = [
        ("task", case.task_id),
        ("outcome", case.outcome),
        ("root score", _score(case.root_score)),
        ("checkpoints reached", _leaves(case)),
        ("producer", case.producer),
        (
            "tool calls",
            # An eval pack's calls are in its trace (below), not counted (Tool SR: docs/metrics.md).
            "not counted for an eval pack (its trace is below)"
            if case.producer == "evalpack"
            else f"{case.tool_calls} ({case.tool_call_errors} errors)",
        ),
        ("duration", duration_text(case.duration)),
    ]
    parts = [f"<h3>{esc(case.id)}</h3>", _facts(facts)]
    if case.empty_deliverable:
        parts.append(
            f'<p class="warn empty-deliverable">{EMPTY_BADGE} This task was {EMPTY_DELIVERABLE}'
            ": whatever score the judge gave, it judged nothing, so the task fails (its root "
            "score is kept as the judge gave it, the official number).</p>"
        )
    if case.message:
        # A passing task's message is a note, not a failure.
        box = MESSAGE_CLASS.get(case.outcome, "verdict")
        parts.append(f'<pre class="{box}">{esc(clip(case.message, 4000))}</pre>')
    if case.judge_error:
        parts.append(f'<pre class="error-record">judge error: {esc(case.judge_error)}</pre>')
    files = "".join(f"<li>{esc(name)}</li>" for name in case.deliverables)
    calls = "".join(_call_html(i, c, full=full) for i, c in enumerate(case.judge_calls, 1))
    parts += [
        "<h4>Checkpoints</h4>",
        checkpoints_html(case),
        f'<h4>Final answer</h4><pre class="answer">{esc(clip(case.final_answer))}</pre>',
        f"<h4>Deliverables</h4><ul>{files}</ul>" if files else "<h4>Deliverables</h4><p>none</p>",
        producer_html(case),
        f"<h4>Judge calls ({len(case.judge_calls)})</h4>{calls}",
    ]
    return "".join(parts)


def _no_image(_: str) -> str:
    """The Workflow page keeps no image store: an image output is shown by its path."""
    return ""


#: The heading of the producer's section, by producer.
PRODUCED_BY = {
    "model": "The model's turns and tool calls",
    "agent": "The agent's tool calls and answer (as the MCP server logged them)",
    "evalpack": "The eval pack's trace",
}


def producer_html(case: WorkflowCase) -> str:
    """What the producer did: its turns, each tool call with its arguments and output or error.

    With the atomic page's renderer, and an agent's run (its stderr, its model exchanges).
    """
    heading = PRODUCED_BY.get(case.producer, f"The trace of {case.producer}")
    if case.steps:
        chain = turns_html(case.steps, case.replies, _no_image, faulted=faulted_steps(case.faults))
    else:
        chain = '<p class="muted">(no step recorded)</p>'
    parts = [f'<section class="chains producer"><h4>{esc(heading)}</h4>{chain}</section>']
    parts.append(faults_html(case.faults))
    if case.agent is not None:
        parts.append(agent_html(case.agent, case.tool_log, case.exchanges))
    return "".join(parts)


def render_workflow_html(report: WorkflowReport, *, max_bytes: int = 10 * 1024 * 1024) -> str:
    """The whole page; past ``max_bytes`` the judge's prompts and replies are left out first."""
    head = header_html(report) + cases_html(report)

    def templates(full: bool) -> str:
        return "".join(
            f'<template id="t-{esc(c.id)}">{case_detail(c, full=full)}</template>'
            for c in report.cases
        )

    shown = templates(full=True)
    note = ""
    if len(head) + len(shown) + PAGE_OVERHEAD > max_bytes:
        shown = templates(full=False)
        note = (
            f'<p class="warn">To stay under {max_bytes / (1024 * 1024):g} MB '
            f"({esc(OPT_REPORT_HTML_MAX_MB)}), the judge's prompts and replies are left out; "
            f"the JSON report ({esc(OPT_REPORT)}) has them.</p>"
        )
    title = f"GTA-Workflow report: {report.label or report.model}"
    body = (
        f'<header><h1>{esc(title)}</h1><nav><a href="#tables">tables</a> '
        f'<a href="#cases">tasks</a></nav></header><main>{note}{head}'
    )
    return scripted_page(title, body, shown, {})
