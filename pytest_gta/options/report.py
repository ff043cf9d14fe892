"""The run's outputs: the JSON report, markdown, HTML, Inspect AI logs, and the run's label.

Its part of the settings is :class:`ReportSettings`; ``--gta-merge`` and ``--gta-compare`` write
their outputs to the same paths.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path

import pytest

from pytest_gta.flags import (
    OPT_COMPARE,
    OPT_INSPECT_LOG,
    OPT_LABEL,
    OPT_REPORT,
    OPT_REPORT_HTML,
    OPT_REPORT_HTML_MAX_MB,
    OPT_REPORT_MD,
)
from pytest_gta.options.core import Feature, Given, OptionSpec, fields, number, shown, usage_error
from pytest_gta.provenance import label_problem

#: What brings ``inspect_ai`` for ``--gta-inspect-log`` (pytest_gta.report.inspect_log).
INSPECT_EXTRA = 'pip install "pytest-gta[inspect]"'
#: Default size limit of the HTML report (its images are left out beyond it, with a note).
DEFAULT_REPORT_HTML_MAX_MB = 10.0
RANGES: dict[str, tuple[float, float]] = {OPT_REPORT_HTML_MAX_MB: (1.0, 100_000.0)}


def parse_report_html_max_mb(value: str) -> float:
    """The HTML report's size limit in MB: at least 1 (the page itself needs some room)."""
    low, high = RANGES[OPT_REPORT_HTML_MAX_MB]
    hint = f"give a size in MB, at least 1 (default: {DEFAULT_REPORT_HTML_MAX_MB:g})"
    return number(value, OPT_REPORT_HTML_MAX_MB, hint, minimum=low, maximum=high)


def parse_label(value: str) -> str:
    """A run's name in reports and comparisons: one visible line (surrounding spaces dropped)."""
    problem = label_problem(value)
    if problem is not None:
        raise pytest.UsageError(
            f"{OPT_LABEL}={shown(value)!r}: {problem} (a label names the run on one visible line)"
        )
    return value.strip()


def check_inspect_log(inspect_log: Path | None) -> None:
    """``--gta-inspect-log`` needs ``inspect_ai``: say so now, not after the run.

    Asked without importing it (a heavy package the plugin never loads unless it writes a log).

    Raises:
        pytest.UsageError: it is not installed, with the install that brings it.
    """
    if inspect_log is not None and importlib.util.find_spec("inspect_ai") is None:
        raise usage_error(
            f"{OPT_INSPECT_LOG} writes Inspect AI logs through the inspect_ai package, which is "
            f"not installed; {INSPECT_EXTRA}"
        )


@dataclass(frozen=True)
class ReportSettings:
    """Where the run's outputs go, and the run's name in them."""

    #: ``--gta-report``: the JSON report.
    json: Path | None = None
    #: ``--gta-report-md``: the tables as markdown.
    md: Path | None = None
    #: ``--gta-report-html`` and its size limit in MB.
    html: Path | None = None
    html_max_mb: float = DEFAULT_REPORT_HTML_MAX_MB
    #: ``--gta-inspect-log``: the directory of the run's Inspect AI logs.
    inspect_log: Path | None = None
    #: ``--gta-label``: the run's name in its report (``None``: the default label).
    label: str | None = None


ROWS: tuple[OptionSpec, ...] = (
    OptionSpec(
        OPT_REPORT,
        "PATH",
        "write the JSON report here",
        kind="path",
        setting="json",
        doc_default="none",
        doc="write the JSON report",
    ),
    OptionSpec(
        OPT_REPORT_MD,
        "PATH",
        "write the metric tables as markdown here",
        kind="path",
        setting="md",
        doc_default="none",
        doc="write the tables as markdown (for CI job summaries)",
    ),
    OptionSpec(
        OPT_REPORT_HTML,
        "PATH",
        "write a self-contained HTML report here (tables, plots, every case's transcript and "
        "images; opens offline)",
        kind="path",
        setting="html",
        doc_default="none",
        doc="write one self-contained HTML file: tables, plots, every case with its transcript "
        "and images ([Reports](reports.md#the-html-report))",
    ),
    OptionSpec(
        OPT_REPORT_HTML_MAX_MB,
        "MB",
        f"size limit of the HTML report; full-size images beyond it are left out, with a note "
        f"(default: {DEFAULT_REPORT_HTML_MAX_MB:g})",
        parse=parse_report_html_max_mb,
        default=DEFAULT_REPORT_HTML_MAX_MB,
        setting="html_max_mb",
        doc_default="10",
        doc="size limit of the HTML report; full-size images beyond it are left out (thumbnails "
        "stay), with a note",
        doc_range="{low} to {high}",
    ),
    OptionSpec(
        OPT_INSPECT_LOG,
        "DIR",
        "write the run as Inspect AI eval logs into this directory, one per mode, for "
        f"'inspect view' (needs {INSPECT_EXTRA})",
        kind="path",
        setting="inspect_log",
        doc_default="none",
        doc="write the run as Inspect AI eval logs into DIR, one `.eval` file per mode, for "
        f"`inspect view` (needs `{INSPECT_EXTRA}`; [Reports](reports.md#inspect-ai-logs))",
    ),
    OptionSpec(
        OPT_LABEL,
        "TEXT",
        f"name this run in its report and in {OPT_COMPARE} tables (default: 'MODEL [PROTOCOL]', "
        "or 'MODEL [agent AGENT]')",
        parse=parse_label,
        setting="label",
        doc_default="`MODEL [PROTOCOL]`, or `MODEL [agent AGENT]` with an agent under test",
        doc="the run's name in its report (`label`, `identity`), the terminal summary, the HTML "
        f"report, JUnit (`gta_label`) and `{OPT_COMPARE}` tables: "
        f'`{OPT_LABEL}="ckpt-1200 nightly"`; one visible line (no control characters)',
    ),
)
FEATURE = Feature("report", ROWS, RANGES)


def settings(given: Given) -> ReportSettings:
    """The outputs' part of the settings, from the rows' resolved values."""
    return ReportSettings(**fields(ROWS, given))
