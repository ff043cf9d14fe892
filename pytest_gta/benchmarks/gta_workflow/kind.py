"""The GTA-Workflow report's own ways (:class:`~pytest_gta.session.kinds.ReportKind`).

A session's collector and ``--gta-merge`` conclude a Workflow run, and ``--gta-compare`` puts
Workflow runs side by side, through the one code path of :mod:`pytest_gta.session.kinds`;
what is GTA-Workflow's own is here:

- what a run is measured against: a previous Workflow report or a published row
  (``--gta-baseline``, :mod:`pytest_gta.report.workflow_baseline`), and the rows
  ``--gta-leaderboard-rows`` sets below the run's;
- a merge takes every task once and recomputes the table from the tasks (the Root Score's
  mean and the rates are not averages of the shards'); shards of different runs (another
  model, dataset or judge) are refused, naming the field and both files;
- a comparison is one row per run, its table recomputed from its tasks as the run computed it
  (a report of an earlier version wrote a rate over zero scored tasks as 0.00 where the table
  now has none), with a note for each of dataset, judge, protocol and threshold that differs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from pytest_gta.gates import WORKFLOW_GATE_METRICS, GateSettings
from pytest_gta.options import GtaSettings
from pytest_gta.report import workflow as render
from pytest_gta.report import workflow_baseline
from pytest_gta.report.merge import shard_cases
from pytest_gta.report.robustness import robustness_of
from pytest_gta.report.workflow_html import header_html, render_workflow_html
from pytest_gta.report.workflow_inspect import write_workflow_inspect_log
from pytest_gta.results.recorded import CaseUsage
from pytest_gta.results.report import GatesVerdict
from pytest_gta.results.workflow import (
    WorkflowReport,
    WorkflowRun,
    WorkflowRuns,
    dump_workflow_report,
)
from pytest_gta.results.workflow_board import WorkflowBoardRow
from pytest_gta.scoring.workflow import workflow_table
from pytest_gta.session.finish import Renderers
from pytest_gta.session.kinds import Labeled

#: Where a Workflow case's id ends its node id (``gta::test_workflow[workflow-3]``).
CASE_PREFIX = "workflow-"

#: What every shard of one run has in common, as messages name it.
_SAME: tuple[tuple[str, Callable[[WorkflowReport], object]], ...] = (
    ("model", lambda r: r.model),
    ("dataset", lambda r: r.dataset),
    ("judge.model", lambda r: r.judge.model),
    ("judge.api", lambda r: r.judge.api),
    ("judge.threshold", lambda r: r.judge.threshold),
    ("robustness.spec", lambda r: None if r.robustness is None else r.robustness.spec),
    ("tools_left_out", lambda r: r.tools_left_out),
)
#: What the runs of a comparison may differ in, each said in a note.
_NOTED: tuple[tuple[str, Callable[[WorkflowReport], object]], ...] = (
    ("dataset", lambda r: r.dataset),
    ("judge", lambda r: r.judge.model),
    ("judge protocol", lambda r: "official" if r.judge.official else "chat"),
    ("threshold", lambda r: f"{r.judge.threshold:g}"),
)


def case_order(nodeid: str) -> tuple[int, str]:
    """A case's place in the report: by task id (numerically), then epoch."""
    tail = nodeid.rpartition(CASE_PREFIX)[2].rstrip("]")
    head = tail.partition("@")[0]
    return (int(head), tail) if head.isdigit() else (1 << 62, tail)


