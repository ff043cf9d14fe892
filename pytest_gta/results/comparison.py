"""Several runs side by side (``pytest-gta-comparison/1``): what ``--gta-compare`` writes, typed.

:class:`Comparison` is what :func:`pytest_gta.report.runs.build_comparison` builds from the runs'
reports, what the renderers (terminal, markdown, the HTML page) show, and what the
``--gta-report`` file of a comparison holds (read back by
:func:`pytest_gta.results.io.parse_comparison`). Its JSON is these classes' fields in this order;
docs/compare.md documents it field by field and docs/schema/comparison.schema.json is generated
from these classes.

A run's numbers are copied from its report, so the classes that hold them are the report's own
(:class:`~pytest_gta.results.report.StepMetrics`, :class:`~pytest_gta.results.report.Interval`,
...), and each run's paired test against the reference is a report's
:class:`~pytest_gta.results.report.BaselineComparison`, computed by the same function. What is
new here is only what needs several runs at once: the tables with a row per run, the published
rows, reliability over epochs, cost and the fronts, and the per-query matrix.

The table columns live here too (:data:`TABLE4_COLUMNS`, :data:`TABLE5_COLUMNS`): the builder
and the renderers both need them, and renderers import nothing that scores.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, model_validator

from pytest_gta.results.base import Doc, PerMode, omitted
from pytest_gta.results.primitives import ErrorCounts
from pytest_gta.results.report import (
    BaselineComparison,
    CallCounts,
    E2EDenominators,
    E2EIntervals,
    E2EMetrics,
    Identity,
    Interval,
    NoMetrics,
    OutcomeCounts,
    RunSettings,
    StepDenominators,
    StepIntervals,
    StepMetrics,
    UtcDate,
)
from pytest_gta.results.robustness import RobustnessSection
from pytest_gta.vocabulary import ERROR_KINDS, Mode, Outcome

__all__ = [
    "COMPARISON_FAMILY",
    "COMPARISON_SCHEMA",
    "FRONT_KEYS",
    "MIXED",
    "TABLE4_COLUMNS",
    "TABLE5_COLUMNS",
    "ComparedDataset",
    "ComparedRun",
    "Comparison",
    "Front",
    "FrontKey",
    "FrontPoint",
    "Fronts",
    "Matrix",
    "MatrixCell",
    "MatrixGroup",
    "MatrixQuery",
    "Paired",
    "PublishedRow",
    "Reliability",
    "RunCost",
    "Table4",
    "Table4Row",
    "Table5",
    "Table5Row",
    "Tables",
    "Versus",
    "interval_value",
    "metric_value",
]

#: The version this code writes and reads; another is refused, a newer one named as such.
COMPARISON_SCHEMA = "pytest-gta-comparison/1"
#: What every comparison's schema starts with (a file without it is not a comparison of ours).
COMPARISON_FAMILY = "pytest-gta-comparison/"
#: Table 4's columns per mode: the paper's percentages, every one higher-is-better (the call
#: counts of a single run's table are not the paper's and would not rank runs). The order is the
#: run report's Table 4 (``report.table.MODE_COLUMNS``, whose percentages they are).
TABLE4_COLUMNS: dict[Mode, tuple[str, ...]] = {
    "step": ("inst_acc", "tool_acc", "arg_acc", "summ_acc"),
    "e2e": ("p_f1", "o_f1", "l_f1", "c_f1", "ans_acc", "ans_acc_img"),
}
#: Table 5's columns: the errored calls, then each error kind's share of them in percent.
TABLE5_COLUMNS: tuple[str, ...] = ("errored_calls", *ERROR_KINDS)
#: A front's x axis: the run's cost field it plots against AnsAcc.
FrontKey = Literal["cost_per_case", "wall_per_case_s"]
#: Each front's x axis, by front.
FRONT_KEYS: dict[str, FrontKey] = {
    "cost": "cost_per_case",
    "time": "wall_per_case_s",
}
#: How a matrix cell says that a query's epochs ended differently.
MIXED: Literal["mixed"] = "mixed"
#: A run's pass rate of a query against the reference's.
Versus = Literal["same", "regressed", "fixed"]


def metric_value(metrics: StepMetrics | E2EMetrics | None, name: str) -> float | None:
    """A metric of a run's ``metrics`` by its key, as a float (``None``: undefined, or none)."""
    value = getattr(metrics, name, None) if name in _METRIC_NAMES else None
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def interval_value(intervals: StepIntervals | E2EIntervals | None, name: str) -> Interval | None:
    """A metric's interval of a run's ``metrics_ci`` by its key (``None``: none)."""
    value = getattr(intervals, name, None) if name in _INTERVAL_NAMES else None
    return value if isinstance(value, Interval) else None


