"""``pytest --gta-merge shard1.json shard2.json ...`` on GTA-Workflow reports: one run again.

The shard jobs of one Workflow run (``--gta-shard=K/N``) each wrote their tasks' report; the
merge takes every task once, recomputes the table from the tasks (the Root Score's mean and the
rates are not averages of the shards'), and finishes the merged run as a session finishes
one (:class:`~pytest_gta.benchmarks.gta_workflow.finish.WorkflowFinisher`: baseline, gates,
the update hook, the cleaner, the files). Reports of different runs (another model, dataset or
judge) are refused, naming the field and both files.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pytest

from pytest_gta.benchmarks.gta_workflow.finish import WorkflowFinisher
from pytest_gta.benchmarks.gta_workflow.reporting import case_order
from pytest_gta.errors import GtaUsageError
from pytest_gta.flags import OPT_MERGE
from pytest_gta.options import resolve_settings
from pytest_gta.outward import terminal_text
from pytest_gta.report.workflow import table_lines
from pytest_gta.results.io import WorkflowFile
from pytest_gta.results.recorded import CaseUsage
from pytest_gta.results.workflow import WorkflowCase, WorkflowReport
from pytest_gta.scoring.workflow import workflow_table
from pytest_gta.session.finish import failed, print_tables, say_line, write_said

#: What every shard of one run has in common, as messages name it.
_SAME: tuple[tuple[str, Callable[[WorkflowReport], object]], ...] = (
    ("model", lambda r: r.model),
    ("dataset", lambda r: r.dataset),
    ("judge.model", lambda r: r.judge.model),
    ("judge.api", lambda r: r.judge.api),
    ("judge.threshold", lambda r: r.judge.threshold),
)


def merge_workflow(files: Sequence[WorkflowFile]) -> WorkflowReport:
    """One report from the shards' reports (every task once, the table recomputed).

    Raises:
        GtaUsageError: reports of different runs, or a task in two of them.
    """
    first = files[0]
    for other in files[1:]:
        for name, read in _SAME:
            if read(other.report) != read(first.report):
                raise GtaUsageError(
                    f"{OPT_MERGE}: {other.label} is not a shard of the run of {first.label}: "
                    f"its {name} is {read(other.report)!r}, not {read(first.report)!r}"
                )
    cases: dict[str, WorkflowCase] = {}
    where: dict[str, str] = {}
    for shard in files:
        for case in shard.report.cases:
            if case.id in cases:
                raise GtaUsageError(
                    f"{OPT_MERGE}: the task {case.id} is in {where[case.id]} and in "
                    f"{shard.label}: merge each shard's report once"
                )
            cases[case.id], where[case.id] = case, shard.label
    ordered = sorted(cases.values(), key=lambda c: case_order(c.nodeid or c.id))
    return WorkflowReport(
        model=first.report.model,
        label=first.report.label,
        identity=first.report.identity,
        dataset=first.report.dataset,
        judge=first.report.judge.model_copy(),
        metrics=workflow_table(ordered, first.report.judge.threshold),
        notes=list(dict.fromkeys(n for shard in files for n in shard.report.notes)),
        judge_usage=CaseUsage.total(c.judge_usage for c in ordered),
        cases=ordered,
    )


def workflow_merge_command(config: pytest.Config, files: Sequence[WorkflowFile]) -> int:
    """Merge, print the table, write the files; 0 when merged (the gates decide with gates).

    Raises:
        pytest.UsageError: reports that are not shards of one run (exit status 4).
    """
    settings = resolve_settings(config)
    finisher = WorkflowFinisher.of(config, settings)
    try:
        report = finisher.conclude(merge_workflow(files))
    except GtaUsageError as exc:
        raise pytest.UsageError(f"pytest-gta: {terminal_text(str(exc))}") from None
    say_line(f"merged {len(files)} reports: {len(report.cases)} tasks of {report.dataset}")
    print_tables("GTA-Workflow results", table_lines(report))
    results = write_said(finisher.outputs(report))
    # The shard jobs reported the tasks; here only the gates and the files count.
    return finisher.status(report, int(pytest.ExitCode.OK), failed(results))
