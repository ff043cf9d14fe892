"""The HTML report's plots: what a reader looks for first, drawn from the report as inline SVG.

Each function reads the report dict (and the dataset, for the reference chains) and returns a
:class:`Plot`, or ``None`` when the run has nothing to show for it (no step mode, no errors).
The numbers come from the same per-case records as the tables, never from a second run of the
scorer; the drawing is :mod:`pytest_gta.report.svg`.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pytest_gta.dataset import Dataset, call_function
from pytest_gta.report import svg
from pytest_gta.report.explain import call_parts
from pytest_gta.report.table import (
    E2E_COLUMNS,
    METRIC_LABELS,
    MODE_COLUMNS,
    MODE_TITLES,
    baseline_label,
)
from pytest_gta.vocabulary import ERROR_KINDS, QUERY_TYPES

ERROR_LABELS = {"format": "format", "args": "argument format", "other": "N/A (other)"}


@dataclass(frozen=True)
class Plot:
    """One figure of the report: an anchor id, a title, the SVG and what it shows."""

    slug: str
    title: str
    svg: str
    caption: str


def _ran(report: Mapping[str, Any], mode: str) -> Iterator[Mapping[str, Any]]:
    for case in report.get("cases", []):
        if case.get("mode") == mode and case.get("outcome") != "skipped":
            yield case


def tool_accuracy(report: Mapping[str, Any], dataset: Dataset | None) -> Plot | None:
    """Per reference tool: how often the model chose it, and with the right arguments.

    Step mode scores exactly this (ToolAcc and ArgAcc per reference step), so it is drawn from
    the step cases' primitives. An end-to-end-only run has no per-step alignment; there each
    tool gets the share of queries needing it in which the model called it, and the share of
    the model's calls to it that ran without error.
    """
    if dataset is None:
        return None
    tallies: dict[str, list[int]] = {}
    step_cases = [c for c in _ran(report, "step") if isinstance(c.get("primitives"), Mapping)]
    if step_cases:
        for case in step_cases:
            query = dataset.queries.get(str(case.get("query_id")))
            if query is None:
                continue
            outcomes = case["primitives"].get("steps") or []
            for index, outcome in zip(query.assistant_indices, outcomes, strict=False):
                message = query.dialogs[index]
                if not message.get("tool_calls") or not isinstance(outcome, Mapping):
                    continue
                name = str(call_function(message).get("name"))
                slot = tallies.setdefault(name, [0, 0, 0])
                slot[0] += 1
                slot[1] += bool(outcome.get("tool_ok"))
                slot[2] += bool(outcome.get("args_ok"))
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
            query = dataset.queries.get(str(case.get("query_id")))
            if query is None:
                continue
            calls = model_calls(case.get("steps") or [])
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


def model_calls(steps: Sequence[Any]) -> list[tuple[str, bool]]:
    """The model's tool calls in recorded steps: ``(tool name, failed)`` each."""
    calls = []
    for step in steps:
        if not isinstance(step, Mapping) or not step.get("tool_calls"):
            continue
        parts = call_parts(step)
        if parts is not None:
            calls.append((parts[0], isinstance(step.get("error"), Mapping)))
    return calls


def category_f1(report: Mapping[str, Any]) -> Plot | None:
    """The P/O/L/C F1 bars of Table 4 (end to end), with their intervals."""
    metrics = report.get("metrics", {}).get("e2e")
    if not metrics:
        return None
    keys = [c.key for c in E2E_COLUMNS if c.key.endswith("_f1")]
    ci = report.get("metrics_ci", {}).get("e2e", {})
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
            [svg.Series("this run", [metrics.get(k) for k in keys], _intervals(ci, keys))],
            unit="%",
            max_value=100,
            description=caption,
        ),
        caption,
    )


def _intervals(ci: Mapping[str, Any], keys: Sequence[str]) -> list[tuple[float, float] | None]:
    out: list[tuple[float, float] | None] = []
    for key in keys:
        interval = ci.get(key)
        if isinstance(interval, Mapping) and interval.get("low") is not None:
            out.append((float(interval["low"]), float(interval["high"])))
        else:
            out.append(None)
    return out


def error_breakdown(report: Mapping[str, Any]) -> Plot | None:
    """Table 5 as stacked bars: the errored calls of each mode by type."""
    errors = report.get("errors", {})
    modes = [m for m, counts in errors.items() if sum(counts.values())]
    if not modes:
        return None
    title = "Errored tool calls by type (Table 5)"
    caption = (
        "The model's errored calls per mode: format (no or an unknown action), argument format "
        "(arguments the tool could not take) and other tool errors (the paper's N/A)."
    )
    parts = [
        svg.Series(ERROR_LABELS[kind], [float(errors[m].get(kind, 0)) for m in modes])
        for kind in ERROR_KINDS
    ]
    return Plot(
        "plot-errors",
        title,
        svg.stacked_bars(title, [MODE_TITLES.get(m, m) for m in modes], parts, description=caption),
        caption,
    )


def calls_per_tool(report: Mapping[str, Any]) -> Plot | None:
    """Figure 6 per tool: the model's successful and failed calls to each tool."""
    tallies: dict[str, list[int]] = {}
    for case in report.get("cases", []):
        if case.get("outcome") == "skipped":
            continue
        for name, failed in model_calls(case.get("steps") or []):
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


def score_distribution(report: Mapping[str, Any]) -> Plot | None:
    """Per mode and query type, the histogram of the cases' scores."""
    groups: list[tuple[str, list[float]]] = []
    for mode in MODE_COLUMNS:
        for qtype in QUERY_TYPES:
            scores = [
                float(c.get("score", 0.0)) for c in _ran(report, mode) if c.get("type") == qtype
            ]
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


def beside_references(report: Mapping[str, Any]) -> list[Plot]:
    """Per mode, this run's metrics beside the leaderboard row and the baseline."""
    plots = []
    board = report.get("leaderboard") or None
    comparison = report.get("comparison") if isinstance(report.get("comparison"), Mapping) else None
    for mode, metrics in report.get("metrics", {}).items():
        if not metrics or mode not in MODE_COLUMNS:
            continue
        keys = [c.key for c in MODE_COLUMNS[mode] if c.percent]
        ci = report.get("metrics_ci", {}).get(mode, {})
        series = [svg.Series("this run", [metrics.get(k) for k in keys], _intervals(ci, keys))]
        named = ["this run"]
        if board is not None:
            series.append(
                svg.Series(
                    f"leaderboard {board.get('board')}: {board.get('model')}",
                    [board.get(k) for k in keys],
                )
            )
            named.append("the leaderboard row")
        if comparison is not None:
            rows = comparison.get("metrics", {}).get(mode, {})
            if rows:
                series.append(
                    svg.Series(
                        f"baseline: {baseline_label(comparison)}",
                        [rows.get(k, {}).get("baseline") for k in keys],
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


def all_plots(report: Mapping[str, Any], dataset: Dataset | None) -> list[Plot]:
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
