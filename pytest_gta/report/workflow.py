"""The GTA-Workflow table, in the terminal and as markdown: the board's columns, each task.

Also the published rows under it, the comparison with a baseline, the gates' verdicts, and
``--gta-compare``'s table of Workflow runs. Takes the typed report
(:class:`~pytest_gta.results.workflow.WorkflowReport`) and scores nothing: the numbers were
computed when the run ended.
"""

from __future__ import annotations

from pytest_gta.report.robustness import robustness_tables
from pytest_gta.report.table import (
    aligned,
    markdown_items,
    markdown_table,
    markdown_text,
    strong,
)
from pytest_gta.results.report import GatesVerdict
from pytest_gta.results.workflow import (
    EMPTY_DELIVERABLE,
    JudgeInfo,
    WorkflowCase,
    WorkflowComparison,
    WorkflowReport,
    WorkflowRuns,
)
from pytest_gta.results.workflow_board import WorkflowBoardRow, WorkflowColumns

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


def judge_where(judge: JudgeInfo) -> str:
    """Where the judge was reached, as the run used it: ``at URL``, ``in pytest's process``...

    A report from before pytest-gta recorded it says so rather than guess.
    """
    if judge.served == "process":
        return f"in pytest's process ({judge.model} via the chat protocol)"
    if judge.served == "openai":
        return "at the OpenAI API"
    if judge.base_url is not None:
        return f"at {judge.base_url}"
    return "at the OpenAI API or in pytest's process (a report of an earlier version: not recorded)"


def empty_line(report: WorkflowReport) -> str | None:
    """How many tasks the judge scored on nothing, which, and what that means (``None``: none)."""
    empty = [c.id for c in report.cases if c.empty_deliverable]
    if not empty:
        return None
    return (
        f"{len(empty)} of {report.metrics.tasks} tasks {EMPTY_DELIVERABLE}: "
        f"{', '.join(empty)}; their tests fail, and their root scores are the judge's (kept in "
        "Root Score and the SRs, as the official scorer keeps them)"
    )


