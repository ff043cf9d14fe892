"""The comparison page's sections on what it computed across runs and epochs.

The paired tests against the reference run, reliability over epochs (pass^k, pass@k, the flaky
queries), cost and latency with their fronts, and the per-query matrix: the sections that show
what a comparison adds to the runs' own numbers (:mod:`pytest_gta.report.runs_stats` and
:func:`pytest_gta.report.baseline.compare` computed them), apart from the page's header and the
paper's tables (:mod:`pytest_gta.report.runs_html`). Each says in a sentence what the
comparison lacks for it (a single run, one epoch, no prices), never raises.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from pytest_gta.flags import OPT_EPOCHS, OPT_PRICE
from pytest_gta.report.page import esc
from pytest_gta.report.runs_html_parts import (
    Runs,
    ends,
    level,
    muted,
    num,
    plots_html,
    span,
    table_html,
)
from pytest_gta.report.runs_plots import front_plots, mode_title, reliability_plots
from pytest_gta.report.table import METRIC_LABELS
from pytest_gta.results.comparison import Comparison, MatrixCell, Reliability, RunCost
from pytest_gta.results.report import MetricComparison
from pytest_gta.vocabulary import CATEGORY_NAMES, QUERY_TYPES

#: A matrix cell's class and text per outcome (one epoch).
CELLS = {
    "passed": ("P", "\u2713"),
    "failed": ("F", "\u2717"),
    "error": ("E", "E"),
    "skipped": ("S", "s"),
}
COST_COLUMNS = (
    ("cases", "cases", 0),
    ("input_tokens", "input tokens", 0),
    ("output_tokens", "output tokens", 0),
    ("tokens_per_case", "tokens / case", 1),
    ("cost_usd", "cost (USD)", 4),
    ("cost_per_case", "cost / case (USD)", 5),
    ("wall_s", "wall (s)", 1),
    ("wall_per_case_s", "wall / case (s)", 2),
    ("model_s", "model (s)", 1),
    ("model_per_case_s", "model / case (s)", 2),
)


# --------------------------------------------------------------------------------------------
# Paired tests, reliability, cost


def paired_html(comparison: Comparison, runs: Runs) -> str:
    """Per mode, each run against the reference: difference, interval, p-value, significance."""
    against = comparison.paired.runs
    reference = comparison.paired.reference
    alpha = 1 - comparison.level
    if not against:
        return muted(
            "No paired tests: the comparison has a single run, or none shares queries with "
            "the reference."
        )
    modes: list[str] = []
    for result in against.values():
        for mode in result.metrics.modes():
            if mode not in modes:
                modes.append(mode)
    parts = [
        muted(
            f"Each run against the reference {reference} on the queries both ran: the paired "
            f"difference (run minus reference) with its {level(comparison)} bootstrap "
            f"interval and the p-value of a paired test; significant at p < {alpha:g} in "
            "colour (green better, red worse)."
        )
    ]
    for mode in modes:
        metrics: list[str] = []
        for result in against.values():
            for metric in result.metrics.get(mode) or {}:
                if metric not in metrics:
                    metrics.append(metric)
        rows = []
        for label, result in against.items():
            table = result.metrics.get(mode)
            if not table:
                continue
            regressed = sum(1 for e in result.flipped.regressed if e.mode == mode)
            fixed = sum(1 for e in result.flipped.fixed if e.mode == mode)
            counts = result.cases.get(mode)
            matched = "n/a" if counts is None else counts.matched
            cells = "".join(_paired_cell(table.get(m), alpha) for m in metrics)
            rows.append(
                f'<tr><th scope="row">{runs.link(label)} {runs.badge(label)}</th>'
                f"<td>{esc(matched)}</td><td>{regressed}</td><td>{fixed}</td>"
                f"{cells}</tr>"
            )
        parts.append(
            table_html(
                f"Paired against {reference}, {mode_title(mode)}",
                [
                    "run",
                    "matched queries",
                    "regressed",
                    "fixed",
                    *(METRIC_LABELS.get(m, m) for m in metrics),
                ],
                rows,
                "cmp-table paired",
            )
        )
    return "".join(parts)


def _paired_cell(row: MetricComparison | None, alpha: float) -> str:
    if row is None or row.difference is None:
        return '<td class="na">n/a</td>'
    difference = float(row.difference)
    p = row.p_value
    significant = p is not None and p < alpha
    cls = ("sig better" if difference > 0 else "sig worse") if significant else ""
    interval = span(ends(row.ci))
    p_text = "p n/a" if p is None else f"p={p:.3g}"
    mark = ' <span class="sig-mark">significant</span>' if significant else ""
    return (
        f'<td class="{cls}" data-p="{esc(p_text)}">{difference:+.2f}'
        f'<span class="ci">{interval}</span><span class="p">{esc(p_text)}</span>{mark}</td>'
    )


def reliability_html(comparison: Comparison, runs: Runs) -> str:
    """pass^k and pass@k per run and mode, with its flaky queries; or why there are none."""
    by_mode: dict[str, list[tuple[str, Reliability]]] = {}
    for label, run in zip(runs.labels, runs.runs, strict=True):
        for mode, rel in run.reliability.items():
            by_mode.setdefault(mode, []).append((label, rel))
    several = any(rel.epochs > 1 for entries in by_mode.values() for _, rel in entries)
    if not several:
        return muted(
            "Every run has one epoch: pass^k and pass@k need several samples of each query "
            f"(run with {OPT_EPOCHS}=N), so there is no reliability to show and no flaky case."
        )
    parts = [
        muted(
            "pass^k: the share of queries a run passes in all of k epochs drawn from its "
            "epochs (tau-bench); pass@k: in at least one (MCPMark). Flaky: queries passed in "
            "some epochs and failed in others. Percent."
        )
    ]
    for mode, entries in by_mode.items():
        top = max(rel.epochs or 1 for _, rel in entries)
        if top < 2:
            parts.append(muted(f"Every run has one epoch in {mode_title(mode)}."))
            continue
        ks = [str(k) for k in range(1, min(top, 50) + 1)]
        rows = []
        for label, rel in entries:
            hats, ats = rel.pass_hat_k, rel.pass_at_k
            flaky = rel.flaky
            cells = "".join(f"<td>{num(hats.get(k))}</td>" for k in ks)
            cells += "".join(f"<td>{num(ats.get(k))}</td>" for k in ks)
            listed = (
                f"<details><summary>{len(flaky)}</summary>"
                f'<span class="ids">{esc(", ".join(flaky))}</span></details>'
                if flaky
                else "0"
            )
            rows.append(
                f'<tr><th scope="row">{runs.link(label)} {runs.badge(label)}</th>'
                f"<td>{esc(rel.epochs)}</td>{cells}<td>{listed}</td></tr>"
            )
        parts.append(
            table_html(
                f"Reliability, {mode_title(mode)}",
                [
                    "run",
                    "epochs",
                    *(f"pass^{k}" for k in ks),
                    *(f"pass@{k}" for k in ks),
                    "flaky queries",
                ],
                rows,
                "cmp-table reliability",
            )
        )
    parts.append(
        plots_html(reliability_plots(comparison), "No run has several epochs in any mode.")
    )
    return "".join(parts)


def _cost(cost: RunCost, key: str) -> float | None:
    value = getattr(cost, key, None)
    return float(value) if isinstance(value, int | float) else None


def cost_html(comparison: Comparison, runs: Runs) -> str:
    """Each run's tokens, cost and time per case, the fronts as plots, what was left out."""
    fronts = dict(comparison.front.items())
    on_front = {kind: set(front.front) for kind, front in fronts.items()}
    rows = []
    for label, run in zip(runs.labels, runs.runs, strict=True):
        cells = "".join(
            f"<td>{num(_cost(run.cost, key), decimals)}</td>" for key, _, decimals in COST_COLUMNS
        )
        marks = ", ".join(kind for kind in ("cost", "time") if label in on_front[kind])
        rows.append(
            f'<tr><th scope="row">{runs.link(label)} {runs.badge(label)}</th>{cells}'
            f"<td>{esc(marks)}</td></tr>"
        )
    parts = []
    if rows:
        parts.append(
            table_html(
                "Cost and latency (per case: over the run's cases, every mode and epoch)",
                ["run", *(name for _, name, _ in COST_COLUMNS), "on the front"],
                rows,
                "cmp-table cost",
            )
        )
    left_out = []
    for kind, front in fronts.items():
        for label, reason in front.left_out.items():
            left_out.append(f"{label}: left out of the {kind} front: {reason}")
    if left_out:
        parts.append('<ul class="left-out">' + "".join(f"<li>{esc(t)}</li>" for t in left_out))
        parts.append("</ul>")
    parts.append(
        plots_html(
            front_plots(comparison),
            "No front to draw: no run has both an end-to-end AnsAcc and a known cost or time "
            f"per case (a cost needs prices: the model catalog's or {OPT_PRICE}).",
        )
    )
    return "".join(parts)


