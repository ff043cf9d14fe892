"""The GTA-Workflow table, in the terminal and as markdown: the board's columns, each task.

Takes the typed report (:class:`~pytest_gta.results.workflow.WorkflowReport`) and scores
nothing: the numbers were computed when the run ended.
"""

from __future__ import annotations

from pytest_gta.report.table import markdown_items, markdown_table, markdown_text, strong
from pytest_gta.results.workflow import WorkflowCase, WorkflowReport

COLUMNS = (
    ("Tool SR", "tool_sr"),
    ("P-SR", "p_sr"),
    ("O-SR", "o_sr"),
    ("L-SR", "l_sr"),
    ("C-SR", "c_sr"),
    ("Root Score", "root_score"),
    ("Leaf SR", "leaf_sr"),
    ("Root SR", "root_sr"),
)


def _cell(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def judge_line(report: WorkflowReport, *, marked: bool = False) -> str:
    """Who judged, under which protocol, and how many tasks were scored.

    ``marked``: the words "NOT the official protocol" in :func:`~pytest_gta.report.table.strong`'s
    marks, for markdown.
    """
    metrics = report.metrics
    judge = report.judge
    unofficial = "NOT the official protocol"
    if marked:
        unofficial = strong(unofficial)
    protocol = "official protocol" if judge.official else f"{unofficial} ({judge.api})"
    return (
        f"GTA-Workflow: {report.model}, judged by {judge.model} ({protocol}); "
        f"{metrics.scored} of {metrics.tasks} tasks scored, {metrics.judge_errors} judge errors"
    )


def note_line(report: WorkflowReport) -> str:
    """What Root Score and the SRs mean here, with the SR note."""
    return (
        f"Root Score is the official mean (0-10) over scored tasks; SRs count a checkpoint at "
        f"or above {report.judge.threshold:g}. {report.sr_note}."
    )


def table_row(report: WorkflowReport) -> list[str]:
    """The Workflow table's one row, as the terminal shows it (``-`` where there is no value)."""
    return [_cell(getattr(report.metrics, key)) for _, key in COLUMNS]


def task_line(case: WorkflowCase) -> str:
    """One task: outcome, root score, checkpoints reached, files, where they came from."""
    score = "-" if case.root_score is None else f"{case.root_score:.2f}"
    leaves = [c for c in case.checkpoints if c.leaf]
    ok = sum(1 for c in leaves if c.succeeded)
    tail = f" judge error: {case.judge_error}" if case.judge_error else ""
    return (
        f"{case.id}: {case.outcome} root {score}, {ok}/{len(leaves)} checkpoints, "
        f"{len(case.deliverables)} files ({case.producer}){tail}"
    )


def table_lines(report: WorkflowReport) -> list[str]:
    """The table, the judge line, the SR note and one line per task."""
    width = max(len(name) for name, _ in COLUMNS) + 2
    return [
        judge_line(report),
        "".join(name.rjust(width) for name, _ in COLUMNS),
        "".join(cell.rjust(width) for cell in table_row(report)),
        note_line(report),
        *(f"  {task_line(case)}" for case in report.cases),
    ]


def render_markdown(report: WorkflowReport) -> str:
    """The same as markdown (``--gta-report-md``, GitHub's job summary), every text escaped."""
    facts = [judge_line(report, marked=True), f"dataset: {report.dataset}"]
    if report.label:
        facts.insert(0, f"label: {report.label}")
    lines = ["# GTA-Workflow results", "", *markdown_items(facts), "", "## Workflow", ""]
    lines += markdown_table([name for name, _ in COLUMNS], [table_row(report)])
    lines += ["", markdown_text(note_line(report)), "", "## Tasks", ""]
    lines += markdown_items([task_line(case) for case in report.cases])
    return "\n".join(lines) + "\n"
