"""The terminal's GTA-Workflow table: the board's columns for this run, and each task's score.

Takes the typed report (:class:`~pytest_gta.results.workflow.WorkflowReport`) and scores
nothing: the numbers were computed when the run ended.
"""

from __future__ import annotations

from pytest_gta.results.workflow import WorkflowReport

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


def table_lines(report: WorkflowReport) -> list[str]:
    """The table, the judge line, the SR note and one line per task."""
    metrics = report.metrics
    judge = report.judge
    protocol = "official protocol" if judge.official else "NOT the official protocol (chat)"
    lines = [
        f"GTA-Workflow: {report.model}, judged by {judge.model} ({protocol}); "
        f"{metrics.scored} of {metrics.tasks} tasks scored, {metrics.judge_errors} judge errors",
    ]
    width = max(len(name) for name, _ in COLUMNS) + 2
    lines.append("".join(name.rjust(width) for name, _ in COLUMNS))
    lines.append("".join(_cell(getattr(metrics, key)).rjust(width) for _, key in COLUMNS))
    lines.append(
        f"Root Score is the official mean (0-10) over scored tasks; SRs count a checkpoint at "
        f"or above {judge.threshold:g}. {report.sr_note}."
    )
    for case in report.cases:
        score = "-" if case.root_score is None else f"{case.root_score:.2f}"
        leaves = [c for c in case.checkpoints if c.leaf]
        ok = sum(1 for c in leaves if c.succeeded)
        tail = f" judge error: {case.judge_error}" if case.judge_error else ""
        lines.append(
            f"  {case.id}: {case.outcome} root {score}, {ok}/{len(leaves)} checkpoints, "
            f"{len(case.deliverables)} files ({case.producer}){tail}"
        )
    return lines