class WorkflowKind:
    """GTA-Workflow's side of concluding, merging and comparing its reports."""

    title = "GTA-Workflow"
    unit = "tasks"

    def check_gates(self, gates: GateSettings, baseline: bool) -> None:
        """Only the Workflow table's columns; a regression gate needs a baseline."""
        gates.check_workflow(baseline)

    def against(
        self, settings: GtaSettings, given: str
    ) -> tuple[list[WorkflowBoardRow], workflow_baseline.Baseline | None]:
        """The published rows asked for, and the baseline (a report or a published row).

        Raises:
            GtaUsageError: an unknown row, a baseline that is not a Workflow report.
        """
        rows = workflow_baseline.leaderboard_rows(settings.comparison.leaderboard_rows)
        spec = settings.baseline.report
        return rows, None if spec is None else workflow_baseline.load_baseline(spec, given)

    def compare(
        self,
        report: WorkflowReport,
        against: tuple[list[WorkflowBoardRow], workflow_baseline.Baseline | None],
        given: str,
        settings: GtaSettings,
    ) -> None:
        """The rows below the run's, and the comparison with the baseline."""
        rows, baseline = against
        report.leaderboard = list(rows)
        if baseline is not None:
            report.comparison = workflow_baseline.compare(
                report,
                baseline,
                given,
                settings.stats.confidence,
                settings.stats.bootstrap_samples,
            )

    def judge(self, report: WorkflowReport, gates: GateSettings) -> GatesVerdict:
        """Floors on the table's columns, no significant drop against the baseline."""
        return workflow_baseline.judge(report, gates)

    def after_hook(self, report: Any) -> None:
        """Nothing follows from a hook's changes."""

    def renderers(self, report: WorkflowReport, saved: Callable[[Path], None]) -> Renderers:
        """The JSON, markdown, HTML page and Inspect log of a Workflow run."""

        def inspect(directory: Path) -> list[Path]:
            path = write_workflow_inspect_log(report, directory)
            saved(path)
            return [path]

        return Renderers(
            json=lambda: dump_workflow_report(report),
            markdown=lambda: render.render_markdown(report),
            html=lambda most: render_workflow_html(report, max_bytes=most),
            inspect=inspect,
        )

    def table_lines(self, report: WorkflowReport) -> list[str]:
        """The Workflow table."""
        return render.table_lines(report)

    def summary_html(self, report: WorkflowReport) -> str:
        """The run's header and table, as the Workflow page shows them."""
        return header_html(report)

    def suite_properties(self, report: WorkflowReport) -> list[tuple[str, Any]]:
        """The table's columns, the gates' verdict, the judge."""
        properties: list[tuple[str, Any]] = [
            (f"gta_workflow_{name}", round(value, 4))
            for name in WORKFLOW_GATE_METRICS  # the table's columns
            if (value := getattr(report.metrics, name)) is not None
        ]
        if report.gates is not None:
            properties.append(("gta_gates_passed", str(report.gates.passed).lower()))
        return [
            *properties,
            ("gta_judge", report.judge.model),
            ("gta_judge_official", report.judge.official),
        ]

    def errors(self, report: WorkflowReport) -> int:
        """The tasks whose production or judging errored."""
        return sum(1 for c in report.cases if c.outcome == "error")

    def regressed(self, report: WorkflowReport) -> list[str] | None:
        """The node ids of the tasks that passed in the baseline report and fail now."""
        found = report.comparison
        if found is None or found.kind != "report":
            return None
        tasks = {flip.task_id for flip in found.regressed}
        return [case.nodeid for case in report.cases if case.task_id in tasks]

    def merge(self, reports: Sequence[Labeled[WorkflowReport]]) -> WorkflowReport:
        """One report from the shards' reports (every task once, the table recomputed).

        Raises:
            GtaUsageError: reports of different runs, or a task in two of them.
        """
        first = reports[0][1]
        cases = shard_cases(reports, _SAME, lambda r: r.cases, "task")
        ordered = sorted(cases, key=lambda c: case_order(c.nodeid or c.id))
        return WorkflowReport(
            model=first.model,
            label=first.label,
            identity=first.identity,
            dataset=first.dataset,
            judge=first.judge.model_copy(),
            metrics=workflow_table(ordered, first.judge.threshold),
            notes=list(dict.fromkeys(n for _, shard in reports for n in shard.notes)),
            judge_usage=CaseUsage.total(c.judge_usage for c in ordered),
            robustness=(
                None
                if first.robustness is None
                else robustness_of(first.robustness.spec, ((c.faults, c.passed) for c in ordered))
            ),
            tools_left_out=first.tools_left_out,
            cases=ordered,
        )

    def runs(
        self, reports: Sequence[Labeled[WorkflowReport]], settings: GtaSettings
    ) -> WorkflowRuns:
        """One row per run (labels made unique with ``#2``), and the rows asked for.

        Raises:
            GtaUsageError: an unknown leaderboard row.
        """
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
                    metrics=workflow_table(report.cases, report.judge.threshold),
                )
            )
        notes = []
        for what, read in _NOTED:
            values = {run.label: str(read(r)) for run, (_, r) in zip(runs, reports, strict=True)}
            if len(set(values.values())) > 1:
                shown = "; ".join(f"{label}: {value}" for label, value in values.items())
                notes.append(f"the runs' {what} differs ({shown})")
        return WorkflowRuns(
            runs=runs,
            leaderboard=workflow_baseline.leaderboard_rows(settings.comparison.leaderboard_rows),
            notes=notes,
        )

    def runs_lines(self, runs: Any) -> list[str]:
        """The runs' tables."""
        return render.runs_lines(runs)

    def runs_markdown(self, runs: Any) -> str:
        """The runs' tables as markdown."""
        return render.runs_markdown(runs)


#: The one instance (it holds nothing).
WORKFLOW_KIND = WorkflowKind()
