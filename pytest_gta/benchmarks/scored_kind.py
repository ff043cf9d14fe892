"""A scored benchmark's report's own ways (:class:`~pytest_gta.session.kinds.ReportKind`).

A third party's benchmark of scored cases is concluded, merged and compared by the one code
path of :mod:`pytest_gta.session.kinds`, as GTA-Workflow is; what is a scored report's own is
the pure functions of :mod:`pytest_gta.report.scored_runs` (a baseline of the same benchmark,
paired by case; gates on ``scored.NAME``; a merge that takes every case once) and its pages
(:mod:`pytest_gta.report.scored`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from pytest_gta.flags import OPT_BASELINE, OPT_REPORT
from pytest_gta.gates import GateSettings
from pytest_gta.options import GtaSettings
from pytest_gta.report import scored as render
from pytest_gta.report import scored_runs
from pytest_gta.results.io import expect_benchmark, read_report_data
from pytest_gta.results.report import GatesVerdict
from pytest_gta.results.scored import ScoredReport, ScoredRuns, dump_scored, parse_scored
from pytest_gta.session.finish import Renderers
from pytest_gta.session.kinds import Labeled


class ScoredKind:
    """The report of one scored benchmark, by its name."""

    unit = "cases"

    def __init__(self, benchmark: str) -> None:
        self.title = benchmark

    def check_gates(self, gates: GateSettings, baseline: bool) -> None:
        """Only ``scored.NAME`` gates; a regression gate needs a baseline."""
        gates.check_scored(self.title, baseline)

    def against(self, settings: GtaSettings, given: str) -> ScoredReport | None:
        """``--gta-baseline``: a report of this benchmark.

        Raises:
            GtaUsageError: unreadable, or another benchmark's report.
        """
        spec = settings.baseline.report
        if spec is None:
            return None
        named = f"{OPT_BASELINE} {given}"
        data = read_report_data(Path(spec), named, f"{OPT_BASELINE} reads a {OPT_REPORT}")
        expect_benchmark(data, named, self.title, "this run")
        return parse_scored(named, data)

    def compare(
        self, report: ScoredReport, against: ScoredReport | None, given: str, settings: GtaSettings
    ) -> None:
        """The run against its baseline, paired by case."""
        if against is not None:
            stats = settings.stats
            report.comparison = scored_runs.compare(
                report, against, given, stats.confidence, stats.bootstrap_samples
            )

    def judge(self, report: ScoredReport, gates: GateSettings) -> GatesVerdict:
        """Floors on the metrics, no significant drop against the baseline."""
        return scored_runs.judge(report, gates)

    def after_hook(self, report: Any) -> None:
        """Nothing follows from a hook's changes."""

    def renderers(self, report: ScoredReport, saved: Callable[[Path], None]) -> Renderers:
        """The JSON, markdown, HTML page and Inspect log of a scored run."""

        def inspect(directory: Path) -> list[Path]:
            path = render.write_scored_inspect_log(report, directory)
            saved(path)
            return [path]

        return Renderers(
            json=lambda: dump_scored(report),
            markdown=lambda: render.render_markdown(report),
            html=lambda most: render.render_html(report, most),
            inspect=inspect,
        )

    def table_lines(self, report: ScoredReport) -> list[str]:
        """The metrics' table."""
        return render.table_lines(report)

    def summary_html(self, report: ScoredReport) -> str:
        """The run's page, for pytest-html's summary."""
        return render.render_html(report)

    def suite_properties(self, report: ScoredReport) -> list[tuple[str, Any]]:
        """Each metric, and the gates' verdict."""
        properties: list[tuple[str, Any]] = [
            (f"gta_{self.title}_{name}", round(value, 4))
            for name, value in report.metrics.items()
            if value is not None
        ]
        if report.gates is not None:
            properties.append(("gta_gates_passed", str(report.gates.passed).lower()))
        return properties

    def errors(self, report: ScoredReport) -> int:
        """The cases that errored."""
        return report.errors

    def regressed(self, report: ScoredReport) -> list[str] | None:
        """The node ids of the cases that passed in the baseline and fail now."""
        if report.comparison is None:
            return None
        cases = set(report.comparison.regressed)
        return [case.nodeid for case in report.cases if case.id in cases]

    def merge(self, reports: Sequence[Labeled[ScoredReport]]) -> ScoredReport:
        """Every case once, the metrics recomputed (raises ``GtaUsageError``)."""
        return scored_runs.merge(reports)

    def runs(self, reports: Sequence[Labeled[ScoredReport]], settings: GtaSettings) -> ScoredRuns:
        """The runs' metrics side by side."""
        return scored_runs.runs(reports)

    def runs_lines(self, runs: Any) -> list[str]:
        """The runs' table."""
        return render.runs_lines(runs)

    def runs_markdown(self, runs: Any) -> str:
        """The runs' table as markdown."""
        return render.runs_markdown(runs)
