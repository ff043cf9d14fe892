"""``pytest --gta-compare A.json B.json ...`` on GTA-Workflow reports: their tables side by side.

Which comparison runs is decided by the files: when ``--gta-compare`` names no Workflow report
the atomic comparison (:mod:`pytest_gta.session.compare_command`) runs exactly as before, and
when it names only Workflow reports this one does. A Workflow report is told by its first
bytes (``dump_workflow_report`` writes ``"kind": "gta-workflow-report"`` first), so atomic
reports are not read twice; every Workflow report is then read by its one reader
(:func:`~pytest_gta.results.workflow.load_workflow_report`). Naming both kinds is a usage
error naming a file of each: their tables have no column in common.

The command prints one row per run (and the ``--gta-leaderboard-rows`` rows below them) under
a ``GTA-Workflow comparison`` rule, writes ``--gta-report`` (the ``gta-workflow-comparison``
JSON) and ``--gta-report-md``, and exits 0.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Sequence
from pathlib import Path

import pytest

from pytest_gta.errors import GtaUsageError
from pytest_gta.flags import OPT_COMPARE, OPT_REPORT, OPT_REPORT_MD
from pytest_gta.options import resolve_option, resolve_settings
from pytest_gta.outward import terminal_text
from pytest_gta.report.workflow import runs_lines, runs_markdown
from pytest_gta.report.workflow_baseline import leaderboard_rows
from pytest_gta.results.workflow import (
    WorkflowReport,
    WorkflowRun,
    WorkflowRuns,
    load_workflow_report,
)
from pytest_gta.scoring.workflow import workflow_table
from pytest_gta.session.finish import Output, print_tables, say_line, write_outputs

#: How much of a file is read to tell a Workflow report from an atomic one.
SNIFF_BYTES = 4096
WORKFLOW_KIND = re.compile(rb'"kind"\s*:\s*"gta-workflow-report"')
ATOMIC_SCHEMA = re.compile(rb'"schema"\s*:\s*"pytest-gta-report')


def _head(path: Path) -> bytes:
    try:
        with path.open("rb") as fh:
            return fh.read(SNIFF_BYTES)
    except OSError:
        return b""  # the atomic reader says what is wrong with it


def _candidates(path: Path, label: str) -> list[tuple[str, Path, bool]]:
    """``(label, path, named)``: the file itself, or a directory's ``*.json`` files."""
    if not path.is_dir():
        return [(label, path, True)]
    try:
        names = sorted(p.name for p in path.iterdir() if p.suffix == ".json" and not p.is_dir())
    except OSError:
        return []
    return [(os.path.join(label, n), path / n, False) for n in names]


def workflow_reports(config: pytest.Config) -> list[tuple[str, Path]] | None:
    """The Workflow reports ``--gta-compare`` names, or ``None`` when it names none.

    Raises:
        pytest.UsageError: it names Workflow and atomic reports both.
    """
    given: list[str] = config.getoption("gta_compare")
    paths: list[Path] = resolve_option(config, "gta_compare").value
    workflow: list[tuple[str, Path]] = []
    atomic: list[str] = []
    for label, path in zip(given, paths, strict=True):
        for name, file, named in _candidates(path, label):
            head = _head(file)
            if WORKFLOW_KIND.search(head):
                workflow.append((name, file))
            elif named or ATOMIC_SCHEMA.search(head):
                atomic.append(name)
    if not workflow:
        return None
    if atomic:
        raise pytest.UsageError(
            terminal_text(
                f"pytest-gta: {OPT_COMPARE}: {atomic[0]} is a GTA-Atomic report and "
                f"{workflow[0][0]} a GTA-Workflow report; their tables have no column in "
                "common: compare Atomic runs and Workflow runs separately"
            )
        )
    return workflow


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


def compare_workflow(config: pytest.Config, found: Sequence[tuple[str, Path]]) -> WorkflowRuns:
    """Read the reports and the rows asked for.

    Raises:
        GtaUsageError: a report that is not a Workflow report, an unknown leaderboard row.
    """
    settings = resolve_settings(config)
    reports = [(label, load_workflow_report(path)) for label, path in found]
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


def workflow_compare_command(config: pytest.Config, found: Sequence[tuple[str, Path]]) -> int:
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
    status = int(pytest.ExitCode.OK)
    for output, error in write_outputs(outputs):
        if error is None:
            say_line(f"written to {output.path}")
        else:
            say_line(f"could not write {output.label}: {error}")
            status = int(pytest.ExitCode.TESTS_FAILED)
    return status
