"""The HTML report's plots: what a reader looks for first, drawn from the report as inline SVG.

Each function reads the typed report (and the dataset, for the reference chains) and returns a
:class:`Plot`, or ``None`` when the run has nothing to show for it (no step mode, no errors).
The numbers come from the same per-case records as the tables, never from a second run of the
scorer; the drawing is :mod:`pytest_gta.report.svg`.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from pytest_gta.dataset import Dataset, call_function
from pytest_gta.report import svg
from pytest_gta.report.table import (
    E2E_COLUMNS,
    METRIC_LABELS,
    MODE_COLUMNS,
    MODE_TITLES,
    baseline_label,
    interval_of,
    metric_value,
)
from pytest_gta.results.case import CaseResult
from pytest_gta.results.primitives import StepPrimitives
from pytest_gta.results.recorded import Step
from pytest_gta.results.report import E2EIntervals, RunReport, StepIntervals
from pytest_gta.vocabulary import ERROR_KINDS, QUERY_TYPES

ERROR_LABELS = {"format": "format", "args": "argument format", "other": "N/A (other)"}


@dataclass(frozen=True)
class Plot:
    """One figure of the report: an anchor id, a title, the SVG and what it shows."""

    slug: str
    title: str
    svg: str
    caption: str


def _ran(report: RunReport, mode: str) -> Iterator[CaseResult]:
    for case in report.cases:
        if case.mode == mode and case.outcome != "skipped":
            yield case


def tool_accuracy(report: RunReport, dataset: Dataset | None) -> Plot | None:
    """Per reference tool: how often the model chose it, and with the right arguments.

    Step mode scores exactly this (ToolAcc and ArgAcc per reference step), so it is drawn from
    the step cases' primitives. An end-to-end-only run has no per-step alignment; there each
    tool gets the share of queries needing it in which the model called it, and the share of
    the model's calls to it that ran without error.
    """
    if dataset is None:
        return None
    tallies: dict[str, list[int]] = {}
    step_cases = [
        (c, c.primitives) for c in _ran(report, "step") if isinstance(c.primitives, StepPrimitives)
    ]
    if step_cases:
        for case, primitives in step_cases:
            query = dataset.queries.get(case.query_id)
            if query is None:
                continue
            for index, outcome in zip(query.assistant_indices, primitives.steps, strict=False):
                message = query.dialogs[index]
                if not message.get("tool_calls"):
                    continue
                name = str(call_function(message).get("name"))
                slot = tallies.setdefault(name, [0, 0, 0])
                slot[0] += 1
                slot[1] += outcome.tool_ok
                slot[2] += outcome.args_ok
        names = sorted(tallies)
        series = [
            svg.Series("tool right", [tallies[n][1] / tallies[n][0] * 100 for n in names]),
            svg.Series(
                "tool and arguments right", [tallies[n][2] / tallies[n][0] * 100 for n in names]
            ),
        ]
        caption = (
            "Step-by-step mode: per tool of the reference chains, the share of its steps where the "
            "model called that tool, and where it also gave the right arguments (ToolAcc, ArgAcc)."
        )
    else:
        for case in _ran(report, "e2e"):
            query = dataset.queries.get(case.query_id)
            if query is None:
                continue
            calls = model_calls(case.steps)
            called = {name for name, _ in calls}
            for name in query.called_tools:
                slot = tallies.setdefault(name, [0, 0, 0, 0])
                slot[0] += 1
                slot[1] += name in called
            for name, failed in calls:
                slot = tallies.setdefault(name, [0, 0, 0, 0])
                slot[2] += 1
                slot[3] += not failed
        names = sorted(n for n, t in tallies.items() if t[0])
        series = [
            svg.Series(
                "called when the reference calls it",
                [tallies[n][1] / tallies[n][0] * 100 for n in names],
            ),
            svg.Series(
                "its calls without error",
                [tallies[n][3] / tallies[n][2] * 100 if tallies[n][2] else None for n in names],
            ),
        ]
        caption = (
            "End-to-end mode: per tool of the reference chains, the share of the queries needing "
            "it in which the model called it, and the share of the model's calls to it that ran "
            "without error."
        )
    if not tallies:
        return None
    labels = [f"{n} ({tallies[n][0]})" for n in names]
    title = "Tool-call accuracy per tool"
    return Plot(
        "plot-tools",
        title,
        svg.grouped_bars(title, labels, series, unit="%", max_value=100, description=caption),
        caption,
    )


def model_calls(steps: Sequence[Step]) -> list[tuple[str, bool]]:
    """The model's tool calls in recorded steps: ``(tool name, failed)`` each."""
    calls = []
    for step in steps:
        call = step.call if step.is_call else None
        if call is not None:
            calls.append((call.name, step.error is not None))
    return calls


def category_f1(report: RunReport) -> Plot | None:
    """The P/O/L/C F1 bars of Table 4 (end to end), with their intervals."""
    metrics = report.metrics.e2e
    if metrics is None:
        return None
    keys = [c.key for c in E2E_COLUMNS if c.key.endswith("_f1")]
    values = [metric_value(metrics, k) for k in keys]
    title = "Tool selection F1 per category (end-to-end)"
    caption = (
        "Per tool category, the F1 of the model's calls against the reference chains' (the "
        "paper's P/O/L/C F1), with the run's bootstrap interval."
    )
    return Plot(
        "plot-f1",
        title,
        svg.grouped_bars(
            title,
            [METRIC_LABELS[k] for k in keys],
            [svg.Series("this run", values, _intervals(report.metrics_ci.e2e, keys))],
            unit="%",
            max_value=100,
            description=caption,
        ),
        caption,
    )


