"""``pytest --gta-compare REPORT_OR_DIR ...``: runs side by side, instead of a session.

The comparison itself is pure (:func:`pytest_gta.report.runs.build_comparison`); this command
finds what it compares. Each path is a ``--gta-report`` file, or a directory whose ``*.json``
reports are taken oldest first (``identity.started_at``, then the file name), so that a nightly
job that keeps its reports in one directory shows its trend; other JSON there (the comparison's
own file, a tool's output) is skipped with a note; GTA-Workflow's and scored benchmarks' reports
are ordered so too. Files given one by one keep their order.

Every report is read through the reports' one reader
(:func:`~pytest_gta.results.io.load_any_report`), so a bad field is a usage error naming the file
and the field. Reports on another dataset cannot be compared (a usage error naming both
files and ``dataset.sha256``); settings that differ between runs (protocol, scoring, turns,
tools, sampling, epochs, selection) can, and are noted once each, naming the runs. The reports
of one sharded run (``--gta-shard=K/N``: same model, settings, label and commit) are grouped and
merged as ``--gta-merge`` merges them (:mod:`pytest_gta.report.merge`) into one run; a missing
shard is a note. Labels come from the reports (``--gta-label``) and are made unique (``#2``).

The command prints the tables under a ``GTA comparison`` rule, writes ``--gta-report`` (the
comparison JSON, ``pytest-gta-comparison/1``), ``--gta-report-md``, ``--gta-report-html`` and
the GitHub job summary, and exits 0; anything it cannot compare is exit status 4.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from pytest_gta.dataset import Dataset
from pytest_gta.errors import GtaUsageError
from pytest_gta.flags import (
    OPT_COMPARE,
    OPT_DATA,
    OPT_EPOCHS,
    OPT_REPORT,
    OPT_REPORT_HTML,
    OPT_REPORT_MD,
)
from pytest_gta.jsonsafe import JsonInputError, collection_paused, read_json
from pytest_gta.options import RANGES, GtaSettings, resolve_option, resolve_settings
from pytest_gta.outward import Cleaner, terminal_text
from pytest_gta.provenance import parse_utc
from pytest_gta.report.merge import (
    SELECTION_SETTINGS,
    check_same_run,
    coverage_warnings,
    merge_reports,
)
from pytest_gta.report.runs import RunInput, build_comparison
from pytest_gta.report.runs_html import render_comparison_html
from pytest_gta.report.runs_text import render_markdown, render_text
from pytest_gta.results.comparison import Comparison
from pytest_gta.results.io import (
    MAX_REPORT_BYTES,
    ReportFile,
    ScoredFile,
    WorkflowFile,
    benchmark_of,
    dump_comparison,
    one_benchmark,
    parse_any_report,
    parse_comparison,
    read_report_data,
    show_value,
)
from pytest_gta.results.report import Interval, RunReport
from pytest_gta.results.scored import ScoredReport
from pytest_gta.results.workflow import WorkflowReport
from pytest_gta.session.finish import (
    Output,
    failed,
    find_dataset,
    print_tables,
    say_line,
    step_summary_output,
    write_said,
)

#: A setting the run did not have (a run that did not generate has no sampling settings).
ABSENT = object()
#: How the reader's messages say where compared reports come from.
COMPARE_HOW = f"{OPT_COMPARE} reads the {OPT_REPORT} files of the runs it compares"


def _generation(key: str) -> Callable[[RunReport], Any]:
    """A generation setting of a run's report (:data:`ABSENT`: the run did not generate)."""

    def read(report: RunReport) -> Any:
        generation = report.settings.generation
        return generation[key] if generation is not None and key in generation else ABSENT

    return read


#: The settings whose differences between runs are noted: (the field as a note names it, how
#: to read it from a report). Sampling is compared only between runs that generated (the
#: oracle and replays have none).
NOTED_SETTINGS: tuple[tuple[str, Callable[[RunReport], Any]], ...] = (
    ("protocol", lambda report: report.protocol),
    ("settings.sim_model", lambda report: report.settings.sim_model),
    ("settings.sim_threshold", lambda report: report.settings.sim_threshold),
    ("settings.max_turns", lambda report: report.settings.max_turns),
    ("settings.tools", lambda report: report.settings.tools),
    ("settings.generation.temperature", _generation("temperature")),
    ("settings.generation.max_tokens", _generation("max_tokens")),
    ("settings.generation.seed", _generation("seed")),
    ("epochs", lambda report: report.epochs),
    ("settings.ids", lambda report: report.settings.ids),
    ("settings.limit", lambda report: report.settings.limit),
)


