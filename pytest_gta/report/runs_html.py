"""The HTML page of a comparison of runs (``--gta-compare`` with ``--gta-report-html``).

One self-contained file in the run report's own look (its stylesheet, plus a few rules for
the matrix): the header, the paper's Table 4 per mode with one row per run and the chosen
leaderboard rows marked as published, the best value per column in bold as the paper does,
each run's interval under its value; Table 5; a plot per Table-4 metric; the paired tests
against the reference run; reliability over epochs; cost and latency with their fronts; the
per-query matrix. Each run's label links to its own HTML report where the comparison knows one.

The page reads the comparison (:class:`~pytest_gta.results.comparison.Comparison`, built by
:mod:`pytest_gta.report.runs` or read back from its JSON by
:func:`~pytest_gta.results.io.parse_comparison`) and nothing else, so it can be rendered again
from the JSON. The reader checks every field's kind; what a comparison may still lack (a mode, a
front, a run's cell in the matrix) is said in a sentence, never an exception. Labels, query ids
and notes are user data and only ever written escaped.

No script at all: the Content-Security-Policy allows none, and the one interaction the matrix
needs (show only the queries that flip) is a checkbox and a CSS rule. 20 runs of 458 cases stay
well under a megabyte (the matrix cells are a class and one character each; the run labels are
in the column heads only).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from urllib.parse import quote, urlsplit

from pytest_gta.flags import OPT_EPOCHS, OPT_MODE, OPT_PRICE
from pytest_gta.report.page import asset, esc
from pytest_gta.report.plots import Plot
from pytest_gta.report.runs_plots import (
    front_plots,
    metric_plots,
    mode_title,
    reliability_plots,
)
from pytest_gta.report.runs_text import sound_name, sound_tables
from pytest_gta.report.table import METRIC_LABELS, SOUND_LABEL
from pytest_gta.results.comparison import (
    TABLE5_COLUMNS,
    Comparison,
    MatrixCell,
    Reliability,
    RunCost,
    Table4,
)
from pytest_gta.results.report import Interval, MetricComparison
from pytest_gta.vocabulary import CATEGORY_NAMES, MODES, QUERY_TYPES

CSP = (
    "default-src 'none'; img-src data:; style-src 'unsafe-inline'; base-uri 'none'; "
    "form-action 'none'"
)
_SURROGATES = re.compile("[\ud800-\udfff]")
#: Schemes a run's ``html`` may link with; anything else (``javascript:``) is shown as text.
LINK_SCHEMES = ("http", "https", "file")
#: A matrix cell's class and text per outcome (one epoch).
CELLS = {
    "passed": ("P", "\u2713"),
    "failed": ("F", "\u2717"),
    "error": ("E", "E"),
    "skipped": ("S", "s"),
}
TABLE5_LABELS = {
    "errored_calls": "errored calls",
    "format": "format",
    "args": "argument format",
    "other": "N/A",
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
# Small pieces


def _num(value: float | None, decimals: int = 2) -> str:
    return "n/a" if value is None else f"{float(value):.{decimals}f}"


def _span(pair: tuple[float, float] | None) -> str:
    return "" if pair is None else f"[{pair[0]:.2f}, {pair[1]:.2f}]"


def _ends(interval: Interval) -> tuple[float, float] | None:
    low, high = interval.low, interval.high
    return None if low is None or high is None else (low, high)


def _muted(text: str) -> str:
    return f'<p class="muted">{esc(text)}</p>'


def href(target: object) -> str | None:
    """A run report's path or URL as a link target, or ``None`` when it cannot be one.

    A path is percent-encoded (spaces, ``#``); a URL keeps its own encoding but only with a
    scheme in :data:`LINK_SCHEMES`, so a ``javascript:`` or ``data:`` value is never a link.
    """
    text = target.strip() if isinstance(target, str) else ""
    if not text:
        return None
    try:
        scheme = urlsplit(text).scheme.lower()
    except ValueError:
        return None
    if scheme in LINK_SCHEMES:
        return text
    if len(scheme) > 1:
        return None
    # A plain path (a one-letter "scheme" is a Windows drive).
    return quote(text.replace("\\", "/"), safe="/:~._-")


class _Runs:
    """The comparison's runs by label: their index (for colours and matrix columns) and link."""

    def __init__(self, comparison: Comparison) -> None:
        self.runs = comparison.runs
        self.labels = [run.label for run in self.runs]
        self.index = {label: i for i, label in reversed(list(enumerate(self.labels)))}
        self.reference = comparison.reference

    def link(self, label: str) -> str:
        """The label as HTML, linked to the run's own report when there is one."""
        text = esc(label)
        index = self.index.get(label)
        target = href(self.runs[index].html) if index is not None else None
        if target is None:
            return text
        return f'<a class="run-link" href="{esc(target)}">{text}</a>'

    def badge(self, label: str) -> str:
        """The run's number (its matrix column), and ``reference`` for the reference run."""
        index = self.index.get(label)
        parts = [] if index is None else [f'<span class="run-no">{index + 1}</span>']
        if label == self.reference:
            parts.append('<span class="ref">reference</span>')
        return " ".join(parts)


def _table(
    caption: str, headers: Sequence[str], rows: Sequence[str], cls: str = "cmp-table"
) -> str:
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    return (
        f'<table class="{cls}"><caption>{esc(caption)}</caption>'
        f"<thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"
    )


# --------------------------------------------------------------------------------------------
# Sections


def header_html(comparison: Comparison, runs: _Runs) -> str:
    """The comparison's facts, its notes and the list of runs."""
    dataset = comparison.dataset
    facts = [
        ("dataset", dataset.path),
        ("dataset sha256", dataset.sha256),
        ("queries", dataset.queries),
        ("runs", len(runs.runs)),
        ("reference", comparison.reference),
        ("interval level", comparison.level),
        ("bootstrap samples", comparison.samples),
        ("created", comparison.created_at),
        ("pytest-gta", comparison.pytest_gta),
    ]
    dl = "".join(f"<dt>{esc(k)}</dt><dd>{esc(v)}</dd>" for k, v in facts)
    notes = comparison.notes
    notes_html = (
        '<ul class="notes">' + "".join(f"<li>{esc(n)}</li>" for n in notes) + "</ul>"
        if notes
        else ""
    )
    rows = []
    for i, run in enumerate(runs.runs):
        label = runs.labels[i]
        git = run.identity.git
        commit = "" if git is None else git.short + (" (dirty)" if git.dirty else "")
        how = f"agent {run.agent}" if run.agent else run.protocol
        rows.append(
            f'<tr><td>{i + 1}</td><td class="text">{runs.link(label)} '
            f"{runs.badge(label) if label == runs.reference else ''}</td>"
            f'<td class="text">{esc(run.model)}</td>'
            f'<td class="text">{esc(how or "n/a")}</td>'
            f'<td class="text">{esc(", ".join(run.modes))}</td>'
            f"<td>{esc(run.epochs)}</td><td>{esc(run.cases)}</td>"
            f'<td class="text">{esc(commit)}</td>'
            f'<td class="text">{esc(run.identity.started_at or "")}</td>'
            f'<td class="src">{esc(", ".join(run.sources))}</td>'
            "</tr>"
        )
    table = (
        _table(
            "Runs (the number is the run's column in the per-query matrix)",
            [
                "#",
                "label",
                "model",
                "protocol / agent",
                "modes",
                "epochs",
                "cases",
                "commit",
                "started",
                "report file(s)",
            ],
            rows,
        )
        if rows
        else _muted("The comparison has no runs.")
    )
    return f'<dl class="facts">{dl}</dl>{notes_html}{table}'


def table4_html(comparison: Comparison, runs: _Runs) -> str:
    """Table 4 per mode: one row per run, then the leaderboard rows; the best in bold."""
    table4 = comparison.tables.table4
    parts = _table4_parts(comparison, runs, list(table4.items()))
    if not parts:
        return _muted("No Table 4: the comparison has no metrics of any mode.")
    missing = [m for m in MODES if m not in table4]
    if missing:
        parts.append(
            _muted(
                "No run has "
                + " or ".join(mode_title(m) for m in missing)
                + f" ({OPT_MODE}="
                + ",".join(MODES)
                + " runs both), so its table is left out."
            )
        )
    parts += _table4_parts(comparison, runs, sound_tables(comparison), sound=True)
    return "".join(parts)


def _table4_parts(
    comparison: Comparison, runs: _Runs, tables: Sequence[tuple[str, Table4]], sound: bool = False
) -> list[str]:
    """Each mode's Table 4 (``sound``: over the queries the erratum does not name)."""
    parts = []
    for mode, table in tables:
        columns = table.columns
        best = {m: set(v) for m, v in table.best.items()}
        rows = []
        for row in table.rows:
            label = row.label
            published = row.kind == "leaderboard"
            if published:
                board = row.board
                name = (
                    f'{esc(label)} <span class="pub">published'
                    f"{esc(' ' + board) if board else ''}</span>"
                )
            else:
                name = f"{runs.link(label)} {runs.badge(label)}"
            if sound:
                counts = sound_name(comparison, mode, label)[len(label) :]
                name += f'<span class="ci">{esc(counts)}</span>'
            cells = []
            for metric in columns:
                text = _num(row.values.get(metric))
                interval = _span(row.ci.get(metric))
                is_best = label in best.get(metric, ()) and text != "n/a"
                shown = f"<b>{text}</b>" if is_best else text
                extra = f'<span class="ci">{interval}</span>' if interval else ""
                cls = ' class="best"' if is_best else ""
                cells.append(f"<td{cls}>{shown}{extra}</td>")
            kind = "leaderboard" if published else "run"
            rows.append(
                f'<tr class="{kind}" data-label="{esc(label)}"><th scope="row">{name}</th>'
                f"{''.join(cells)}</tr>"
            )
        caption = (
            f"Table 4, {mode_title(mode)}, {SOUND_LABEL} (percent over the queries the erratum "
            "does not name; best per column in bold)"
            if sound
            else f"Table 4, {mode_title(mode)} (percent; best per column in bold; "
            f"each run's {_level(comparison)} interval below its value)"
        )
        parts.append(
            _table(
                caption,
                ["run", *(METRIC_LABELS.get(c, c) for c in columns)],
                rows,
                "cmp-table table4 sound" if sound else "cmp-table table4",
            )
        )
    return parts


def _level(comparison: Comparison) -> str:
    return f"{comparison.level * 100:g}%"


def table5_html(comparison: Comparison) -> str:
    """Table 5: the errored calls of each run and mode by type."""
    table = comparison.tables.table5
    columns = table.columns or list(TABLE5_COLUMNS)
    rows = []
    for row in table.rows:
        cells = "".join(
            f"<td>{esc(row.errored_calls) if c == 'errored_calls' else _num(row.share(c))}</td>"
            for c in columns
        )
        rows.append(
            f'<tr><th scope="row">{esc(row.label)}</th>'
            f'<td class="text">{esc(row.mode)}</td>{cells}</tr>'
        )
    if not rows:
        return _muted("No Table 5: the comparison lists no errored calls.")
    return _table(
        "Table 5, error types (percent of errored tool calls)",
        ["run", "mode", *(TABLE5_LABELS.get(c, c) for c in columns)],
        rows,
        "cmp-table table5",
    )


def plots_html(plots: Sequence[Plot], empty: str) -> str:
    """Figures in the run report's grid, or a sentence when there are none."""
    if not plots:
        return _muted(empty)
    figures = "".join(
        f'<figure id="{esc(p.slug)}">{p.svg}<figcaption>{esc(p.caption)}</figcaption></figure>'
        for p in plots
    )
    return f'<div class="plots">{figures}</div>'


def paired_html(comparison: Comparison, runs: _Runs) -> str:
    """Per mode, each run against the reference: difference, interval, p-value, significance."""
    against = comparison.paired.runs
    reference = comparison.paired.reference
    alpha = 1 - comparison.level
    if not against:
        return _muted(
            "No paired tests: the comparison has a single run, or none shares queries with "
            "the reference."
        )
    modes: list[str] = []
    for result in against.values():
        for mode in result.metrics.modes():
            if mode not in modes:
                modes.append(mode)
    parts = [
        _muted(
            f"Each run against the reference {reference} on the queries both ran: the paired "
            f"difference (run minus reference) with its {_level(comparison)} bootstrap "
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
            _table(
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
    interval = _span(_ends(row.ci))
    p_text = "p n/a" if p is None else f"p={p:.3g}"
    mark = ' <span class="sig-mark">significant</span>' if significant else ""
    return (
        f'<td class="{cls}" data-p="{esc(p_text)}">{difference:+.2f}'
        f'<span class="ci">{interval}</span><span class="p">{esc(p_text)}</span>{mark}</td>'
    )


def reliability_html(comparison: Comparison, runs: _Runs) -> str:
    """pass^k and pass@k per run and mode, with its flaky queries; or why there are none."""
    by_mode: dict[str, list[tuple[str, Reliability]]] = {}
    for label, run in zip(runs.labels, runs.runs, strict=True):
        for mode, rel in run.reliability.items():
            by_mode.setdefault(mode, []).append((label, rel))
    several = any(rel.epochs > 1 for entries in by_mode.values() for _, rel in entries)
    if not several:
        return _muted(
            "Every run has one epoch: pass^k and pass@k need several samples of each query "
            f"(run with {OPT_EPOCHS}=N), so there is no reliability to show and no flaky case."
        )
    parts = [
        _muted(
            "pass^k: the share of queries a run passes in all of k epochs drawn from its "
            "epochs (tau-bench); pass@k: in at least one (MCPMark). Flaky: queries passed in "
            "some epochs and failed in others. Percent."
        )
    ]
    for mode, entries in by_mode.items():
        top = max(rel.epochs or 1 for _, rel in entries)
        if top < 2:
            parts.append(_muted(f"Every run has one epoch in {mode_title(mode)}."))
            continue
        ks = [str(k) for k in range(1, min(top, 50) + 1)]
        rows = []
        for label, rel in entries:
            hats, ats = rel.pass_hat_k, rel.pass_at_k
            flaky = rel.flaky
            cells = "".join(f"<td>{_num(hats.get(k))}</td>" for k in ks)
            cells += "".join(f"<td>{_num(ats.get(k))}</td>" for k in ks)
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
            _table(
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


def cost_html(comparison: Comparison, runs: _Runs) -> str:
    """Each run's tokens, cost and time per case, the fronts as plots, what was left out."""
    fronts = dict(comparison.front.items())
    on_front = {kind: set(front.front) for kind, front in fronts.items()}
    rows = []
    for label, run in zip(runs.labels, runs.runs, strict=True):
        cells = "".join(
            f"<td>{_num(_cost(run.cost, key), decimals)}</td>" for key, _, decimals in COST_COLUMNS
        )
        marks = ", ".join(kind for kind in ("cost", "time") if label in on_front[kind])
        rows.append(
            f'<tr><th scope="row">{runs.link(label)} {runs.badge(label)}</th>{cells}'
            f"<td>{esc(marks)}</td></tr>"
        )
    parts = []
    if rows:
        parts.append(
            _table(
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


def matrix_html(comparison: Comparison, runs: _Runs) -> str:
    """Per mode, a row per query grouped by query type, a column per run; category totals."""
    matrix = comparison.matrix
    labels = matrix.runs or runs.labels
    queries = matrix.queries
    if not queries:
        return _muted("No per-query matrix: the comparison lists no query.")
    groups = matrix.groups
    modes = list(dict.fromkeys(q.mode for q in queries))
    head = "".join(
        f'<th class="run" title="{esc(label)}">{runs.index.get(label, i) + 1}</th>'
        for i, label in enumerate(labels)
    )
    tags = {c: c[0].upper() for c in CATEGORY_NAMES}
    flips = sum(q.flip for q in queries)
    parts = [
        _muted(
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


# --------------------------------------------------------------------------------------------
# The page


def render_comparison_html(comparison: Comparison) -> str:
    """The whole page (see the module docstring)."""
    runs = _Runs(comparison)
    sections = [
        ("runs", "Runs", header_html(comparison, runs)),
        (
            "tables",
            "Tables",
            table4_html(comparison, runs) + table5_html(comparison),
        ),
        (
            "plots",
            "Metrics per run",
            plots_html(metric_plots(comparison), "No metric to plot."),
        ),
        ("paired", "Paired tests against the reference", paired_html(comparison, runs)),
        ("reliability", "Reliability across epochs", reliability_html(comparison, runs)),
        ("cost", "Cost and latency", cost_html(comparison, runs)),
        ("matrix", "Per-query matrix", matrix_html(comparison, runs)),
    ]
    nav = " ".join(
        f'<a href="#{key}">{esc(title.split()[0].lower())}</a>' for key, title, _ in sections
    )
    body = "".join(
        f'<section id="{key}"><h2>{esc(title)}</h2>{html}</section>'
        for key, title, html in sections
    )
    title = f"GTA comparison: {len(runs.runs)} run(s)"
    page = (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{esc(CSP)}">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        '<link rel="icon" href="data:,">'
        f"<title>{esc(title)}</title>"
        f"<style>{asset('report.css')}{asset('runs.css')}</style></head>"
        f"<body><header><h1>{esc(title)}</h1><nav>{nav}</nav></header>"
        f"<main>{body}</main></body></html>\n"
    )
    return _SURROGATES.sub("\ufffd", page)
