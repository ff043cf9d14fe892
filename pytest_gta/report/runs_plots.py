"""The plots of a comparison of runs (``pytest-gta-comparison/1``), as inline SVG.

Each function reads the comparison dict that :mod:`pytest_gta.report.runs` builds and returns
:class:`~pytest_gta.report.plots.Plot` objects, or none when the comparison has nothing to show
for them (no run with several epochs, no run with a cost). The dict may come from a file, so it
is read defensively: a missing or mistyped key leaves its plot out or shows ``n/a``, never an
exception. The small readers here (:func:`as_map`, :func:`as_list`, :func:`as_number`) are the
page's too.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from pytest_gta.report import svg
from pytest_gta.report.plots import Plot
from pytest_gta.report.table import METRIC_LABELS, MODE_TITLES

#: What the front's x axes are, as the comparison names them.
FRONT_AXES = {
    "cost": ("cost per case", " USD", "Cost per case against AnsAcc"),
    "time": ("wall time per case", " s", "Wall time per case against AnsAcc"),
}


def as_map(value: Any) -> Mapping[str, Any]:
    """``value`` if it is a mapping, else an empty one."""
    return value if isinstance(value, Mapping) else {}


def as_list(value: Any) -> list[Any]:
    """``value`` as a list if it is a list or tuple, else an empty list."""
    return list(value) if isinstance(value, (list, tuple)) else []


def as_number(value: Any) -> float | None:
    """A finite number as a float; ``None`` for booleans, NaN, infinities and non-numbers."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    number = float(value)
    return number if math.isfinite(number) else None


def as_pair(value: Any) -> tuple[float, float] | None:
    """An interval as ``[low, high]`` or ``{"low", "high"}``; ``None`` when not two numbers."""
    if isinstance(value, Mapping):
        value = (value.get("low"), value.get("high"))
    if not isinstance(value, (list, tuple)) or len(value) != 2:
        return None
    low, high = as_number(value[0]), as_number(value[1])
    return None if low is None or high is None else (low, high)


def mode_title(mode: str) -> str:
    """``step-by-step mode`` for ``step``; an unknown mode as itself."""
    return MODE_TITLES.get(mode, f"{mode} mode")


def metric_plots(comparison: Mapping[str, Any]) -> list[Plot]:
    """Per mode and Table-4 metric, every run's value and interval; published rows as marks."""
    plots = []
    table4 = as_map(as_map(comparison.get("tables")).get("table4"))
    for mode, table in table4.items():
        table = as_map(table)
        rows = [as_map(r) for r in as_list(table.get("rows"))]
        best = as_map(table.get("best"))
        for metric in as_list(table.get("columns")):
            metric = str(metric)
            winners = {str(label) for label in as_list(best.get(metric))}
            estimates = [
                svg.Estimate(
                    str(row.get("label")),
                    as_number(as_map(row.get("values")).get(metric)),
                    as_pair(as_map(row.get("ci")).get(metric)),
                    published=row.get("kind") == "leaderboard",
                    strong=str(row.get("label")) in winners,
                )
                for row in rows
            ]
            name = METRIC_LABELS.get(metric, metric)
            title = f"{name}, {mode_title(str(mode))}"
            caption = (
                f"{name} of each run with its interval (dots and whiskers), published "
                "leaderboard numbers as hollow diamonds, the best in bold; percent."
            )
            plots.append(
                Plot(
                    f"plot-{mode}-{metric}",
                    title,
                    svg.interval_dots(title, estimates, description=caption),
                    caption,
                )
            )
    return plots


def reliability_plots(comparison: Mapping[str, Any]) -> list[Plot]:
    """Per mode, pass^k and pass@k over k of every run that has several epochs."""
    runs = [as_map(r) for r in as_list(comparison.get("runs"))]
    by_mode: dict[str, list[tuple[int, str, Mapping[str, Any]]]] = {}
    for index, run in enumerate(runs):
        for mode, rel in as_map(run.get("reliability")).items():
            epochs = as_number(as_map(rel).get("epochs"))
            if epochs is not None and epochs > 1:
                by_mode.setdefault(str(mode), []).append((index, str(run.get("label")), rel))
    plots = []
    for mode, entries in by_mode.items():
        top = max(int(as_number(rel.get("epochs")) or 1) for _, _, rel in entries)
        top = min(top, 1000)
        ks = list(range(1, top + 1))
        for key, name, says in (
            ("pass_hat_k", "pass^k", "the share of queries passed in all of k epochs drawn"),
            ("pass_at_k", "pass@k", "the share of queries passed in at least one of k epochs"),
        ):
            lines = [
                svg.Curve(
                    label,
                    [as_number(as_map(rel.get(key)).get(str(k))) for k in ks],
                    svg.PALETTE[index % len(svg.PALETTE)],
                )
                for index, label, rel in entries
            ]
            title = f"{name} by k, {mode_title(mode)}"
            caption = (
                f"{name}: {says} (unbiased estimate from each run's epochs); one line per run "
                "with several epochs; percent."
            )
            plots.append(
                Plot(
                    f"plot-{mode}-{key}",
                    title,
                    svg.curves(
                        title, ks, lines, x_label="k (epochs)", whole_x=True, description=caption
                    ),
                    caption,
                )
            )
    return plots


def front_plots(comparison: Mapping[str, Any]) -> list[Plot]:
    """The cost and the latency front: per run, x per case against AnsAcc, the front drawn."""
    plots = []
    fronts = as_map(comparison.get("front"))
    for kind, (x_name, unit, title) in FRONT_AXES.items():
        front = as_map(fronts.get(kind))
        points = [as_map(p) for p in as_list(front.get("points"))]
        spots = [
            svg.Spot(str(p.get("label")), as_number(p.get("x")), as_number(p.get("ans_acc")))
            for p in points
        ]
        if not any(s.x is not None and s.y is not None for s in spots):
            continue
        caption = (
            f"Each run's {x_name} against its AnsAcc (end-to-end); the dashed staircase joins "
            "the front, the runs no other run beats on both (ringed)."
        )
        plots.append(
            Plot(
                f"plot-front-{kind}",
                title,
                svg.scatter(
                    title,
                    spots,
                    front=[str(label) for label in as_list(front.get("front"))],
                    x_label=f"{x_name} ({unit.strip()})",
                    y_label="AnsAcc (%)",
                    x_unit="",
                    description=caption,
                ),
                caption,
            )
        )
    return plots