@dataclass
class Found:
    """The reports the paths hold, in comparison order, and what was skipped on the way."""

    reports: list[ReportFile] = field(default_factory=list)
    #: Reports of another benchmark (compared by their benchmark's command, never mixed).
    others: list[WorkflowFile | ScoredFile] = field(default_factory=list)
    #: Each report's file, absolute, by its label (where a run's own page is looked for).
    files: dict[str, Path] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


@dataclass
class Run:
    """One run to compare: its report (merged from shards) and the files it came from."""

    parts: list[ReportFile]
    report: RunReport
    label: str = ""

    @property
    def sources(self) -> tuple[str, ...]:
        """The report files as the user named them."""
        return tuple(part.label for part in self.parts)


# --------------------------------------------------------------------------------------------
# What the reports say about their run (checked by the reader; older reports' filled in)


def started_at(report: RunReport | WorkflowReport | ScoredReport) -> datetime | None:
    """When the run started (``identity.started_at``); ``None``: a report without dates."""
    text = None if report.identity is None else report.identity.started_at
    return None if text is None else parse_utc(text)


def commit(report: RunReport) -> str | None:
    """The git commit of the project under test, when the run recorded one."""
    git = report.identity.git
    return None if git is None else git.commit


# --------------------------------------------------------------------------------------------
# Finding the reports


def _refuse(report: ReportFile, where: str, value: Any, wanted: str) -> GtaUsageError:
    return GtaUsageError(
        f"{report.label}: {where} is {show_value(value)}, not {wanted}; {COMPARE_HOW}"
    )


def check_copied(report: ReportFile) -> None:
    """What the comparison copies from a run's report and the report's reader lets through.

    The reader checks every field's kind; a comparison also counts over the run's epochs (so
    they must be a number of epochs ``--gta-epochs`` could have run), divides its wall time,
    and shows each interval as ``[low, high]``.

    Raises:
        GtaUsageError: naming the file and the field.
    """
    data = report.report
    low, high = RANGES[OPT_EPOCHS]
    if not low <= data.epochs <= high:
        raise _refuse(report, "epochs", data.epochs, f"a number of epochs ({low:g} to {high:g})")
    if data.duration_s is not None and data.duration_s < 0:
        raise _refuse(report, "duration_s", data.duration_s, "seconds")
    for mode, intervals in data.metrics_ci.items():
        for metric, interval in intervals:
            if isinstance(interval, Interval) and (interval.low is None) != (interval.high is None):
                where = f"metrics_ci.{mode}.{metric}"
                raise _refuse(
                    report, where, interval.to_json_value(), "an interval (both ends, or neither)"
                )


@dataclass(frozen=True)
class _Loaded:
    """A report file's JSON, before it is checked (the benchmarks are told apart first)."""

    label: str
    data: Any
    path: Path


def _read_candidate(path: Path, label: str, notes: list[str]) -> _Loaded | None:
    """A directory's ``*.json`` file: a report is kept, other JSON skipped with a note."""
    try:
        size = path.stat().st_size
        data = None if size > MAX_REPORT_BYTES else read_json(path)
    except (OSError, JsonInputError) as exc:
        text = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        notes.append(f"{label}: skipped, not readable as JSON ({text})")
        return None
    if data is None or benchmark_of(data) is None:
        schema = data.get("schema") if isinstance(data, dict) else None
        what = "too large for a report" if data is None else f"schema {show_value(schema)}"
        notes.append(f"{label}: skipped, not a pytest-gta report ({what})")
        return None
    return _Loaded(label, data, path)


