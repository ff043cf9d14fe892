"""Finishing a run: the one writer of its files, and what GTA-Atomic's merge and comparison share.

Every benchmark's run is concluded by the one finisher
(:class:`~pytest_gta.session.kinds.KindFinisher`); the files it is asked for are listed here
(:func:`report_files`: ``--gta-report``, ``--gta-report-md``, the GitHub job summary,
``--gta-report-html``, ``--gta-inspect-log``) and written by the one writer
(:func:`write_outputs`: through symlinks, into devices, the job summary appended to), after
:func:`cleaned` took secrets and non-finite numbers out of the report. GTA-Atomic's
``--gta-merge`` and ``--gta-compare`` find the dataset their runs ran on here
(:func:`find_dataset`), and the merge reads its baseline against the merged run
(:func:`merged_baseline`); the report commands' terminal lines are printed here too.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import pytest
from pydantic import ValidationError

from pytest_gta.dataset import Dataset, bundled_sample_path
from pytest_gta.errors import DatasetError, GtaUsageError
from pytest_gta.files import write_output
from pytest_gta.flags import (
    OPT_DATA,
    OPT_INSPECT_LOG,
    OPT_MERGE,
    OPT_REPORT,
    OPT_REPORT_HTML,
    OPT_REPORT_MD,
)
from pytest_gta.options import GtaSettings, resolve_option, resolve_path
from pytest_gta.options.data import DATASET_NAME, SAMPLE_KEYWORD, resolve_data_dir
from pytest_gta.options.report import ReportSettings
from pytest_gta.outward import Cleaner, terminal_text
from pytest_gta.report.baseline import Baseline, comparable_run, read_baseline
from pytest_gta.report.html import render_html
from pytest_gta.report.images import ImageStore, store_case_images
from pytest_gta.results.base import Doc
from pytest_gta.results.io import (
    ReportFile,
    field_problem,
)
from pytest_gta.results.report import RunReport
from pytest_gta.validation import dataset_sha256, load_dataset
from pytest_gta.vocabulary import MODES

#: GitHub Actions' job summary file; the markdown report is appended to it when it is set.
STEP_SUMMARY_ENV = "GITHUB_STEP_SUMMARY"


@dataclass(frozen=True)
class Output:
    """A file a run writes from its report."""

    path: Path
    render: Callable[[], str]
    #: Appended to rather than replaced: a GitHub job summary is shared by the whole job.
    append: bool = False
    #: What named the path (``--gta-report``), for a message that says which file failed.
    option: str = ""
    #: Writes the output itself instead of ``render``'s text, and returns the files it wrote:
    #: ``--gta-inspect-log``, a directory of logs in another library's format.
    save: Callable[[], list[Path]] | None = None

    @property
    def label(self) -> str:
        """``gta.json (--gta-report)``: the path, and the option that named it."""
        return f"{self.path} ({self.option})" if self.option else str(self.path)


@dataclass(frozen=True)
class Renderers:
    """How one benchmark's report becomes each file a run may be asked for."""

    json: Callable[[], str]
    markdown: Callable[[], str]
    #: The HTML page within ``--gta-report-html-max-mb`` (bytes).
    html: Callable[[int], str]
    #: Writes ``--gta-inspect-log``'s logs into the directory; the files written.
    inspect: Callable[[Path], list[Path]]
    #: pytest's JUnit XML of the report for a suite name (``--gta-merge`` writes it, as a
    #: session's pytest does); ``None``: the kind has none of its own.
    junit: Callable[[str], str] | None = None


def report_files(files: ReportSettings, render: Renderers) -> list[Output]:
    """The files the settings ask for, for any benchmark, in one order.

    ``--gta-report``, ``--gta-report-md``, GitHub's job summary (``$GITHUB_STEP_SUMMARY``,
    appended to, when it is set), ``--gta-report-html``, ``--gta-inspect-log``.
    """
    outputs = []
    if files.json is not None:
        outputs.append(Output(files.json, render.json, option=OPT_REPORT))
    if files.md is not None:
        outputs.append(Output(files.md, render.markdown, option=OPT_REPORT_MD))
    summary = step_summary_output(render.markdown)
    if summary is not None:
        outputs.append(summary)
    if files.html is not None:
        max_bytes = int(files.html_max_mb * 1024 * 1024)
        outputs.append(Output(files.html, lambda: render.html(max_bytes), option=OPT_REPORT_HTML))
    directory = files.inspect_log
    if directory is not None:
        outputs.append(
            Output(
                directory,
                lambda: "",
                option=OPT_INSPECT_LOG,
                save=lambda: render.inspect(directory),
            )
        )
    return outputs


def step_summary_output(markdown: Callable[[], str]) -> Output | None:
    """GitHub Actions' job summary (``$GITHUB_STEP_SUMMARY``), appended to, when it is set."""
    summary = os.environ.get(STEP_SUMMARY_ENV, "").strip()
    if not summary:
        return None
    return Output(
        Path(summary), lambda: markdown() + "\n", append=True, option=f"${STEP_SUMMARY_ENV}"
    )


def html_with_images(
    report: RunReport, dataset: Dataset | None, store: ImageStore | None, max_bytes: int
) -> str:
    """The HTML report; cases without stored images get their input images.

    A case that errored before it was scored stored nothing, yet its query's images are worth
    seeing; they are added here, on the controller (content-addressed: no second copy).
    """
    if store is not None and dataset is not None:
        for case in report.cases:
            query = dataset.queries.get(case.query_id)
            if query is not None and not case.images:
                case.images = store_case_images(
                    store, [f.path for f in query.files], [], [dataset.root]
                )
    return render_html(report, dataset, store, max_bytes=max_bytes)


