"""A run's report, of any benchmark: concluded, written, merged and compared by one code path.

What differs between kinds of report is small: how a run is compared with what it is measured
against, how the gates read it, how it is drawn, how shards are merged and runs put side by
side. A :class:`ReportKind` says how a run of its kind is concluded and written (GTA-Atomic's:
:mod:`pytest_gta.benchmarks.gta_atomic.kind`; GTA-Workflow's; a scored benchmark's), a
:class:`CommandKind` also how its reports are merged and compared; everything else is written
here once:

- :class:`KindFinisher` concludes any run (a session's collector, ``--gta-merge``): the
  comparison, the gates' verdicts, the ``pytest_gta_update_report`` hook, the secret cleaner,
  the files through the one writer (:func:`~pytest_gta.session.finish.report_files`) and the
  gated exit status;
- :func:`kind_merge_command` and :func:`kind_compare_command` are ``--gta-merge`` and
  ``--gta-compare`` on a command kind's reports (GTA-Atomic's merge rebuilds its metrics from
  the dataset, and its comparison groups shards: theirs are their own).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar

import pytest

from pytest_gta.errors import GtaUsageError
from pytest_gta.flags import OPT_REPORT, OPT_REPORT_MD
from pytest_gta.gates import GateSettings
from pytest_gta.options import GtaSettings, resolve_settings
from pytest_gta.outward import clean_text, terminal_text
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
Rc = TypeVar("Rc", bound=Doc, contravariant=True)
#: A run's report as a command read it: the label the user gave its file, and the report.
Labeled = tuple[str, R]


class ReportKind(Protocol[Rc]):
    """What one kind of report does its own way when a run of it is concluded and written."""

    #: The benchmark as the terminal's rules say it (``GTA-Workflow``).
    title: str

    def compare(self, report: Rc, against: Any, given: str, settings: GtaSettings) -> None:
        """Set the report's comparison (and rows) from what the run is measured against."""

    def judge(self, report: Rc, gates: GateSettings) -> GatesVerdict:
        """The gates' verdicts on the compared report."""

    def after_hook(self, report: Rc) -> None:
        """What follows from a ``pytest_gta_update_report`` hook's changes, before cleaning."""

    def renderers(self, report: Rc, saved: Callable[[Path], None]) -> Renderers:
        """The report's files; ``saved`` is told where an Inspect log went."""

    def table_lines(self, report: Rc) -> list[str]:
        """The terminal's tables."""

    def summary_html(self, report: Rc) -> str:
        """The tables as an HTML fragment (pytest-html's summary; escaped)."""

    def suite_properties(self, report: Rc) -> list[tuple[str, Any]]:
        """The run's suite-level JUnit properties."""

    def errors(self, report: Rc) -> int:
        """The cases that errored (a run with errors exits 1 without gates)."""

    def regressed(self, report: Rc) -> list[str] | None:
        """The regressed cases' node ids (``None``: not compared with a baseline report)."""


class CommandKind(ReportKind[R], Protocol[R]):
    """A kind whose reports ``--gta-merge`` and ``--gta-compare`` take by this module's code.

    GTA-Atomic's are not: its merge rebuilds the metrics from the dataset the shards ran on,
    and its comparison groups shards and draws plots (:mod:`~pytest_gta.session.compare_command`).
    """

    #: What its cases are called in messages (``tasks``).
    unit: str

    def check_gates(self, gates: GateSettings, baseline: bool) -> None:
        """Refuse, at start-up, a gate this kind cannot judge (raises ``pytest.UsageError``)."""

    def against(self, settings: GtaSettings, given: str) -> Any:
        """What the run is measured against (``--gta-baseline``, published rows), read once.

        Raises:
            GtaUsageError: a baseline of another kind, an unknown row.
        """

    def merge(self, reports: Sequence[Labeled[R]]) -> R:
        """One run from its shards' reports (raises ``GtaUsageError`` for another run's)."""

    def runs(self, reports: Sequence[Labeled[R]], settings: GtaSettings) -> Doc:
        """``--gta-compare``: the runs side by side (raises ``GtaUsageError``)."""

    def runs_lines(self, runs: Any) -> list[str]:
        """The comparison's terminal tables."""

    def runs_markdown(self, runs: Any) -> str:
        """The comparison as markdown (``--gta-report-md``, the job summary)."""


def _nothing() -> Any:
    return None


@dataclass
class KindFinisher(Generic[R]):
    """Concludes and writes one run of any benchmark: a session's, or a merged one's.

    In two steps, so that each caller prints where it prints: :meth:`conclude` (the report as
    it is printed and written), then :meth:`outputs` (the files it writes).
    """

    config: pytest.Config
    settings: GtaSettings
    kind: ReportKind[R]
    #: What the run is measured against (``--gta-baseline``...), as the kind compares with it.
    against: Callable[[], Any] = _nothing
    #: The Inspect log written (``--gta-inspect-log``), for the terminal's last lines.
    inspect_log: Path | None = field(default=None, init=False)

    @classmethod
    def of(
        cls, config: pytest.Config, settings: GtaSettings, kind: CommandKind[R]
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
        return cls(config, settings, kind, lambda: against)

    def conclude(self, report: R, nonfinite: int = 0) -> R:
        """The report compared, judged, given to the hook and cleaned for leaving.

        Whatever came from outside (replies, prediction files) or a hook leaves as strict JSON
        without secrets (see :mod:`pytest_gta.outward`); ``nonfinite`` non-finite numbers were
        cleaned from the cases where they ran, and are counted in the same note.

        Raises:
            GtaUsageError: a ``pytest_gta_update_report`` hook broke the report.
        """
        settings, kind = self.settings, self.kind
        kind.compare(report, self.against(), _given(self.config, settings), settings)
        if settings.gates.active:
            report.gates = kind.judge(report, settings.gates)  # type: ignore[attr-defined]
        self.config.hook.pytest_gta_update_report(config=self.config, report=report)
        kind.after_hook(report)
        return cleaned(report, nonfinite)

    def outputs(self, report: R, *, junit: bool = False) -> list[Output]:
        """The files the settings ask for; ``junit``: also pytest's ``--junitxml`` (a merge's).

        (:func:`~pytest_gta.session.finish.report_files`).
        """
        render = self.kind.renderers(report, self._saved)
        outputs = report_files(self.settings.report, render)
        xmlpath = self.config.getoption("xmlpath", None) if junit else None
        if xmlpath and render.junit is not None:
            suite = str(self.config.getini("junit_suite_name") or "pytest")
            xml = render.junit
            # Resolved as pytest's junitxml resolves it.
            outputs.append(
                Output(
                    Path(os.path.abspath(os.path.expanduser(os.path.expandvars(xmlpath)))),
                    lambda: xml(suite),
                    option="--junitxml",
                )
            )
        return outputs

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

    def text(self, report: R) -> list[str]:
        """The terminal's tables, report text cleaned (a hand-edited baseline's label)."""
        return [clean_text(line) for line in self.kind.table_lines(report)]


def _given(config: pytest.Config, settings: GtaSettings) -> str:
    """``--gta-baseline`` as the user wrote it (messages and the report name it so)."""
    return str(config.getoption("gta_baseline", None) or settings.baseline.report)


def kind_merge_command(
    config: pytest.Config, kind: CommandKind[R], reports: Sequence[Labeled[R]]
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
    config: pytest.Config, kind: CommandKind[R], reports: Sequence[Labeled[R]]
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
