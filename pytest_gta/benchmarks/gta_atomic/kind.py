"""The GTA-Atomic report's own ways (:class:`~pytest_gta.session.kinds.ReportKind`).

A session's collector and ``--gta-merge`` conclude an atomic run through the one finisher of
every benchmark (:class:`~pytest_gta.session.kinds.KindFinisher`); what is GTA-Atomic's own is
here: the comparison with ``--gta-baseline`` (:mod:`pytest_gta.report.baseline`, query by
query, on the dataset the run ran on), the paper's tables, the HTML page with the queries'
images, an Inspect log per mode, the JUnit XML a merge writes, and the cases' flat JUnit
properties refreshed after a ``pytest_gta_update_report`` hook.

``--gta-merge`` of atomic reports (:func:`atomic_merge_command`) rebuilds the metrics from the
dataset the shards ran on (:mod:`pytest_gta.report.merge`), so it finds that dataset first and
reads the baseline against the merged run's settings, as a session reads it at start-up.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from pytest_gta.dataset import Dataset
from pytest_gta.errors import GtaUsageError
from pytest_gta.gates import GateSettings
from pytest_gta.options import GtaSettings, resolve_settings
from pytest_gta.outward import terminal_text
from pytest_gta.report.baseline import Baseline, compare_run, regressed_nodeids
from pytest_gta.report.gate_verdicts import judge
from pytest_gta.report.html import summary_html
from pytest_gta.report.images import ImageStore
from pytest_gta.report.inspect_log import write_inspect_logs
from pytest_gta.report.junit import junit_xml, suite_properties
from pytest_gta.report.merge import check_same_run, coverage_warnings, merge_reports
from pytest_gta.report.table import render_markdown, render_text
from pytest_gta.results.io import ReportFile, dump_report, refresh_properties
from pytest_gta.results.report import GatesVerdict, RunReport
from pytest_gta.session.finish import (
    Renderers,
    failed,
    find_dataset,
    html_with_images,
    merged_baseline,
    print_tables,
    say_line,
    write_said,
)
from pytest_gta.session.kinds import KindFinisher

#: What an atomic run is measured against: ``--gta-baseline`` and the differences let through.
Against = tuple[Baseline | None, Sequence[str]]


class AtomicKind:
    """GTA-Atomic's side of concluding and writing its report, on the run's dataset."""

    title = "GTA"

    def __init__(
        self, dataset: Dataset, images: Callable[[], ImageStore | None] = lambda: None
    ) -> None:
        self.dataset = dataset
        #: The session's image store (``--gta-report-html``), made on first need; a merge's
        #: shards kept theirs on their machines, so its page has no images and says so.
        self._images = images

    def compare(
        self, report: RunReport, against: Against, given: str, settings: GtaSettings
    ) -> None:
        """Paired with the baseline query by query, on the dataset."""
        baseline, differences = against
        compare_run(
            report,
            self.dataset,
            baseline=baseline,
            differences=differences,
            level=settings.stats.confidence,
            samples=settings.stats.bootstrap_samples,
        )

    def judge(self, report: RunReport, gates: GateSettings) -> GatesVerdict:
        """Floors on the metrics per mode, no significant drop against the baseline."""
        return judge(report, gates)

    def after_hook(self, report: RunReport) -> None:
        """The cases' flat JUnit properties follow what a hook changed in them."""
        refresh_properties(report)

    def renderers(self, report: RunReport, saved: Callable[[Path], None]) -> Renderers:
        """JSON, markdown, the HTML page with the queries' images, an Inspect log per mode."""
        dataset = self.dataset
        return Renderers(
            json=lambda: dump_report(report),
            markdown=lambda: render_markdown(report),
            html=lambda most: html_with_images(report, dataset, self._images(), most),
            inspect=lambda directory: write_inspect_logs(report, dataset, directory),
            junit=lambda suite: junit_xml(report, suite),
        )

    def table_lines(self, report: RunReport) -> list[str]:
        """The paper's tables."""
        return list(render_text(report))

    def summary_html(self, report: RunReport) -> str:
        """The paper's tables, as the HTML report's header shows them."""
        return summary_html(report)

    def suite_properties(self, report: RunReport) -> list[tuple[str, Any]]:
        """Each metric, its interval, the gates' verdict."""
        return list(suite_properties(report))

    def errors(self, report: RunReport) -> int:
        """The cases that errored."""
        return report.outcomes.error

    def regressed(self, report: RunReport) -> list[str] | None:
        """The regressed queries' node ids, when the run was compared with a baseline."""
        return None if report.comparison is None else regressed_nodeids(report.comparison)


def atomic_merge_command(config: pytest.Config, reports: Sequence[ReportFile]) -> int:
    """``--gta-merge`` on atomic reports: merge, print, write; 0 when merged.

    Raises:
        pytest.UsageError: a report is not part of the same run (exit status 4).
    """
    settings = resolve_settings(config)
    try:
        warnings = coverage_warnings(reports)
        check_same_run(reports)
        dataset = find_dataset(config, reports)
        report = merge_reports(
            reports,
            dataset,
            warnings,
            confidence=settings.stats.confidence,
            samples=settings.stats.bootstrap_samples,
        )
        against = merged_baseline(config, settings, report, dataset)
        finisher = KindFinisher(config, settings, AtomicKind(dataset), lambda: against)
        report = finisher.conclude(report)
    except GtaUsageError as exc:
        raise pytest.UsageError(f"pytest-gta: {terminal_text(str(exc))}") from None
    report.notes = list(dict.fromkeys(report.notes))
    say_line(f"merged {len(reports)} reports: {len(report.cases)} cases of {dataset.root}")
    for warning in warnings:
        say_line(f"warning: {warning}")
    print_tables("GTA results", render_text(report))
    # The shard jobs reported the cases; here only the gates and harness errors count.
    results = write_said(finisher.outputs(report, junit=True))
    return finisher.status(report, int(pytest.ExitCode.OK), failed(results))