def _in_directory(directory: Path, given: str, notes: list[str]) -> list[_Loaded]:
    """A directory's reports (its ``*.json`` files that are pytest-gta reports)."""
    try:
        names = sorted(
            p.name for p in directory.iterdir() if p.suffix == ".json" and not p.is_dir()
        )
    except OSError as exc:
        raise GtaUsageError(f"{given}: {exc.strerror or exc}; {COMPARE_HOW}") from None
    loaded = [_read_candidate(directory / n, os.path.join(given, n), notes) for n in names]
    kept = [entry for entry in loaded if entry is not None]
    if not kept:
        raise GtaUsageError(
            f"{given}: no pytest-gta reports in this directory (its *.json files are read, "
            f"not its subdirectories); {COMPARE_HOW}"
        )
    return kept


def find_reports(paths: Sequence[Path], given: Sequence[str]) -> Found:
    """Every report the paths name, in comparison order (see the module docstring).

    A directory's reports come oldest run first (undated ones, older versions', lead). The
    benchmarks are told apart before any report is checked: runs of two are refused whatever
    else is wrong with them.

    Raises:
        GtaUsageError: a file that is not a report, a bad field, an empty directory, reports
            of two benchmarks.
    """
    found = Found()
    groups: list[list[_Loaded]] = []
    for path, label in zip(paths, given, strict=True):
        if path.is_dir():
            groups.append(_in_directory(path, label, found.notes))
        else:
            data = read_report_data(path, label, COMPARE_HOW)
            if benchmark_of(data) is None:  # said now, in the order the files were named
                parse_any_report(label, data, COMPARE_HOW)
            groups.append([_Loaded(label, data, path)])
    one_benchmark([(e.label, e.data) for group in groups for e in group], OPT_COMPARE)
    epoch = datetime.min.replace(tzinfo=timezone.utc)
    for group in groups:
        atomic: list[ReportFile] = []
        others: list[WorkflowFile | ScoredFile] = []
        for entry in group:
            # A report of ours: a bad field is the user's to fix, not something to skip quietly.
            read = parse_any_report(entry.label, entry.data, COMPARE_HOW)
            if not isinstance(read, ReportFile):
                others.append(read)
                continue
            atomic.append(read)
            found.files[read.label] = entry.path
            check_copied(read)
        if len(group) > 1:  # a directory's: oldest run first, whatever the benchmark
            atomic.sort(key=lambda r: (started_at(r.report) or epoch, Path(r.label).name))
            others.sort(key=lambda r: (started_at(r.report) or epoch, Path(r.label).name))
        found.reports.extend(atomic)
        found.others.extend(others)
    return found


def check_one_dataset(reports: Sequence[ReportFile]) -> None:
    """Refuse runs on different datasets: their numbers are not of the same questions.

    Raises:
        GtaUsageError: naming both files, the field and both values.
    """
    first = reports[0]
    sha = first.report.dataset.sha256
    for report in reports[1:]:
        theirs = report.report.dataset.sha256
        if theirs != sha:
            raise GtaUsageError(
                f"{report.label}: dataset.sha256 is {show_value(theirs)}, {first.label} has "
                f"{show_value(sha)}: runs on different datasets cannot be compared; compare "
                f"reports of runs on one dataset ({OPT_DATA})"
            )


# --------------------------------------------------------------------------------------------
# Runs: one per report, or one per sharded run


def _shard_key(report: ReportFile) -> str:
    """What the shards of one run share: model, protocol, dataset, settings, label, commit."""
    data = report.report
    settings = data.settings.to_json_value()
    return json.dumps(
        [
            data.model,
            data.protocol,
            data.dataset.sha256,
            {k: v for k, v in settings.items() if k not in SELECTION_SETTINGS},
            data.label,
            commit(data),
            None if data.shard is None else data.shard.total,
        ],
        sort_keys=True,
        default=str,
    )


def group_runs(reports: Sequence[ReportFile]) -> list[list[ReportFile]]:
    """The reports grouped into runs, in the order of each run's first report.

    A report without ``shard`` is a run. Shard reports with the same :func:`_shard_key` are one
    run until a shard index repeats, which starts the next run (last night's 1/2 and 2/2, then
    tonight's, under one default label).
    """
    groups: list[list[ReportFile]] = []
    open_runs: dict[str, list[ReportFile]] = {}
    for report in reports:
        shard = report.report.shard
        if shard is None:
            groups.append([report])
            continue
        key = _shard_key(report)
        group = open_runs.get(key)
        if group is None or any(
            part.report.shard is not None and part.report.shard.index == shard.index
            for part in group
        ):
            group = []
            groups.append(group)
            open_runs[key] = group
        group.append(report)
    return groups


