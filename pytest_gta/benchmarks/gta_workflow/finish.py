"""Finishing a GTA-Workflow run: for a session's collector and for ``pytest --gta-merge`` alike.

The steps an atomic run's :class:`~pytest_gta.session.finish.Finisher` takes, on the Workflow
report: the published rows (``--gta-leaderboard-rows``), the comparison with ``--gta-baseline``
and the gates' verdicts, the ``pytest_gta_update_report`` hook and the secret cleaner
(:func:`~pytest_gta.session.finish.cleaned`), then the files through the one writer
(:func:`~pytest_gta.session.finish.write_outputs`: through symlinks, into devices, the GitHub
job summary appended to) and the gated exit status.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from pytest_gta.errors import GtaUsageError
from pytest_gta.options import GtaSettings
from pytest_gta.report import workflow_baseline
from pytest_gta.report.gate_verdicts import final_status
from pytest_gta.report.workflow import render_markdown
from pytest_gta.report.workflow_html import render_workflow_html
from pytest_gta.report.workflow_inspect import write_workflow_inspect_log
from pytest_gta.results.workflow import WorkflowReport, dump_workflow_report
from pytest_gta.results.workflow_board import WorkflowBoardRow
from pytest_gta.session.finish import Output, Renderers, cleaned, report_files


@dataclass
class WorkflowFinisher:
    """Concludes and writes one Workflow run; what it reads from the options, read once."""

    config: pytest.Config
    settings: GtaSettings
    board_rows: list[WorkflowBoardRow]
    baseline: workflow_baseline.Baseline | None
    #: The Inspect log written (``--gta-inspect-log``), for the terminal's last lines.
    inspect_log: Path | None = None

    @classmethod
    def of(cls, config: pytest.Config, settings: GtaSettings) -> WorkflowFinisher:
        """Check the gates and read ``--gta-leaderboard-rows`` and ``--gta-baseline`` once.

        Raises:
            pytest.UsageError: an atomic gate metric, an unknown row, a baseline that is not a
                Workflow report.
        """
        spec = settings.baseline.report
        settings.gates.check_workflow(spec is not None)
        try:
            rows = workflow_baseline.leaderboard_rows(settings.comparison.leaderboard_rows)
            given = str(config.getoption("gta_baseline", None) or spec)
            found = None if spec is None else workflow_baseline.load_baseline(spec, given)
        except GtaUsageError as exc:
            raise pytest.UsageError(f"pytest-gta: {exc}") from None
        return cls(config, settings, rows, found)

    def conclude(self, report: WorkflowReport) -> WorkflowReport:
        """The report compared, judged, given to the hook and cleaned for leaving.

        Raises:
            GtaUsageError: a ``pytest_gta_update_report`` hook left a field of the wrong kind.
        """
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
        self.config.hook.pytest_gta_update_report(config=self.config, report=report)
        return cleaned(report)

    def outputs(self, report: WorkflowReport) -> list[Output]:
        """The files the settings ask for (:func:`~pytest_gta.session.finish.report_files`)."""
        return report_files(
            self.settings.report,
            Renderers(
                json=lambda: dump_workflow_report(report),
                markdown=lambda: render_markdown(report),
                html=lambda most: render_workflow_html(report, max_bytes=most),
                inspect=lambda directory: [self._save_inspect_log(report, directory)],
            ),
        )

    def _save_inspect_log(self, report: WorkflowReport, directory: Path) -> Path:
        self.inspect_log = write_workflow_inspect_log(report, directory)
        return self.inspect_log

    def status(self, report: WorkflowReport, status: int, write_failed: bool) -> int:
        """The exit status: the gates' (with gates), and not 0 when a file was not written."""
        errored = sum(1 for c in report.cases if c.outcome == "error")
        return final_status(report.gates, errored, status, write_failed)