_METRIC_NAMES = frozenset({*StepMetrics.model_fields, *E2EMetrics.model_fields})
_INTERVAL_NAMES = frozenset({*StepIntervals.model_fields, *E2EIntervals.model_fields})


def _as_pair(value: Any) -> Any:
    """JSON has no tuples: a ``[low, high]`` array is read as the pair it stands for."""
    return tuple(value) if isinstance(value, list) else value


#: An interval as the tables show it: ``[low, high]``.
Pair = Annotated[tuple[float, float], BeforeValidator(_as_pair)]


# --------------------------------------------------------------------------------------------
# One run


class ComparedDataset(Doc):
    """The dataset every run scored."""

    sha256: str
    """sha256 of its ``dataset.json``."""
    path: str
    """Where this machine has it."""
    queries: int = Field(ge=0)
    """How many queries it holds."""


class RunCost(Doc):
    """A run's tokens, cost and times, in total and per case that ran (skipped ones are not)."""

    cases: int = Field(ge=0)
    """The cases that ran (not skipped): what the per-case values divide by."""
    input_tokens: int = Field(ge=0)
    """The report's ``usage.input_tokens``."""
    output_tokens: int = Field(ge=0)
    """The report's ``usage.output_tokens``."""
    tokens_per_case: float
    """(input + output tokens) / ``cases``."""
    cost_usd: float | None
    """The report's ``usage.cost_usd`` (``null``: no price known)."""
    cost_per_case: float | None
    """``cost_usd`` / ``cases``."""
    wall_s: float | None
    """The report's ``duration_s``, the session's wall time (``null`` for a merged report)."""
    wall_per_case_s: float | None
    """``wall_s`` / ``cases``; for a merged report the mean of the cases' own ``duration``."""
    model_s: float | None
    """Seconds the cases waited on the model: the report's ``usage.model_s``, else the sum of
    the cases' ``model_s`` (``null``: none known)."""
    model_per_case_s: float | None
    """``model_s`` / ``cases``."""

    def x(self, key: FrontKey) -> float | None:
        """The value a front plots on its x axis (:data:`FRONT_KEYS`)."""
        return self.cost_per_case if key == "cost_per_case" else self.wall_per_case_s


class Reliability(Doc):
    """A run's reliability in one mode over its epochs (percent)."""

    epochs: int = Field(ge=0)
    """The run's epochs (a query with fewer counts with its own)."""
    k: list[int]
    """1 up to ``epochs``."""
    pass_hat_k: dict[str, float | None]
    """k -> tau-bench's pass^k: mean over queries of C(c, k) / C(n, k) (``null``: no query has
    k epochs)."""
    pass_at_k: dict[str, float | None]
    """k -> the unbiased pass@k: mean over queries of 1 - C(n - c, k) / C(n, k)."""
    flaky: list[str]
    """The queries passed in some epochs and failed in others, in dataset order."""


