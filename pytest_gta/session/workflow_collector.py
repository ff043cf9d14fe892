"""The controller's side of a GTA-Workflow run: gather the judged tasks, print and write them.

Like :class:`~pytest_gta.session.collector.GtaCollector` for atomic runs: each case's JSON
arrives on its setup report (``user_properties``, :data:`DETAIL_KEY`), from this process or an
xdist worker alike, so ``-n 0`` and ``-n 8`` give the same numbers; the table is computed
here only, once every case is in.
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from pytest_gta.errors import GtaUsageError
from pytest_gta.evalpack import DEVIATION
from pytest_gta.evalpack import PREFIX as EVALPACK
from pytest_gta.files import write_atomic
from pytest_gta.options import GtaSettings
from pytest_gta.outward import clean_text
from pytest_gta.report import workflow_baseline
from pytest_gta.report.gate_verdicts import exit_status
from pytest_gta.report.workflow import render_markdown, table_lines
from pytest_gta.report.workflow_html import render_workflow_html
from pytest_gta.report.workflow_inspect import write_workflow_inspect_log
from pytest_gta.results.case import CaseUsage
from pytest_gta.results.workflow import (
    JudgeInfo,
    WorkflowCase,
    WorkflowReport,
    dump_workflow_report,
)
from pytest_gta.results.workflow_board import WorkflowBoardRow
from pytest_gta.scoring.workflow import workflow_table
from pytest_gta.session.collector import add_suite_properties
from pytest_gta.session.finish import STEP_SUMMARY_ENV
from pytest_gta.session.keys import DETAIL_KEY

#: Where a Workflow case's id ends its node id (``gta::test_workflow[workflow-3]``).
CASE_PREFIX = "workflow-"


class WorkflowCollector:
    """Gathers the cases' results on the controller and reports the run."""

    def __init__(
        self, config: pytest.Config, settings: GtaSettings, dataset: str, judge: JudgeInfo
    ) -> None:
        self.config = config
        self.settings = settings
        self.dataset = dataset
        self.judge = judge
        self.cases: dict[str, WorkflowCase] = {}
        self.report: WorkflowReport | None = None
        self.write_errors: list[str] = []
        #: The Inspect log written (``--gta-inspect-log``), for the terminal's last lines.
        self.inspect_log: Path | None = None
        self.board_rows, self.baseline = self.check()

    def check(self) -> tuple[list[WorkflowBoardRow], workflow_baseline.Baseline | None]:
        """At start-up: the gates, ``--gta-leaderboard-rows`` and ``--gta-baseline``, read once.

        Raises:
            pytest.UsageError: an atomic gate metric, an unknown row, a baseline that is not a
                Workflow report.
        """
        settings = self.settings
        spec = settings.baseline.report
        settings.gates.check_workflow(spec is not None)
        try:
            rows = workflow_baseline.leaderboard_rows(settings.comparison.leaderboard_rows)
            given = str(self.config.getoption("gta_baseline", None) or spec)
            found = None if spec is None else workflow_baseline.load_baseline(spec, given)
        except GtaUsageError as exc:
            raise pytest.UsageError(f"pytest-gta: {exc}") from None
        return rows, found

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """Take the case's JSON from its setup report; pytest's outcome overrides on failure."""
        for name, value in report.user_properties:
            if name == DETAIL_KEY and isinstance(value, str):
                try:
                    case = WorkflowCase.model_validate(json.loads(value))
                except (ValueError, ValidationError):
                    continue
                case.nodeid = report.nodeid
                self.cases[report.nodeid] = case
        known = self.cases.get(report.nodeid)
        if known is None or report.passed:
            return
        if report.skipped and report.when == "setup":
            known.outcome = "skipped"
        elif report.failed and report.when != "call":
            known.outcome = "error"

    def build(self) -> WorkflowReport:
        """The run's report from the cases in, in node order."""
        settings = self.settings
        flow = settings.workflow
        cases = [self.cases[k] for k in sorted(self.cases, key=_order)]
        usage = CaseUsage(input_tokens=0, output_tokens=0, calls=0, cached_calls=0)
        for case in cases:
            used = case.judge_usage
            if used is not None:
                usage = CaseUsage(
                    input_tokens=usage.input_tokens + used.input_tokens,
                    output_tokens=usage.output_tokens + used.output_tokens,
                    calls=usage.calls + used.calls,
                    cached_calls=usage.cached_calls + used.cached_calls,
                )
        return WorkflowReport(
            model=settings.model.name or "",
            label=settings.report.label,
            dataset=self.dataset,
            judge=self.judge.model_copy(),
            metrics=workflow_table(cases, flow.threshold),
            notes=[DEVIATION] if (settings.model.name or "").startswith(EVALPACK) else [],
            judge_usage=usage,
            cases=cases,
        )

    def finish(self, session: pytest.Session) -> None:
        """Build the report, add the suite's JUnit properties and write ``--gta-report``."""
        if not self.cases:
            return
        report = self.report = self.build()
        self.comparisons(report)
        _junit(self.config, report)
        for path, render in [(self.settings.report.json, dump_workflow_report), *self.renderers()]:
            if path is None:
                continue
            try:
                write_atomic(Path(path), render(report))
            except OSError as exc:
                self.write_errors.append(f"{path}: {exc.strerror or exc}")
                session.exitstatus = pytest.ExitCode.TESTS_FAILED
        inspect_dir = self.settings.report.inspect_log
        if inspect_dir is not None:
            try:
                self.inspect_log = write_workflow_inspect_log(report, Path(inspect_dir))
            except OSError as exc:
                self.write_errors.append(f"{inspect_dir}: {exc.strerror or exc}")
                session.exitstatus = pytest.ExitCode.TESTS_FAILED
        self.judge_gates(report, session)

    def renderers(self) -> list[tuple[Path | None, Callable[[WorkflowReport], str]]]:
        """The other files a run writes (``--gta-report-md``, ``--gta-report-html``).

        And GitHub's job summary (``$GITHUB_STEP_SUMMARY``) when it is set, the markdown added
        to what the job's earlier steps wrote there, as an atomic run adds it.
        """
        settings = self.settings.report
        max_bytes = int(settings.html_max_mb * 1024 * 1024)
        outputs: list[tuple[Path | None, Callable[[WorkflowReport], str]]] = [
            (settings.md, render_markdown),
            (settings.html, functools.partial(render_workflow_html, max_bytes=max_bytes)),
        ]
        summary = os.environ.get(STEP_SUMMARY_ENV, "").strip()
        if summary:
            path = Path(summary)

            def appended(report: WorkflowReport) -> str:
                try:
                    before = path.read_text(encoding="utf-8")
                except FileNotFoundError:
                    before = ""
                return before + render_markdown(report) + "\n"

            outputs.append((path, appended))
        return outputs

    def comparisons(self, report: WorkflowReport) -> None:
        """Leaderboard rows, the baseline and the gates' verdicts, added to ``report``."""
        settings = self.settings
        report.leaderboard = list(self.board_rows)
        if self.baseline is not None:
            given = str(self.config.getoption("gta_baseline", None) or settings.baseline.report)
            report.comparison = workflow_baseline.compare(
                report,
                self.baseline,
                given,
                settings.stats.confidence,
                settings.stats.bootstrap_samples,
            )
        if settings.gates.active:
            report.gates = workflow_baseline.judge(report, settings.gates)

    def judge_gates(self, report: WorkflowReport, session: pytest.Session) -> None:
        """``--gta-fail-under`` and ``--gta-fail-on-regression`` decide the exit status."""
        if report.gates is None:
            return
        errored = sum(1 for c in report.cases if c.outcome == "error")
        status = exit_status(report.gates, errored, int(session.exitstatus))
        if self.write_errors and status == pytest.ExitCode.OK:
            status = int(pytest.ExitCode.TESTS_FAILED)
        session.exitstatus = status

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        """The Workflow table, then where the report went."""
        if self.report is None:
            return
        terminalreporter.write_sep("=", "GTA-Workflow results")
        for line in table_lines(self.report):
            terminalreporter.write_line(clean_text(line))
        report = self.settings.report
        for path in (report.json, report.md, report.html):
            if path is not None and not any(e.startswith(f"{path}: ") for e in self.write_errors):
                terminalreporter.write_line(f"report written to {path}")
        if self.inspect_log is not None:
            terminalreporter.write_line(f"Inspect log written to {self.inspect_log}")
        for error in self.write_errors:
            terminalreporter.write_line(f"pytest-gta: could not write {error}", red=True)


def _order(nodeid: str) -> tuple[int, str]:
    tail = nodeid.rpartition(CASE_PREFIX)[2].rstrip("]")
    head = tail.partition("@")[0]
    return (int(head), tail) if head.isdigit() else (1 << 62, tail)


def _junit(config: pytest.Config, report: WorkflowReport) -> None:
    metrics = report.metrics
    names = ("root_score", "root_sr", "leaf_sr", "tool_sr", "p_sr", "o_sr", "l_sr", "c_sr")
    properties: list[tuple[str, Any]] = [
        (f"gta_workflow_{name}", round(getattr(metrics, name), 4))
        for name in names
        if getattr(metrics, name) is not None
    ]
    if report.gates is not None:
        properties.append(("gta_gates_passed", str(report.gates.passed).lower()))
    properties += [("gta_judge", report.judge.model), ("gta_judge_official", report.judge.official)]
    add_suite_properties(config, properties)
