"""A benchmark's own kind of report: concluded, written, merged and compared by one code path.

GTA-Atomic's report is finished by :class:`~pytest_gta.session.finish.Finisher`. GTA-Workflow
and every scored benchmark (a third party's) write reports of their own kind, and what differs
between those kinds is small: how a run is compared with what it is measured against, how the
gates read it, how it is drawn, how shards are merged and runs put side by side. A
:class:`ReportKind` says exactly that; everything else is written here once, for all of them:

- :class:`KindFinisher` concludes a run (a session's collector, ``--gta-merge``): the baseline
  and the gates checked at start-up, the comparison, the gates' verdicts, the
  ``pytest_gta_update_report`` hook, the secret cleaner, the files through the one writer
  (:func:`~pytest_gta.session.finish.report_files`) and the gated exit status;
- :func:`kind_merge_command` and :func:`kind_compare_command` are ``--gta-merge`` and
  ``--gta-compare`` on such reports.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar

import pytest

from pytest_gta.errors import GtaUsageError
from pytest_gta.flags import OPT_REPORT, OPT_REPORT_MD
from pytest_gta.gates import GateSettings
from pytest_gta.options import GtaSettings, resolve_settings
from pytest_gta.outward import terminal_text
from pytest_gta.report.gate_verdicts import final_status
from pytest_gta.results.base import Doc
from pytest_gta.results.report import GatesVerdict
from pytest_gta.session.finish import (
    Output,
    Renderers,
    cleaned,
    failed,
    print_tables,
    report_files,
    say_line,
    step_summary_output,
    write_said,
)

R = TypeVar("R", bound=Doc)
#: A run's report as a command read it: the label the user gave its file, and the report.
Labeled = tuple[str, R]


class ReportKind(Protocol[R]):
    """What one kind of report does its own way (GTA-Workflow's, a scored benchmark's)."""

    #: The benchmark as the terminal's rules say it (``GTA-Workflow``).
    title: str
    #: What its cases are called in messages (``tasks``).
    unit: str

    def check_gates(self, gates: GateSettings, baseline: bool) -> None:
        """Refuse, at start-up, a gate this kind cannot judge (raises ``pytest.UsageError``)."""

    def against(self, settings: GtaSettings, given: str) -> Any:
        """What the run is measured against (``--gta-baseline``, published rows), read once.

        Raises:
            GtaUsageError: a baseline of another kind, an unknown row.
        """

    def compare(self, report: R, against: Any, given: str, settings: GtaSettings) -> None:
        """Set the report's comparison (and rows) from what :meth:`against` read."""

    def judge(self, report: R, gates: GateSettings) -> GatesVerdict:
        """The gates' verdicts on the concluded report."""

    def renderers(self, report: R, saved: Callable[[Path], None]) -> Renderers:
        """The report's files; ``saved`` is told where the Inspect log went."""

    def table_lines(self, report: R) -> list[str]:
        """The terminal's tables."""

    def errors(self, report: R) -> int:
        """The cases that errored (a run with errors exits 1 without gates)."""

    def regressed(self, report: R) -> list[str] | None:
        """The regressed cases' node ids (``None``: not compared with a baseline report)."""

    def merge(self, reports: Sequence[Labeled[R]]) -> R:
        """One run from its shards' reports (raises ``GtaUsageError`` for another run's)."""

    def runs(self, reports: Sequence[Labeled[R]], settings: GtaSettings) -> Doc:
        """``--gta-compare``: the runs side by side (raises ``GtaUsageError``)."""

    def runs_lines(self, runs: Any) -> list[str]:
        """The comparison's terminal tables."""

    def runs_markdown(self, runs: Any) -> str:
        """The comparison as markdown (``--gta-report-md``, the job summary)."""