class ComparedRun(Doc):
    """One run of the comparison: its report's own numbers, its cost, its reliability."""

    label: str
    """The run's name in every table (its report's ``label``; a repeat gets `` #2``)."""
    model: str
    protocol: str | None
    """``null`` with an agent under test."""
    agent: str | None
    """The agent under test (``null``: the project's own loop)."""
    identity: Identity
    """The report's ``identity`` (its top-level ``label`` where a hook renamed the run)."""
    sources: list[str]
    """The report file(s) the run was read from (a sharded run's, merged)."""
    html: str | None
    """The run's own HTML report, for links (``null``: none beside its report)."""
    modes: list[Mode]
    """The modes the run has metrics for."""
    epochs: int
    """The report's ``epochs``."""
    cases: int
    """The report's case count (skipped cases included)."""
    settings: RunSettings
    """The report's ``settings``."""
    metrics: PerMode[StepMetrics, E2EMetrics]
    """The report's own, unchanged (as are the five below)."""
    metrics_ci: PerMode[StepIntervals, E2EIntervals]
    pass_rate: PerMode[float, float]
    errors: PerMode[ErrorCounts, ErrorCounts]
    tool_calls: PerMode[CallCounts, CallCounts]
    outcomes: OutcomeCounts
    cost: RunCost
    reliability: PerMode[Reliability, Reliability]
    """Per mode, pass^k and pass@k for k = 1 up to the run's epochs."""
    metrics_sound: PerMode[StepMetrics | NoMetrics, E2EMetrics | NoMetrics] | None = omitted()
    """The report's ``metrics_sound`` (Table 4 over the queries the erratum does not name;
    computed from its cases for a report written before it had them)."""
    denominators: PerMode[StepDenominators, E2EDenominators] | None = omitted()
    """The report's ``denominators``: what ``metrics`` is over."""
    denominators_sound: PerMode[StepDenominators, E2EDenominators] | None = omitted()
    """What ``metrics_sound`` is over."""
    robustness: RobustnessSection | None = omitted()
    """The report's ``robustness`` (absent: the run injected no tool faults)."""

    def sound_counts(self, mode: str) -> tuple[int, int] | None:
        """(sound queries, queries) of ``mode``, where the erratum left some out."""
        sound = self.denominators_sound.get(mode) if self.denominators_sound else None
        every = self.denominators.get(mode) if self.denominators else None
        if sound is None or every is None or sound.queries == every.queries:
            return None
        return sound.queries, every.queries


# --------------------------------------------------------------------------------------------
# The tables and the published rows


class Table4Row(Doc):
    """A row of Table 4: a run's metrics, or a published leaderboard row's."""

    label: str
    """The run's label, or ``MODEL@BOARD`` for a published row."""
    kind: Literal["run", "leaderboard"]
    board: str | None
    """The published row's board (``2026-02``); ``null`` for a run."""
    model: str
    values: dict[str, float | None]
    """Column -> the run's ``metrics`` value, or the published number (``null``: undefined)."""
    ci: dict[str, Pair]
    """Column -> ``[low, high]`` of the run's ``metrics_ci`` (``{}`` for a published row)."""


class Table4(Doc):
    """Table 4 of one mode: a row per run that has the mode, then the published rows."""

    columns: list[str]
    """The paper's metric keys (:data:`TABLE4_COLUMNS`)."""
    rows: list[Table4Row]
    best: dict[str, list[str]]
    """Column -> the labels of the rows whose value, at two decimals, is the highest."""


class Table5Row(Doc):
    """A row of Table 5: a run's errored calls in one mode, by kind."""

    label: str
    mode: Mode
    errored_calls: int = Field(ge=0)
    """The sum of the report's ``errors[mode]``."""
    format: float | None
    """Percent of the errored calls (``null``: none errored)."""
    args: float | None
    other: float | None

    def share(self, kind: str) -> float | None:
        """An error kind's share by name (``None``: no call errored, or not a kind)."""
        if kind == "format":
            return self.format
        if kind == "args":
            return self.args
        if kind == "other":
            return self.other
        return None


class Table5(Doc):
    """Table 5: the error kinds' shares of each run's errored calls."""

    columns: list[str]
    """:data:`TABLE5_COLUMNS`."""
    rows: list[Table5Row]


class Tables(Doc):
    """The paper's tables with a row per run."""

    table4: PerMode[Table4, Table4]
    """Per mode that some run has."""
    table5: Table5
    table4_sound: PerMode[Table4, Table4] | None = omitted()
    """Table 4 again over each run's queries with a sound reference (its ``metrics_sound``):
    a row per run, no published row (those are over all 229 queries)."""


class PublishedRow(Doc):
    """A row of the official leaderboard (``pytest_gta/leaderboard.csv``) chosen to compare."""

    model: str
    board: str
    values: dict[str, float]
    """Metric -> the published number (percent); a metric the row lacks is absent."""


# --------------------------------------------------------------------------------------------
# Paired tests, the per-query matrix and the fronts