# --------------------------------------------------------------------------------------------
# The per-query matrix


def _cell(cell: MatrixCell | None, versus: str | None) -> str:
    """One run's result on one query: outcome (one epoch) or passed/epochs; flips outlined."""
    if cell is not None and cell.epochs > 1:
        cls = "P" if cell.passed >= cell.epochs else "F" if cell.passed <= 0 else "M"
        text = f"{cell.passed:g}/{cell.epochs:g}"
    elif cell is not None and cell.outcome in CELLS:
        cls, text = CELLS[cell.outcome]
    else:
        cls, text = "N", ""
    if versus == "regressed":
        cls += " rg"
    elif versus == "fixed":
        cls += " fx"
    return f'<td class="{cls}">{text}</td>'


def _group_row(
    name: str,
    queries: int,
    passed: Mapping[str, int],
    cases: Mapping[str, int],
    labels: Sequence[str],
) -> str:
    """A group's summary: each run's passed cases, ``passed/cases`` where epochs multiply them."""
    cells = []
    for label in labels:
        count, total = passed.get(label, ""), cases.get(label)
        if total == 0:
            shown = ""  # the run did not run this mode
        else:
            shown = f"{count}/{total}" if total not in (None, queries) else f"{count}"
        cells.append(f"<td>{esc(shown)}</td>")
    title = f"{name} ({queries} queries; passed per run)"
    return f'<tr class="group"><th scope="row" colspan="2">{esc(title)}</th>{"".join(cells)}</tr>'


