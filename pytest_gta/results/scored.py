"""What a benchmark of scored cases produces: any task family written against the public seam.

GTA-Atomic and GTA-Workflow have report shapes of their own (the paper's tables, the judge's
checkpoint tree). A third party's benchmark whose cases each end with scores
(:class:`pytest_gta.benchmarks.scored.ScoredBenchmark`) gets this shape, and with it every
output and command: one :class:`ScoredCase` per case, one :class:`ScoredReport` per run whose
``benchmark`` field is the benchmark's name, read by the reports' one reader
(:func:`pytest_gta.results.io.parse_any_report`), merged, compared and used as a baseline.
"""

from __future__ import annotations

import json
from typing import Literal

from pydantic import Field, JsonValue

from pytest_gta.results.base import Doc, Extensible, Scalar, omitted, validated
from pytest_gta.results.report import GatesVerdict, Identity
from pytest_gta.results.workflow import WorkflowMetricDiff

KIND: Literal["gta-scored-report"] = "gta-scored-report"
RUNS_KIND: Literal["gta-scored-comparison"] = "gta-scored-comparison"
SCHEMA_VERSION = 1
#: The metric every scored run has: the share of counted cases that passed (percent).
PASS_RATE = "pass_rate"
ScoredOutcome = Literal["passed", "failed", "error", "skipped"]


class ScoredCase(Doc):
    """One case: its scores (0-1 each), whether it passed, and what the benchmark kept."""

    id: str
    """The case's id (the end of its node id)."""
    nodeid: str
    epoch: int | None = Field(default=None, ge=0, lt=2**31)
    outcome: ScoredOutcome
    message: str
    passed: bool
    scores: dict[str, float | None]
    """Each named score, 0-1 (``None``: not measured; an errored case has none and counts 0)."""
    detail: JsonValue = None
    """Whatever the benchmark keeps of the case (shown in the drill-down as JSON)."""
    duration: float | None = Field(default=None, ge=0)
    properties: dict[str, Scalar] = Field(default_factory=dict)


class ScoredComparison(Doc):
    """This run against ``--gta-baseline`` (a report of the same benchmark), paired by case."""

    baseline: str
    baseline_label: str
    level: float
    matched: int = Field(ge=0)
    only_this_run: int = Field(ge=0)
    only_baseline: int = Field(ge=0)
    metrics: dict[str, WorkflowMetricDiff]
    """Each metric's paired difference (the same shape as a GTA-Workflow comparison's)."""
    regressed: list[str]
    """Cases that passed in the baseline and fail now."""
    fixed: list[str]


class ScoredReport(Extensible):
    """A run of a scored benchmark: its metrics and every case."""

    kind: Literal["gta-scored-report"] = KIND
    schema_version: int = SCHEMA_VERSION
    benchmark: str
    """The benchmark's name (its ``pytest_gta.benchmarks`` entry point)."""
    model: str
    label: str
    identity: Identity | None = omitted()
    """What tells this run from others (label, commit, dates), as an atomic report's."""
    dataset: str
    """What the cases came from (``--gta-data``, or what the benchmark names)."""
    metrics: dict[str, float | None]
    """Each score's mean over the counted cases in percent (an errored case counts 0, a
    skipped one not at all), and ``pass_rate``."""
    counted: int = Field(ge=0)
    errors: int = Field(ge=0)
    notes: list[str] = Field(default_factory=list)
    comparison: ScoredComparison | None = omitted()
    gates: GatesVerdict | None = omitted()
    merged_from: list[str] | None = omitted()
    """The shard reports ``--gta-merge`` merged (absent for a session's run)."""
    cases: list[ScoredCase]


class ScoredRun(Doc):
    """One run of ``--gta-compare`` on scored reports."""

    label: str
    source: str
    model: str
    metrics: dict[str, float | None]


class ScoredRuns(Doc):
    """``--gta-compare`` of scored reports: their metrics side by side."""

    kind: Literal["gta-scored-comparison"] = RUNS_KIND
    schema_version: int = SCHEMA_VERSION
    benchmark: str
    runs: list[ScoredRun]
    notes: list[str]


def dump_scored(report: ScoredReport | ScoredRuns) -> str:
    """The report's (or comparison's) JSON text (strict JSON: no NaN)."""
    return json.dumps(report.to_json_value(), indent=2, ensure_ascii=False, allow_nan=False)


def parse_scored(label: str, data: object) -> ScoredReport:
    """A loaded scored report, checked (:func:`pytest_gta.results.io.parse_any_report`).

    Raises:
        GtaUsageError: naming ``label`` and the first field that is wrong.
    """
    return validated(ScoredReport, data, label, "scored report")
