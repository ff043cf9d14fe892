"""``pytest --gta-compare REPORT_OR_DIR ...``: runs side by side, instead of a session.

The comparison itself is pure (:func:`pytest_gta.report.runs.build_comparison`); this command
finds what it compares. Each path is a ``--gta-report`` file, or a directory whose ``*.json``
reports are taken oldest first (``identity.started_at``, then the file name), so that a nightly
job that keeps its reports in one directory shows its trend; other JSON there (the comparison's
own file, a tool's output) is skipped with a note. Files given one by one keep their order.

Every report is read through the report's one reader
(:func:`~pytest_gta.report.schema.load_report`), so a bad field is a usage error naming the
file and the field. Reports on another dataset cannot be compared (a usage error naming both
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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, cast

import pytest

from pytest_gta.dataset import Dataset
from pytest_gta.errors import GtaUsageError
from pytest_gta.jsonsafe import JsonInputError, read_json
from pytest_gta.options import OPT_COMPARE, GtaSettings, resolve_option, resolve_settings
from pytest_gta.outward import Cleaner
from pytest_gta.report.merge import (
    SELECTION_SETTINGS,
    check_same_run,
    coverage_warnings,
    merge_reports,
)
from pytest_gta.report.runs import RunInput, build_comparison
from pytest_gta.report.runs_text import render_markdown, render_text
from pytest_gta.report.schema import (
    MAX_REPORT_BYTES,
    SCHEMA_FAMILY,
    ReportFile,
    RunReport,
    load_report,
    parse_report,
    show_value,
)
from pytest_gta.session.finish import STEP_SUMMARY_ENV, Output, find_dataset, write_outputs

#: How the reader's messages say where compared reports come from.
COMPARE_HOW = "--gta-compare reads the --gta-report files of the runs it compares"
#: The settings whose differences between runs are noted: (the field as a note names it, its
#: section: the report's top level, ``settings`` or ``generation``, its key).
#: Sampling is compared only between runs that generated (the oracle and replays have none).
NOTED_SETTINGS: tuple[tuple[str, str, str], ...] = (
    ("protocol", "", "protocol"),
    ("settings.sim_model", "settings", "sim_model"),
    ("settings.sim_threshold", "settings", "sim_threshold"),
    ("settings.max_turns", "settings", "max_turns"),
    ("settings.tools", "settings", "tools"),
    ("settings.generation.temperature", "generation", "temperature"),
    ("settings.generation.max_tokens", "generation", "max_tokens"),
    ("settings.generation.seed", "generation", "seed"),
    ("epochs", "", "epochs"),
    ("settings.ids", "settings", "ids"),
    ("settings.limit", "settings", "limit"),
)


@dataclass
class Found:
    """The reports the paths hold, in comparison order, and what was skipped on the way."""

    reports: list[ReportFile] = field(default_factory=list)
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

    @property
    def records(self) -> tuple[Any, ...]:
        """Every case's record, over all the run's shards."""
        return tuple(record for part in self.parts for record in part.records)


# --------------------------------------------------------------------------------------------
# What the reports say about their run (contract A's label and identity; older reports lack them)


def _text(value: Any) -> str | None:
    return value.strip() if isinstance(value, str) and value.strip() else None


def identity(report: Mapping[str, Any]) -> Mapping[str, Any]:
    """The report's ``identity`` object, or an empty one (older reports have none)."""
    found = report.get("identity")
    return found if isinstance(found, Mapping) else {}


def default_label(report: Mapping[str, Any]) -> str:
    """``model [protocol]``, or ``model [agent NAME]`` with an agent under test.

    What a run is called when ``--gta-label`` was not given (and what reports written before it
    existed are called).
    """
    agent = report.get("settings", {}).get("agent")
    name = _text(agent.get("name")) if isinstance(agent, Mapping) else _text(agent)
    if name is not None:
        return f"{report['model']} [agent {name}]"
    return f"{report['model']} [{report['protocol']}]"


def run_label(report: Mapping[str, Any]) -> str:
    """The run's label: the report's ``label``, its identity's, else :func:`default_label`."""
    return (
        _text(report.get("label")) or _text(identity(report).get("label")) or default_label(report)
    )


def started_at(report: Mapping[str, Any]) -> datetime | None:
    """When the run started (``identity.started_at``), as an aware time; ``None``: unknown."""
    text = _text(identity(report).get("started_at"))
    if text is None:
        return None
    try:
        # Python 3.10's fromisoformat does not read the "Z" that ISO-8601 writers use for UTC.
        when = datetime.fromisoformat(text[:-1] + "+00:00" if text.endswith("Z") else text)
    except ValueError:
        return None
    return when if when.tzinfo is not None else when.replace(tzinfo=timezone.utc)


def commit(report: Mapping[str, Any]) -> str | None:
    """The git commit of the project under test, when the run recorded one."""
    git = identity(report).get("git")
    return _text(git.get("commit")) if isinstance(git, Mapping) else None