def _intervals(
    ci: StepIntervals | E2EIntervals | None, keys: Sequence[str]
) -> list[tuple[float, float] | None]:
    out: list[tuple[float, float] | None] = []
    for key in keys:
        interval = interval_of(ci, key)
        if interval is not None and interval.low is not None and interval.high is not None:
            out.append((float(interval.low), float(interval.high)))
        else:
            out.append(None)
    return out


def error_breakdown(report: RunReport) -> Plot | None:
    """Table 5 as stacked bars: the errored calls of each mode by type."""
    errors = {m: counts for m, counts in report.errors.items() if counts.total()}
    modes = list(errors)
    if not modes:
        return None
    title = "Errored tool calls by type (Table 5)"
    caption = (
        "The model's errored calls per mode: format (no or an unknown action), argument format "
        "(arguments the tool could not take) and other tool errors (the paper's N/A)."
    )
    parts = [
        svg.Series(ERROR_LABELS[kind], [float(errors[m].get(kind)) for m in modes])
        for kind in ERROR_KINDS
    ]
    return Plot(
        "plot-errors",
        title,
        svg.stacked_bars(title, [MODE_TITLES.get(m, m) for m in modes], parts, description=caption),
        caption,
    )


def calls_per_tool(report: RunReport) -> Plot | None:
    """Figure 6 per tool: the model's successful and failed calls to each tool."""
    tallies: dict[str, list[int]] = {}
    for case in report.cases:
        if case.outcome == "skipped":
            continue
        for name, failed in model_calls(case.steps):
            slot = tallies.setdefault(name, [0, 0])
            slot[1 if failed else 0] += 1
    if not tallies:
        return None
    names = sorted(tallies, key=lambda n: (-sum(tallies[n]), n))
    title = "Tool calls per tool: successful and failed (Figure 6)"
    caption = "Every tool call the model made, both modes, by the tool it named."
    parts = [
        svg.Series("successful", [float(tallies[n][0]) for n in names]),
        svg.Series("failed", [float(tallies[n][1]) for n in names]),
    ]
    return Plot(
        "plot-calls",
        title,
        svg.stacked_bars(title, names, parts, description=caption),
        caption,
    )


def score_distribution(report: RunReport) -> Plot | None:
    """Per mode and query type, the histogram of the cases' scores."""
    groups: list[tuple[str, list[float]]] = []
    for mode in MODE_COLUMNS:
        for qtype in QUERY_TYPES:
            scores = [c.score for c in _ran(report, mode) if c.type == qtype]
            if scores:
                groups.append((f"{mode} / {qtype}", scores))
    if not groups:
        return None
    title = "Case scores by query type"
    caption = (
        "How the cases' scores (0 to 1) spread per mode and query type: objective answers "
        "score 0 or 1, subjective ones by similarity, image queries by the Ans+I factor."
    )
    return Plot(
        "plot-scores",
        title,
        svg.histograms(title, groups, description=caption),
        caption,
    )


def beside_references(report: RunReport) -> list[Plot]:
    """Per mode, this run's metrics beside the leaderboard row and the baseline."""
    plots = []
    board = report.leaderboard
    comparison = report.comparison
    for mode, metrics in report.metrics.items():
        keys = [c.key for c in MODE_COLUMNS[mode] if c.percent]
        ci = report.metrics_ci.get(mode)
        series = [
            svg.Series("this run", [metric_value(metrics, k) for k in keys], _intervals(ci, keys))
        ]
        named = ["this run"]
        if board is not None:
            series.append(
                svg.Series(
                    f"leaderboard {board.board}: {board.model}", [board.get(k) for k in keys]
                )
            )
            named.append("the leaderboard row")
        rows = comparison.metrics.get(mode) if comparison is not None else None
        if comparison is not None and rows:
            series.append(
                svg.Series(
                    f"baseline: {baseline_label(comparison)}",
                    [rows[k].baseline if k in rows else None for k in keys],
                )
            )
            named.append("the baseline")
        title = f"Table 4, {MODE_TITLES[mode]}: " + ", ".join(named)
        caption = (
            "The paper's metrics of this run (with its bootstrap interval)"
            + (" beside " + " and ".join(named[1:]) if len(named) > 1 else "")
            + "; percent."
        )
        plots.append(
            Plot(
                f"plot-metrics-{mode}",
                title,
                svg.grouped_bars(
                    title,
                    [METRIC_LABELS[k] for k in keys],
                    series,
                    unit="%",
                    max_value=100,
                    description=caption,
                ),
                caption,
            )
        )
    return plots


def all_plots(report: RunReport, dataset: Dataset | None) -> list[Plot]:
    """Every plot the run has data for, in the order the page shows them."""
    candidates = [
        *beside_references(report),
        tool_accuracy(report, dataset),
        category_f1(report),
        calls_per_tool(report),
        error_breakdown(report),
        score_distribution(report),
    ]
    return [p for p in candidates if p is not None]