def make_run(
    parts: list[ReportFile], dataset: Dataset, level: float, samples: int
) -> tuple[Run, list[str]]:
    """One run from its reports: a shard group merged as ``--gta-merge`` does; its warnings.

    Raises:
        GtaUsageError: the shards are not of one run (as ``--gta-merge`` refuses them).
    """
    if parts[0].report.shard is None:
        return Run(parts, parts[0].report), []
    warnings = coverage_warnings(parts, command=OPT_COMPARE)
    check_same_run(parts)
    merged = merge_reports(parts, dataset, warnings, confidence=level, samples=samples)
    return Run(parts, merged), warnings


def unique_labels(runs: Sequence[Run]) -> None:
    """Each run's label, the second and later of a name suffixed `` #2``, `` #3``, ..."""
    taken: set[str] = set()
    counts: dict[str, int] = {}
    for run in runs:
        base = run.report.label
        label = base
        while label in taken:
            counts[base] = counts.get(base, 1) + 1
            label = f"{base} #{counts[base]}"
        taken.add(label)
        run.label = label


def setting_notes(runs: Sequence[Run]) -> list[str]:
    """One note per setting that differs between runs, naming the runs with each value."""
    notes = []
    for name, read in NOTED_SETTINGS:
        values: dict[str, list[str]] = {}
        for run in runs:
            value = read(run.report)
            if value is ABSENT:
                continue
            shown = show_value(value if value is not None else "none")
            values.setdefault(shown, []).append(run.label)
        if len(values) > 1:
            each = "; ".join(f"{value} ({', '.join(labels)})" for value, labels in values.items())
            notes.append(f"the runs differ in {name}: {each}")
    return notes


def html_beside(run: Run, source: Path | None, page: Path | None) -> str | None:
    """The run's own HTML report, as a link from the comparison page (absolute without one).

    The report's file with ``.html`` for ``.json``; a merged run's shards have none of their
    own worth linking.
    """
    if len(run.parts) != 1 or source is None:
        return None
    candidate = source.with_suffix(".html")
    if not candidate.is_file():
        return None
    if page is None:
        return str(candidate)
    return Path(os.path.relpath(candidate, page.absolute().parent)).as_posix()


# --------------------------------------------------------------------------------------------
# The command


@dataclass(frozen=True)
class Compared:
    """What :func:`compare` made: the comparison, and how many reports it read."""

    comparison: Comparison
    reports: int
    dataset_root: Path


@dataclass(frozen=True)
class CompareSettings:
    """What the comparison takes from the settings (:meth:`of`)."""

    reference: str | None = None
    leaderboard: tuple[str, ...] = ()
    level: float = 0.95
    samples: int = 2000
    #: ``--gta-report-html``: where the page goes, which its links into runs' pages start from.
    page: Path | None = None

    @classmethod
    def of(cls, settings: GtaSettings) -> CompareSettings:
        """From the resolved ``--gta-*`` settings."""
        return cls(
            settings.comparison.ref,
            settings.comparison.leaderboard_rows,
            settings.stats.confidence,
            settings.stats.bootstrap_samples,
            settings.report.html,
        )


def run_inputs(
    found: Found, dataset: Dataset, settings: CompareSettings
) -> tuple[list[RunInput], list[str]]:
    """The runs the reports found are (shards merged, labels unique), and the notes on them.

    Raises:
        GtaUsageError: reports on another dataset, shards that are not of one run.
    """
    check_one_dataset(found.reports)
    runs: list[Run] = []
    notes = list(found.notes)
    for parts in group_runs(found.reports):
        run, warnings = make_run(parts, dataset, settings.level, settings.samples)
        runs.append(run)
        notes.extend(warnings)
    unique_labels(runs)
    notes.extend(setting_notes(runs))
    inputs = [
        RunInput(
            label=run.label,
            sources=run.sources,
            report=run.report,
            html=html_beside(run, found.files.get(run.parts[0].label), settings.page),
        )
        for run in runs
    ]
    return inputs, notes