# --------------------------------------------------------------------------------------------
# Finding the reports


def _read_candidate(path: Path, label: str, found: Found) -> None:
    """A directory's ``*.json`` file: a report is read and checked, other JSON skipped."""
    try:
        size = path.stat().st_size
        data = None if size > MAX_REPORT_BYTES else read_json(path)
    except (OSError, JsonInputError) as exc:
        text = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        found.notes.append(f"{label}: skipped, not readable as JSON ({text})")
        return
    schema = data.get("schema") if isinstance(data, dict) else None
    if data is None or not (isinstance(schema, str) and schema.startswith(SCHEMA_FAMILY)):
        what = "too large for a report" if data is None else f"schema {show_value(schema)}"
        found.notes.append(f"{label}: skipped, not a pytest-gta report ({what})")
        return
    # A report of ours: a bad field is the user's to fix, not something to skip quietly.
    found.reports.append(parse_report(label, data, COMPARE_HOW))


def _in_directory(directory: Path, given: str) -> Found:
    """A directory's reports, oldest run first (undated ones, older versions', lead)."""
    found = Found()
    try:
        names = sorted(
            p.name for p in directory.iterdir() if p.suffix == ".json" and not p.is_dir()
        )
    except OSError as exc:
        raise GtaUsageError(f"{given}: {exc.strerror or exc}; {COMPARE_HOW}") from None
    for name in names:
        _read_candidate(directory / name, os.path.join(given, name), found)
    if not found.reports:
        raise GtaUsageError(
            f"{given}: no pytest-gta reports in this directory (its *.json files are read, "
            f"not its subdirectories); {COMPARE_HOW}"
        )
    epoch = datetime.min.replace(tzinfo=timezone.utc)
    found.reports.sort(key=lambda r: (started_at(r.data) or epoch, Path(r.label).name))
    return found


def find_reports(paths: Sequence[Path], given: Sequence[str]) -> Found:
    """Every report the paths name, in comparison order (see the module docstring).

    Raises:
        GtaUsageError: a file that is not a report, a bad field, an empty directory.
    """
    found = Found()
    for path, label in zip(paths, given, strict=True):
        if path.is_dir():
            inner = _in_directory(path, label)
            found.reports.extend(inner.reports)
            found.notes.extend(inner.notes)
        else:
            found.reports.append(load_report(path, label, COMPARE_HOW))
    return found


def check_one_dataset(reports: Sequence[ReportFile]) -> None:
    """Refuse runs on different datasets: their numbers are not of the same questions.

    Raises:
        GtaUsageError: naming both files, the field and both values.
    """
    first = reports[0]
    sha = first.data["dataset"]["sha256"]
    for report in reports[1:]:
        theirs = report.data["dataset"]["sha256"]
        if theirs != sha:
            raise GtaUsageError(
                f"{report.label}: dataset.sha256 is {show_value(theirs)}, {first.label} has "
                f"{show_value(sha)}: runs on different datasets cannot be compared; compare "
                "reports of runs on one dataset (--gta-data)"
            )


# --------------------------------------------------------------------------------------------
# Runs: one per report, or one per sharded run