def write_outputs(outputs: Sequence[Output]) -> list[tuple[Output, str | None]]:
    """Write each output; per output ``None`` or why it could not be written (a full disk).

    Written as a shell redirection would reach the path (:func:`~pytest_gta.files.write_output`):
    through symlinks, and in place into ``/dev/stdout``, a device or a FIFO.
    """
    results: list[tuple[Output, str | None]] = []
    for output in outputs:
        try:
            if output.save is not None:
                output.save()
            elif output.append:
                with output.path.open("a", encoding="utf-8") as fh:
                    fh.write(output.render())
            else:
                write_output(output.path, output.render())
        except OSError as exc:
            results.append((output, str(exc.strerror or exc)))
        else:
            results.append((output, None))
    return results


R = TypeVar("R", bound=Doc)


def cleaned(report: R, nonfinite: int = 0) -> R:
    """``report`` as it may leave: strict JSON, secrets masked, a note on what was cleaned.

    Raises:
        GtaUsageError: a ``pytest_gta_update_report`` hook left a field of the wrong kind.
    """
    cleaner = Cleaner()
    # A hook may have set a field to a value of the wrong kind: validated below, by name.
    data = cleaner.value(report.model_dump(mode="python", by_alias=True, warnings=False))
    cleaner.nonfinite += nonfinite
    data["notes"] = [*data.get("notes", []), *cleaner.notes()]
    try:
        return type(report).model_validate(data)
    except ValidationError as exc:
        raise GtaUsageError(
            f"the report after pytest_gta_update_report: {field_problem(exc)}; a hook may "
            "add fields of its own (report.hook_fields) and change the report's within "
            "their kinds"
        ) from None


# --------------------------------------------------------------------------------------------
# --gta-merge


def find_dataset(
    config: pytest.Config,
    reports: Sequence[ReportFile],
    *,
    ran: str = "the shards",
    command: str = OPT_MERGE,
) -> Dataset:
    """The dataset the shards ran on: ``--gta-data``, else where the report says, else installed.

    ``ran`` and ``command`` are what messages call the reports and the command (``--gta-compare``
    finds its runs' dataset here too).

    Raises:
        GtaUsageError: it is not here (saying how to point at it), or it is another version.
    """
    recorded = reports[0].report.dataset
    sha = recorded.sha256
    named = resolve_option(config, "gta_data")
    if named.value is not None:
        path = (
            bundled_sample_path()
            if named.value == SAMPLE_KEYWORD
            else resolve_path(config, named.value, named.source)
        )
        candidates = [(path, named.origin)]
    else:
        candidates = [
            (Path(recorded.path), f"the path in {reports[0].label}"),
            (resolve_data_dir(config)[0] / DATASET_NAME, "the installed dataset"),
            (bundled_sample_path(), "the bundled sample"),
        ]
    for path, origin in candidates:
        try:
            found = dataset_sha256(path)
        except OSError:
            if named.value is not None:
                raise GtaUsageError(
                    f"{named.origin}={named.value}: no dataset.json in {path}; point it at the "
                    f"dataset {ran} ran on"
                ) from None
            continue
        if found != sha:
            if named.value is not None:
                raise GtaUsageError(
                    f"{named.origin}={named.value}: its dataset.json has sha256 {found[:16]}, "
                    f"{ran} ran on {sha[:16]}; point it at the dataset {ran} ran on"
                )
            continue
        try:
            return load_dataset(path)
        except DatasetError as exc:
            raise GtaUsageError(f"{exc}\n(dataset from {origin})") from None
    raise GtaUsageError(
        f"{ran} ran on the dataset at {recorded.path} (dataset.json sha256 {sha[:16]}), "
        f"which is not on this machine: {command} needs it for the cases' order and "
        f"denominators; pass {command} ... {OPT_DATA}=DIR with a copy of it"
    )


def merged_baseline(
    config: pytest.Config, settings: GtaSettings, report: RunReport, dataset: Dataset
) -> tuple[Baseline | None, list[str]]:
    """``--gta-baseline`` read and checked against the merged run, as a session checks it.

    Raises:
        GtaUsageError: a gate needs a mode the run lacks, or the baseline is unreadable or
            from another kind of run.
    """
    modes = [m for m in MODES if m in report.settings.modes]
    baseline = settings.baseline
    settings.gates.check_modes(modes, baseline.report is not None)
    if baseline.report is None:
        return None, []
    threshold = report.settings.sim_threshold
    run = comparable_run(
        dataset.sha256,
        modes,
        report.protocol,
        sim_model=report.settings.sim_model,
        sim_threshold=None if threshold is None else float(threshold),
    )
    given = config.getoption("gta_baseline") or baseline.report
    return read_baseline(baseline.report, given, run, baseline.lenient)


def write_said(outputs: Sequence[Output]) -> list[tuple[Output, str | None]]:
    """A report command's files written, each said (where it went, or why it could not be)."""
    results = write_outputs(outputs)
    for output, error in results:
        if error is None:
            say_line(f"written to {output.path}")
        else:
            say_line(f"could not write {output.label}: {error}")
    return results


def failed(results: Sequence[tuple[Output, str | None]]) -> bool:
    """Whether a file of ``results`` could not be written."""
    return any(error is not None for _, error in results)


def say_line(line: str) -> None:
    """A report command's ``pytest-gta:`` line (``--gta-merge``, ``--gta-compare``)."""
    # Lines name reports' labels and files: a report is a file anyone can edit.
    print(f"pytest-gta: {terminal_text(line)}", flush=True)


def print_tables(title: str, lines: list[str]) -> None:
    """A report command's tables under a ``title`` rule, report text escaped."""
    print(f" {title} ".center(80, "="), flush=True)
    for line in lines:
        print(terminal_text(line), flush=True)