class Paired(Doc):
    """Each run against the reference, as ``--gta-baseline`` compares a run with a report."""

    reference: str
    runs: dict[str, BaselineComparison]
    """Label -> the comparison of that run with the reference (every run but the reference)."""


class MatrixCell(Doc):
    """One run's result on one query of one mode."""

    outcome: Outcome | Literal["mixed"] | None
    """The outcome (``mixed``: its epochs ended differently; ``null``: the run lacks the query)."""
    passed: int = Field(ge=0)
    """Epochs passed."""
    epochs: int = Field(ge=0)
    """Epochs recorded."""

    @property
    def rate(self) -> float:
        """The share of its epochs that passed (0 for a query the run lacks)."""
        return self.passed / self.epochs if self.epochs else 0.0


class MatrixQuery(Doc):
    """A query of one mode across the runs."""

    mode: Mode
    query_id: str
    type: str
    """``objective``, ``subjective`` or ``image``."""
    categories: list[str]
    """The tool categories of the reference chain's calls (the official ``gettype``)."""
    cells: dict[str, MatrixCell]
    """Label -> the run's result, for every run."""
    flip: bool
    """The runs that have the query do not all pass it at the same rate."""
    versus_reference: dict[str, Versus]
    """Label -> against the reference, for the other runs that share the query with it."""


class MatrixGroup(Doc):
    """A query type's or tool category's queries of one mode, and each run's passed cases."""

    mode: Mode
    by: Literal["type", "category"]
    name: str
    queries: int = Field(ge=0)
    """The matrix's queries in the group (a query counts in each of its categories)."""
    passed: dict[str, int]
    """Label -> cases passed (epochs counted)."""
    cases: dict[str, int]
    """Label -> cases (epochs counted)."""


class Matrix(Doc):
    """Which run passes which query: per mode then in dataset order, every query a run has."""

    runs: list[str]
    """The labels, as the matrix's columns."""
    queries: list[MatrixQuery]
    groups: list[MatrixGroup]


class FrontPoint(Doc):
    """A run on a front's plot."""

    label: str
    x: float
    """The run's ``cost`` value the front weighs (per case)."""
    ans_acc: float
    """The run's end-to-end AnsAcc."""


class Front(Doc):
    """A Pareto front of lowest x and highest AnsAcc over the runs."""

    x: FrontKey
    points: list[FrontPoint]
    front: list[str]
    """The labels of the runs no other run beats on both (equal points all on it)."""
    left_out: dict[str, str]
    """Label -> why the run has no point (no end-to-end mode, no AnsAcc, no x value)."""


class Fronts(Doc):
    """The best AnsAcc for the money and for the time."""

    cost: Front
    time: Front

    def items(self) -> list[tuple[str, Front]]:
        """``(name, front)`` in the order the tables list them."""
        return [("cost", self.cost), ("time", self.time)]


# --------------------------------------------------------------------------------------------
# The comparison


class Comparison(Doc):
    """Several runs side by side (see the module docstring)."""

    schema_: str = Field(alias="schema")
    """``pytest-gta-comparison/1``."""
    pytest_gta: str
    """The version that wrote the comparison."""
    created_at: UtcDate
    """When, ISO 8601 in UTC."""
    dataset: ComparedDataset
    level: float = Field(gt=0, lt=1)
    """The confidence level of the paired tests' intervals."""
    samples: int = Field(ge=1)
    """The paired tests' bootstrap and permutation resamples."""
    reference: str
    """The label of the run the paired tests and ``versus_reference`` compare with."""
    notes: list[str]
    """What makes rows less than strictly comparable."""
    runs: list[ComparedRun]
    """In the order given (a directory's reports by date)."""
    tables: Tables
    leaderboard: list[PublishedRow]
    """The published rows chosen, in the order named."""
    paired: Paired
    matrix: Matrix
    front: Fronts

    @model_validator(mode="after")
    def _labels(self) -> Comparison:
        labels = [run.label for run in self.runs]
        if len(set(labels)) != len(labels):
            raise ValueError("a label names several runs")
        if labels and self.reference not in labels:
            raise ValueError(f"the reference {self.reference!r} is not a run's label")
        return self

    def run(self, label: str) -> ComparedRun | None:
        """The run ``label`` names (``None``: no such run)."""
        return next((run for run in self.runs if run.label == label), None)
