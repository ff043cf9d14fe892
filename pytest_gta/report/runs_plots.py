"""The plots of a comparison of runs (``pytest-gta-comparison/1``), as inline SVG.

Each function reads the :class:`~pytest_gta.results.comparison.Comparison` that
:mod:`pytest_gta.report.runs` builds (or :func:`pytest_gta.results.io.parse_comparison` read
back) and returns :class:`~pytest_gta.report.plots.Plot` objects, or none when the comparison
has nothing to show for them (no run with several epochs, no run with a cost). A value a run
does not have (``None``) is drawn as ``n/a`` or left out of its line.
"""

from __future__ import annotations

from pytest_gta.report import svg
from pytest_gta.report.plots import Plot
from pytest_gta.report.table import METRIC_LABELS, MODE_TITLES
from pytest_gta.results.comparison import Comparison, Reliability

#: What the front's x axes are, as the comparison names them.
FRONT_AXES = {
    "cost": ("cost per case", " USD", "Cost per case against AnsAcc"),
    "time": ("wall time per case", " s", "Wall time per case against AnsAcc"),
}
#: The most epochs a reliability plot draws (a hand-made comparison may claim any number).
MAX_K = 1000


def mode_title(mode: str) -> str:
    """``step-by-step mode`` for ``step``; an unknown mode as itself."""
    return MODE_TITLES.get(mode, f"{mode} mode")


def metric_plots(comparison: Comparison) -> list[Plot]:
    """Per mode and Table-4 metric, every run's value and interval; published rows as marks."""
    plots = []
    for mode, table in comparison.tables.table4.items():
        for metric in table.columns:
            winners = set(table.best.get(metric, []))
            estimates = [
                svg.Estimate(
                    row.label,
                    row.values.get(metric),
                    row.ci.get(metric),
                    published=row.kind == "leaderboard",
                    strong=row.label in winners,
                )
                for row in table.rows
            ]
            name = METRIC_LABELS.get(metric, metric)
            title = f"{name}, {mode_title(mode)}"
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


def reliability_plots(comparison: Comparison) -> list[Plot]:
    """Per mode, pass^k and pass@k over k of every run that has several epochs."""
    by_mode: dict[str, list[tuple[int, str, Reliability]]] = {}
    for index, run in enumerate(comparison.runs):
        for mode, rel in run.reliability.items():
            if rel.epochs > 1:
                by_mode.setdefault(mode, []).append((index, run.label, rel))
    plots = []
    for mode, entries in by_mode.items():
        top = min(max(rel.epochs for _, _, rel in entries), MAX_K)
        ks = list(range(1, top + 1))
        for key, name, says in (
            ("pass_hat_k", "pass^k", "the share of queries passed in all of k epochs drawn"),
            ("pass_at_k", "pass@k", "the share of queries passed in at least one of k epochs"),
        ):
            lines = [
                svg.Curve(
                    label,
                    [
                        (rel.pass_hat_k if key == "pass_hat_k" else rel.pass_at_k).get(str(k))
                        for k in ks
                    ],
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


def front_plots(comparison: Comparison) -> list[Plot]:
    """The cost and the latency front: per run, x per case against AnsAcc, the front drawn."""
    plots = []
    fronts = dict(comparison.front.items())
    for kind, (x_name, unit, title) in FRONT_AXES.items():
        front = fronts[kind]
        if not front.points:
            continue
        spots = [svg.Spot(p.label, p.x, p.ans_acc) for p in front.points]
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
                    front=list(front.front),
                    x_label=f"{x_name} ({unit.strip()})",
                    y_label="AnsAcc (%)",
                    x_unit="",
                    description=caption,
                ),
                caption,
            )
        )
    return plots