@dataclass
class KindFinisher(Generic[R]):
    """Concludes and writes one run of a kind; what it reads from the options, read once."""

    config: pytest.Config
    settings: GtaSettings
    kind: ReportKind[R]
    against: Any = None
    #: The Inspect log written (``--gta-inspect-log``), for the terminal's last lines.
    inspect_log: Path | None = field(default=None, init=False)

    @classmethod
    def of(
        cls, config: pytest.Config, settings: GtaSettings, kind: ReportKind[R]
    ) -> KindFinisher[R]:
        """Check the gates and read what the run is measured against, before any case.

        Raises:
            pytest.UsageError: a gate the kind cannot judge, a baseline of another kind.
        """
        kind.check_gates(settings.gates, settings.baseline.report is not None)
        try:
            against = kind.against(settings, _given(config, settings))
        except GtaUsageError as exc:
            raise pytest.UsageError(f"pytest-gta: {terminal_text(str(exc))}") from None
        return cls(config, settings, kind, against)

    def conclude(self, report: R) -> R:
        """The report compared, judged, given to the hook and cleaned for leaving.

        Raises:
            GtaUsageError: a ``pytest_gta_update_report`` hook broke the report.
        """
        settings = self.settings
        self.kind.compare(report, self.against, _given(self.config, settings), settings)
        if settings.gates.active:
            report.gates = self.kind.judge(report, settings.gates)  # type: ignore[attr-defined]
        self.config.hook.pytest_gta_update_report(config=self.config, report=report)
        return cleaned(report)

    def outputs(self, report: R) -> list[Output]:
        """The files the settings ask for (:func:`~pytest_gta.session.finish.report_files`)."""
        return report_files(self.settings.report, self.kind.renderers(report, self._saved))

    def _saved(self, path: Path) -> None:
        self.inspect_log = path

    def status(self, report: R, status: int, write_failed: bool) -> int:
        """The exit status: the gates' (with gates), and not 0 when a file was not written."""
        gates = report.gates  # type: ignore[attr-defined]
        return final_status(gates, self.kind.errors(report), status, write_failed)

    def regressed(self, report: R) -> list[str] | None:
        """What ``--gta-rerun-regressions`` reruns next time (the kind's :meth:`regressed`)."""
        return self.kind.regressed(report)

    def written(self) -> list[str]:
        """Where the Inspect log went (a file in ``--gta-inspect-log``'s directory)."""
        log = self.inspect_log
        return [] if log is None else [f"Inspect log written to {log}"]


def _given(config: pytest.Config, settings: GtaSettings) -> str:
    """``--gta-baseline`` as the user wrote it (messages and the report name it so)."""
    return str(config.getoption("gta_baseline", None) or settings.baseline.report)


def kind_merge_command(
    config: pytest.Config, kind: ReportKind[R], reports: Sequence[Labeled[R]]
) -> int:
    """``--gta-merge``: merge, print the tables, write the files; 0 when merged.

    The shard jobs reported the cases; here only the gates and the files count.

    Raises:
        pytest.UsageError: reports that are not shards of one run (exit status 4).
    """
    finisher = KindFinisher.of(config, resolve_settings(config), kind)
    try:
        report = finisher.conclude(kind.merge(reports))
    except GtaUsageError as exc:
        raise pytest.UsageError(f"pytest-gta: {terminal_text(str(exc))}") from None
    cases = len(report.cases)  # type: ignore[attr-defined]
    say_line(f"merged {len(reports)} reports: {cases} {kind.unit} of {kind.title}")
    print_tables(f"{kind.title} results", kind.table_lines(report))
    results = write_said(finisher.outputs(report))
    return finisher.status(report, int(pytest.ExitCode.OK), failed(results))


def kind_compare_command(
    config: pytest.Config, kind: ReportKind[R], reports: Sequence[Labeled[R]]
) -> int:
    """``--gta-compare``: the runs side by side, and the files; 0 when compared.

    ``--gta-report`` (the comparison's JSON), ``--gta-report-md`` and the job summary.

    Raises:
        pytest.UsageError: runs that cannot be compared (exit status 4).
    """
    settings = resolve_settings(config)
    try:
        runs = kind.runs(reports, settings)
    except GtaUsageError as exc:
        raise pytest.UsageError(f"pytest-gta: {terminal_text(str(exc))}") from None
    say_line(f"compared {len(reports)} {kind.title} runs")
    print_tables(f"{kind.title} comparison", kind.runs_lines(runs))
    text = json.dumps(runs.to_json_value(), indent=2, ensure_ascii=False, allow_nan=False)
    outputs = []
    if settings.report.json is not None:
        outputs.append(Output(settings.report.json, lambda: text, option=OPT_REPORT))
    if settings.report.md is not None:
        outputs.append(
            Output(settings.report.md, lambda: kind.runs_markdown(runs), option=OPT_REPORT_MD)
        )
    summary = step_summary_output(lambda: kind.runs_markdown(runs))
    if summary is not None:
        outputs.append(summary)
    results = write_said(outputs)
    return int(pytest.ExitCode.TESTS_FAILED if failed(results) else pytest.ExitCode.OK)