def _shard_key(report: ReportFile) -> str:
    """What the shards of one run share: model, protocol, dataset, settings, label, commit."""
    data = report.data
    shard = report.shard or {}
    settings = {k: v for k, v in data["settings"].items() if k not in SELECTION_SETTINGS}
    return json.dumps(
        [
            data["model"],
            data["protocol"],
            data["dataset"]["sha256"],
            settings,
            run_label(data),
            commit(data),
            shard.get("total"),
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
        shard = report.shard
        if shard is None:
            groups.append([report])
            continue
        key = _shard_key(report)
        group = open_runs.get(key)
        if group is None or any(
            (part.shard or {}).get("index") == shard["index"] for part in group
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
    if parts[0].shard is None:
        return Run(parts, parts[0].data), []
    warnings = coverage_warnings(parts, command=OPT_COMPARE)
    check_same_run(parts)
    merged = merge_reports(
        parts,
        dataset,
        warnings,
        confidence=level,
        samples=samples,
    )
    # The merge keeps the first shard's label and identity (issue 26); reports of a version
    # that does not are given them here.
    first: Mapping[str, Any] = parts[0].data
    kept = cast(dict[str, Any], merged)
    for key in ("label", "identity"):
        if key in first and key not in kept:
            kept[key] = first[key]
    return Run(parts, merged), warnings


def unique_labels(runs: Sequence[Run]) -> None:
    """Each run's label, the second and later of a name suffixed `` #2``, `` #3``, ..."""
    taken: set[str] = set()
    counts: dict[str, int] = {}
    for run in runs:
        base = run_label(run.report)
        label = base
        while label in taken:
            counts[base] = counts.get(base, 1) + 1
            label = f"{base} #{counts[base]}"
        taken.add(label)
        run.label = label


def setting_notes(runs: Sequence[Run]) -> list[str]:
    """One note per setting that differs between runs, naming the runs with each value."""
    notes = []
    for name, section, key in NOTED_SETTINGS:
        values: dict[str, list[str]] = {}
        for run in runs:
            report = run.report
            if section == "generation":
                generation = report.get("settings", {}).get("generation")
                if not isinstance(generation, Mapping) or key not in generation:
                    continue
                value = generation[key]
            elif section == "settings":
                value = report.get("settings", {}).get(key)
            else:
                value = cast(Mapping[str, Any], report).get(key)
            shown = show_value(value if value is not None else "none")
            values.setdefault(shown, []).append(run.label)
        if len(values) > 1:
            each = "; ".join(f"{value} ({', '.join(labels)})" for value, labels in values.items())
            notes.append(f"the runs differ in {name}: {each}")
    return notes


def html_beside(run: Run, page: Path | None) -> str | None:
    """The run's own HTML report, as a link from the comparison page (absolute without one).

    The path the report recorded (``settings.report_html``), else the report's file with
    ``.html`` for ``.json``; a merged run's shards have none of their own worth linking.
    """
    if len(run.parts) != 1:
        return None
    recorded = _text(run.report.get("settings", {}).get("report_html"))
    source = Path(run.parts[0].label).absolute()
    candidate = Path(recorded) if recorded else source.with_suffix(".html")
    if not candidate.is_absolute():
        candidate = source.parent / candidate
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

    comparison: dict[str, Any]
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
            settings.compare_ref,
            settings.leaderboard_rows,
            settings.confidence,
            settings.bootstrap_samples,
            settings.report_html,
        )


def comparison_of(found: Found, dataset: Dataset, settings: CompareSettings) -> dict[str, Any]:
    """The comparison of the reports found, on ``dataset`` (the one they all ran on).

    Raises:
        GtaUsageError: shards that are not of one run, an unknown reference or leaderboard
            name.
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
            records=run.records,
            html=html_beside(run, settings.page),
        )
        for run in runs
    ]
    return build_comparison(
        inputs,
        dataset,
        reference=settings.reference,
        leaderboard=settings.leaderboard,
        level=settings.level,
        samples=settings.samples,
        notes=notes,
    )


def compare(config: pytest.Config, settings: GtaSettings) -> Compared:
    """Find, check, group and compare the reports ``--gta-compare`` names.

    Raises:
        GtaUsageError: anything that cannot be compared, naming the file and the field.
    """
    given: list[str] = config.getoption("gta_compare")
    paths: list[Path] = resolve_option(config, "gta_compare").value
    found = find_reports(paths, given)
    check_one_dataset(found.reports)
    dataset = find_dataset(config, found.reports, ran="the runs", command=OPT_COMPARE)
    comparison = comparison_of(found, dataset, CompareSettings.of(settings))
    return Compared(comparison, len(found.reports), dataset.root)


def comparison_outputs(comparison: Mapping[str, Any], settings: GtaSettings) -> list[Output]:
    """``--gta-report`` (the JSON), ``--gta-report-md``, ``--gta-report-html``, the job summary."""
    outputs = []
    if settings.report is not None:
        outputs.append(
            Output(
                settings.report,
                lambda: json.dumps(comparison, indent=2, allow_nan=False) + "\n",
                option="--gta-report",
            )
        )
    if settings.report_md is not None:
        outputs.append(
            Output(
                settings.report_md, lambda: render_markdown(comparison), option="--gta-report-md"
            )
        )
    summary = os.environ.get(STEP_SUMMARY_ENV, "").strip()
    if summary:
        outputs.append(
            Output(
                Path(summary),
                lambda: render_markdown(comparison) + "\n",
                append=True,
                option=f"${STEP_SUMMARY_ENV}",
            )
        )
    return outputs


def _say(line: str) -> None:
    print(f"pytest-gta: {line}", flush=True)


def compare_command(config: pytest.Config) -> int:
    """The ``--gta-compare`` command: compare, print, write the files; 0 when compared.

    Raises:
        pytest.UsageError: reports that cannot be compared (exit status 4).
    """
    settings = resolve_settings(config)
    try:
        compared = compare(config, settings)
    except GtaUsageError as exc:
        raise pytest.UsageError(f"pytest-gta: {exc}") from None
    # Reports were cleaned when written; a hand-edited one may still hold a secret or a NaN.
    comparison: dict[str, Any] = Cleaner().value(compared.comparison)
    runs = comparison["runs"]
    _say(
        f"compared {len(runs)} runs from {compared.reports} reports on the dataset at "
        f"{compared.dataset_root}"
    )
    print(" GTA comparison ".center(80, "="), flush=True)
    for line in render_text(comparison):
        print(line, flush=True)
    status = int(pytest.ExitCode.OK)
    for output, error in write_outputs(comparison_outputs(comparison, settings)):
        if error is None:
            _say(f"written to {output.path}")
        else:
            _say(f"could not write {output.label}: {error}")
            status = int(pytest.ExitCode.TESTS_FAILED)
    return status
