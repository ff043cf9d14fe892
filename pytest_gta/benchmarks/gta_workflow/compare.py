"""``pytest --gta-compare A.json B.json ...`` on GTA-Workflow reports: their tables side by side.

The reports' one reader (:func:`~pytest_gta.results.io.load_any_report`) reads each file named,
and each is of its benchmark by its ``benchmark`` field (earlier reports: the field their kind
always wrote); when every report is a Workflow one this command compares them
(:mod:`pytest_gta.benchmarks.commands` chooses), and naming both kinds is a usage error naming
a file of each: their tables have no column in common.

The command prints one row per run (and the ``--gta-leaderboard-rows`` rows below them) under
a ``GTA-Workflow comparison`` rule, writes ``--gta-report`` (the ``gta-workflow-comparison``
JSON) and ``--gta-report-md``, and exits 0.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import pytest

from pytest_gta.errors import GtaUsageError
from pytest_gta.flags import OPT_REPORT, OPT_REPORT_MD
from pytest_gta.options import resolve_settings
from pytest_gta.outward import terminal_text
from pytest_gta.report.workflow import runs_lines, runs_markdown
from pytest_gta.report.workflow_baseline import leaderboard_rows
from pytest_gta.results.io import WorkflowFile
from pytest_gta.results.workflow import WorkflowReport, WorkflowRun, WorkflowRuns
from pytest_gta.scoring.workflow import workflow_table
from pytest_gta.session.finish import Output, failed, print_tables, say_line, write_said


def _notes(reports: Sequence[tuple[str, WorkflowReport]]) -> list[str]:
    notes = []
    for what, read in (
        ("dataset", lambda r: r.dataset),
        ("judge", lambda r: r.judge.model),
        ("judge protocol", lambda r: "official" if r.judge.official else "chat"),
        ("threshold", lambda r: f"{r.judge.threshold:g}"),
    ):
        values = {label: str(read(report)) for label, report in reports}
        if len(set(values.values())) > 1:
            shown = "; ".join(f"{label}: {value}" for label, value in values.items())
            notes.append(f"the runs' {what} differs ({shown})")
    return notes


def compare_workflow(config: pytest.Config, found: Sequence[WorkflowFile]) -> WorkflowRuns:
    """The reports' tables, and the rows asked for.

    Raises:
        GtaUsageError: an unknown leaderboard row.
    """
    settings = resolve_settings(config)
    reports = [(read.label, read.report) for read in found]
    runs: list[WorkflowRun] = []
    seen: dict[str, int] = {}
    for source, report in reports:
        label = report.label or report.model or Path(source).stem
        seen[label] = seen.get(label, 0) + 1
        if seen[label] > 1:
            label = f"{label}#{seen[label]}"
        runs.append(
            WorkflowRun(
                label=label,
                source=source,
                model=report.model,
                judge=report.judge.model,
                official=report.judge.official,
                threshold=report.judge.threshold,
                # From the cases, as the run computed it: a report of an earlier version
                # wrote a rate over zero scored tasks as 0.00 where the table now has none.
                metrics=workflow_table(report.cases, report.judge.threshold),
            )
        )
    return WorkflowRuns(
        runs=runs,
        leaderboard=leaderboard_rows(settings.comparison.leaderboard_rows),
        notes=_notes([(run.label, r) for run, (_, r) in zip(runs, reports, strict=True)]),
    )


def workflow_compare_command(config: pytest.Config, found: Sequence[WorkflowFile]) -> int:
    """Compare, print, write ``--gta-report`` and ``--gta-report-md``; 0 when compared.

    Raises:
        pytest.UsageError: a file that cannot be compared (exit status 4).
    """
    try:
        runs = compare_workflow(config, found)
    except GtaUsageError as exc:
        raise pytest.UsageError(f"pytest-gta: {terminal_text(str(exc))}") from None
    say_line(f"compared {len(runs.runs)} GTA-Workflow runs")
    print_tables("GTA-Workflow comparison", runs_lines(runs))
    settings = resolve_settings(config)
    outputs = []
    if settings.report.json is not None:
        text = json.dumps(runs.to_json_value(), indent=2, ensure_ascii=False, allow_nan=False)
        outputs.append(Output(settings.report.json, lambda: text, option=OPT_REPORT))
    if settings.report.md is not None:
        outputs.append(
            Output(settings.report.md, lambda: runs_markdown(runs), option=OPT_REPORT_MD)
        )
    results = write_said(outputs)
    return int(pytest.ExitCode.TESTS_FAILED if failed(results) else pytest.ExitCode.OK)