def comparison_of(found: Found, dataset: Dataset, settings: CompareSettings) -> Comparison:
    """The comparison of the reports found, on ``dataset`` (the one they all ran on).

    Raises:
        GtaUsageError: anything :func:`run_inputs` refuses, an unknown reference or
            leaderboard name.
    """
    inputs, notes = run_inputs(found, dataset, settings)
    return build_comparison(
        inputs,
        dataset,
        reference=settings.reference,
        leaderboard=settings.leaderboard,
        level=settings.level,
        samples=settings.samples,
        notes=notes,
    )


def named_reports(config: pytest.Config) -> Found:
    """Every report ``--gta-compare`` names, of any benchmark (see :func:`find_reports`).

    Raises:
        GtaUsageError: a file that is not a report, a bad field, an empty directory.
    """
    given: list[str] = config.getoption("gta_compare")
    paths: list[Path] = resolve_option(config, "gta_compare").value
    with collection_paused():
        return find_reports(paths, given)


def compare(config: pytest.Config, settings: GtaSettings, found: Found) -> Compared:
    """Check, group and compare the GTA-Atomic reports ``--gta-compare`` named.

    Raises:
        GtaUsageError: anything that cannot be compared, naming the file and the field.
    """
    # Twenty reports are millions of objects, none in a cycle: collections while they are
    # alive would walk them all again and again for nothing (see collection_paused). They are
    # freed before the collector runs again, or its first pass would walk them all once more.
    with collection_paused():
        check_one_dataset(found.reports)
        dataset = find_dataset(config, found.reports[:1], ran="the runs", command=OPT_COMPARE)
        compared = Compared(
            comparison_of(found, dataset, CompareSettings.of(settings)),
            len(found.reports),
            dataset.root,
        )
        del found, dataset
    return compared


def cleaned(comparison: Comparison) -> Comparison:
    """The comparison as the command shows and writes it: every text cleaned.

    Reports were cleaned when written; a hand-edited one may still hold a secret, which every
    output of the command then redacts.

    Raises:
        GtaUsageError: what cleaning left is not a comparison (a number too long to print).
    """
    return parse_comparison(OPT_COMPARE, Cleaner().value(comparison.to_json_value()), "")


def comparison_outputs(comparison: Comparison, settings: GtaSettings) -> list[Output]:
    """``--gta-report`` (the JSON), ``--gta-report-md``, ``--gta-report-html``, the job summary."""
    outputs = []
    if settings.report.json is not None:
        outputs.append(
            Output(settings.report.json, lambda: dump_comparison(comparison), option=OPT_REPORT)
        )
    if settings.report.md is not None:
        outputs.append(
            Output(settings.report.md, lambda: render_markdown(comparison), option=OPT_REPORT_MD)
        )
    if settings.report.html is not None:
        outputs.append(
            Output(
                settings.report.html,
                lambda: render_comparison_html(comparison),
                option=OPT_REPORT_HTML,
            )
        )
    summary = step_summary_output(lambda: render_markdown(comparison))
    if summary is not None:
        outputs.append(summary)
    return outputs


def compare_command(config: pytest.Config, found: Found) -> int:
    """The ``--gta-compare`` command on atomic reports: compare, print, write; 0 when compared.

    Raises:
        pytest.UsageError: reports that cannot be compared (exit status 4).
    """
    settings = resolve_settings(config)
    try:
        compared = compare(config, settings, found)
        comparison = cleaned(compared.comparison)
    except GtaUsageError as exc:
        raise pytest.UsageError(f"pytest-gta: {terminal_text(str(exc))}") from None
    runs = comparison.runs
    say_line(
        f"compared {len(runs)} runs from {compared.reports} reports on the dataset at "
        f"{compared.dataset_root}"
    )
    print_tables("GTA comparison", render_text(comparison))
    results = write_said(comparison_outputs(comparison, settings))
    return int(pytest.ExitCode.TESTS_FAILED if failed(results) else pytest.ExitCode.OK)