def matrix_html(comparison: Comparison, runs: Runs) -> str:
    """Per mode, a row per query grouped by query type, a column per run; category totals."""
    matrix = comparison.matrix
    labels = matrix.runs or runs.labels
    queries = matrix.queries
    if not queries:
        return muted("No per-query matrix: the comparison lists no query.")
    groups = matrix.groups
    modes = list(dict.fromkeys(q.mode for q in queries))
    head = "".join(
        f'<th class="run" title="{esc(label)}">{runs.index.get(label, i) + 1}</th>'
        for i, label in enumerate(labels)
    )
    tags = {c: c[0].upper() for c in CATEGORY_NAMES}
    flips = sum(q.flip for q in queries)
    parts = [
        muted(
            "One row per query and mode, one column per run (numbered as in the runs table; "
            "hover for the label). \u2713 passed, \u2717 failed, E error, s skipped, blank not "
            "run; with epochs, passed/epochs. Rows whose pass/fail differs across runs are "
            "flips (marked); a cell outlined red regressed against the reference, green was "
            "fixed. Categories: P perception, O operation, L logic, C creativity."
        ),
        '<input type="checkbox" id="only-flips" class="only-flips">'
        f'<label for="only-flips">show only the {flips} flipped rows</label>',
    ]
    for mode in modes:
        rows = []
        in_mode = [q for q in queries if q.mode == mode]
        types = list(dict.fromkeys([*QUERY_TYPES, *(q.type for q in in_mode)]))
        for qtype in types:
            members = [q for q in in_mode if q.type == qtype]
            if not members:
                continue
            summary = next(
                (g for g in groups if g.mode == mode and g.by == "type" and g.name == qtype), None
            )
            rows.append(
                _group_row(qtype, len(members), {}, {}, labels)
                if summary is None
                else _group_row(
                    summary.name, summary.queries, summary.passed, summary.cases, labels
                )
            )
            for query in members:
                cells = query.cells
                versus = query.versus_reference
                cats = query.categories
                tag = "".join(tags.get(c, "?") for c in cats)
                qid = query.query_id
                flip = " flipped" if query.flip else ""
                row_cells = "".join(_cell(cells.get(label), versus.get(label)) for label in labels)
                rows.append(
                    f'<tr class="q{flip}" data-q="{esc(qid)}"><th scope="row">{esc(qid)}</th>'
                    f'<td class="cats" title="{esc(", ".join(cats))}">{esc(tag)}</td>'
                    f"{row_cells}</tr>"
                )
        category_rows = "".join(
            _group_row(g.name, g.queries, g.passed, g.cases, labels)
            for g in groups
            if g.mode == mode and g.by == "category"
        )
        parts.append(
            f'<div class="matrix-wrap"><table class="matrix" data-mode="{esc(mode)}">'
            f"<caption>Per-query results, {esc(mode_title(mode))} "
            f"({len(in_mode)} queries)</caption>"
            f'<thead><tr><th class="qid">query</th><th>cat.</th>{head}</tr></thead>'
            f"<tbody>{''.join(rows)}</tbody></table></div>"
        )
        if category_rows:
            parts.append(
                f'<table class="matrix by-category"><caption>By tool category, '
                f"{esc(mode_title(mode))} (a query counts in each category it calls)</caption>"
                f'<thead><tr><th colspan="2">category</th>{head}</tr></thead>'
                f"<tbody>{category_rows}</tbody></table>"
            )
    return "".join(parts)