def judge_line(report: WorkflowReport, *, marked: bool = False) -> str:
    """Who judged, under which protocol and where, and how many tasks were scored.

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
        f"GTA-Workflow: {report.model}, judged by {judge.model} ({protocol}) "
        f"{judge_where(judge)}; {metrics.scored} of {metrics.tasks} tasks scored, "
        f"{metrics.judge_errors} judge errors"
        + (
            f", {metrics.production_errors} produced nothing (counted 0)"
            if metrics.production_errors
            else ""
        )
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
    if case.empty_deliverable:
        tail += f" EMPTY DELIVERABLE: {EMPTY_DELIVERABLE}"
    return (
        f"{case.id}: {case.outcome} root {score}, {ok}/{len(leaves)} checkpoints, "
        f"{len(case.deliverables)} files ({case.producer}){tail}"
    )


WIDTH = max(len(name) for name, _ in COLUMNS) + 2


def _values(values: WorkflowColumns) -> str:
    return "".join(_cell(getattr(values, key)).rjust(WIDTH) for _, key in COLUMNS)


def _grid(rows: list[tuple[str, WorkflowColumns]]) -> list[str]:
    """A header and one line per row, each led by its name."""
    first = max([len(name) for name, _ in rows] + [3])
    head = "".ljust(first) + "".join(name.rjust(WIDTH) for name, _ in COLUMNS)
    return [head, *(name.ljust(first) + _values(values) for name, values in rows)]


def board_note(rows: list[WorkflowBoardRow]) -> list[str]:
    """What the published rows are (a harness row is over a 30-task subset)."""
    if not rows:
        return []
    note = (
        "published rows: the GTA-2 board (Table VI; Table VII for harness/MODEL rows, over "
        "their task subset), judged by the authors, not by this run's judge"
    )
    return [note]


def table_lines(report: WorkflowReport) -> list[str]:
    """The table and published rows, judge line, SR note, comparison, gates, one line per task."""
    metrics = report.metrics
    lines = [judge_line(report)]
    if report.leaderboard:
        lines += _grid([("this run", metrics), *((r.label, r) for r in report.leaderboard)])
        lines += board_note(report.leaderboard)
    else:
        lines.append("".join(name.rjust(WIDTH) for name, _ in COLUMNS))
        lines.append(_values(metrics))
    lines.append(note_line(report))
    empty = empty_line(report)
    if empty is not None:
        lines.append(f"WARNING: {empty}")
    if report.comparison is not None:
        lines += comparison_lines(report.comparison)
    if report.gates is not None:
        lines += gate_lines(report.gates, report.metrics.judge_errors)
    for title, names, rows in robustness_tables(report.robustness):
        lines += ["", title, *aligned(names, rows)]
    lines += [f"  {task_line(case)}" for case in report.cases]
    return lines


def render_markdown(report: WorkflowReport) -> str:
    """The same as markdown (``--gta-report-md``, GitHub's job summary), every text escaped."""
    facts = [judge_line(report, marked=True), f"dataset: {report.dataset}"]
    if report.label:
        facts.insert(0, f"label: {report.label}")
    lines = ["# GTA-Workflow results", "", *markdown_items(facts), "", "## Workflow", ""]
    published = [
        [r.label, *(_cell(getattr(r, key)) for _, key in COLUMNS)] for r in report.leaderboard
    ]
    if published:
        names = ["run", *(name for name, _ in COLUMNS)]
        lines += markdown_table(names, [["this run", *table_row(report)], *published])
        lines += ["", *markdown_items(board_note(report.leaderboard))]
    else:
        lines += markdown_table([name for name, _ in COLUMNS], [table_row(report)])
    lines += ["", markdown_text(note_line(report))]
    empty = empty_line(report)
    if empty is not None:
        lines += ["", markdown_text(f"{strong('Warning')}: {empty}")]
    if report.comparison is not None:
        lines += ["", "## Baseline", "", *markdown_items(comparison_lines(report.comparison))]
    if report.gates is not None:
        gates = gate_lines(report.gates, report.metrics.judge_errors)
        lines += ["", "## Gates", "", *markdown_items(gates)]
    for title, names, rows in robustness_tables(report.robustness):
        lines += ["", f"## {markdown_text(title)}", "", *markdown_table(names, rows)]
    lines += ["", "## Tasks", ""]
    lines += markdown_items([task_line(case) for case in report.cases])
    return "\n".join(lines) + "\n"


def _signed(value: float | None) -> str:
    return "-" if value is None else f"{value:+.2f}"


def comparison_lines(comparison: WorkflowComparison) -> list[str]:
    """The run against its baseline: the mean difference, each column, the flipped tasks."""
    paired = "paired by task" if comparison.paired else "unpaired"
    lines = [
        f"baseline {comparison.baseline} ({comparison.baseline_model}; {paired}): "
        f"mean root-score difference {_signed(comparison.mean_difference)}"
        + (
            f" over {comparison.matched} tasks scored in both"
            f" ({comparison.only_this_run} only in this run, {comparison.only_baseline} only in "
            "the baseline)"
            if comparison.paired
            else ""
        )
    ]
    for name, key in COLUMNS:
        row = comparison.metrics.get(key)
        if row is None:
            continue
        tail = ""
        if row.ci_low is not None and row.ci_high is not None:
            tail += f", {comparison.level:.0%} CI [{row.ci_low:.2f}, {row.ci_high:.2f}]"
        if row.p_value is not None:
            tail += f", p = {row.p_value:.4f}"
        if row.p_drop is not None:
            tail += f", p(drop) = {row.p_drop:.4f}"
        lines.append(
            f"  {name}: {_cell(row.this)} vs {_cell(row.baseline)} ({_signed(row.difference)}"
            f"{tail})"
        )
    for what, flips in (("regressed", comparison.regressed), ("fixed", comparison.fixed)):
        if flips:
            shown = ", ".join(
                f"{f.task_id} ({_cell(f.baseline_score)} -> {_cell(f.root_score)})" for f in flips
            )
            lines.append(f"  {what} (passed {'then' if what == 'regressed' else 'now'}): {shown}")
    if comparison.paired and not comparison.regressed and not comparison.fixed:
        lines.append("  no task flipped between pass and fail")
    lines += [f"  note: {note}" for note in comparison.notes]
    return lines


def gate_lines(gates: GatesVerdict, errored: int) -> list[str]:
    """The gates' verdicts, then what they mean for the exit status."""
    lines = [f"gate {'PASS' if v.passed else 'FAIL'}: {v.reason}" for v in gates.verdicts]
    held = sum(v.passed for v in gates.verdicts)
    if not gates.passed:
        lines.append(
            f"gates: {len(gates.verdicts) - held} of {len(gates.verdicts)} failed: the run fails "
            "(exit status 1)"
        )
    elif errored:
        lines.append(
            f"gates: all held, but {errored} task(s) errored: the run fails (exit status 1)"
        )
    else:
        lines.append("gates: all held: the run passes (exit status 0)")
    return lines


def runs_lines(runs: WorkflowRuns) -> list[str]:
    """``--gta-compare`` of Workflow reports: one row per run, then the published rows."""
    rows: list[tuple[str, WorkflowColumns]] = [(run.label, run.metrics) for run in runs.runs]
    rows += [(r.label, r) for r in runs.leaderboard]
    lines = _grid(rows)
    for run in runs.runs:
        official = "official protocol" if run.official else "NOT the official protocol"
        lines.append(
            f"  {run.label}: {run.source}, model {run.model}, judged by {run.judge} "
            f"({official}), threshold {run.threshold:g}; {run.metrics.scored} of "
            f"{run.metrics.tasks} tasks scored"
        )
    lines += board_note(runs.leaderboard)
    lines += [f"note: {note}" for note in runs.notes]
    lines.append(f"{runs.sr_note}.")
    return lines


def runs_markdown(runs: WorkflowRuns) -> str:
    """The same table as Markdown."""
    head = "| run | " + " | ".join(name for name, _ in COLUMNS) + " |"
    rule = "|---|" + "---:|" * len(COLUMNS)
    body = [
        f"| {label} | " + " | ".join(_cell(getattr(v, key)) for _, key in COLUMNS) + " |"
        for label, v in [
            *((r.label, r.metrics) for r in runs.runs),
            *((r.label, r) for r in runs.leaderboard),
        ]
    ]
    notes = [f"- {n}" for n in [*board_note(runs.leaderboard), *runs.notes, runs.sr_note]]
    return "\n".join(["## GTA-Workflow comparison", "", head, rule, *body, "", *notes, ""])
