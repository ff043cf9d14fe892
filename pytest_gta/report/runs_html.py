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
from collections.abc import Sequence

from pytest_gta.flags import OPT_MODE
from pytest_gta.report.page import asset, esc
from pytest_gta.report.robustness import compared_robustness
from pytest_gta.report.runs_html_parts import Runs, level, muted, num, plots_html, span, table_html
from pytest_gta.report.runs_html_stats import cost_html, matrix_html, paired_html, reliability_html
from pytest_gta.report.runs_plots import metric_plots, mode_title
from pytest_gta.report.runs_text import sound_name, sound_tables
from pytest_gta.report.table import METRIC_LABELS, SOUND_LABEL
from pytest_gta.results.comparison import TABLE5_COLUMNS, Comparison, Table4
from pytest_gta.vocabulary import MODES

CSP = (
    "default-src 'none'; img-src data:; style-src 'unsafe-inline'; base-uri 'none'; "
    "form-action 'none'"
)
_SURROGATES = re.compile("[\ud800-\udfff]")
TABLE5_LABELS = {
    "errored_calls": "errored calls",
    "format": "format",
    "args": "argument format",
    "other": "N/A",
}


# --------------------------------------------------------------------------------------------
# The runs and the paper's tables


def header_html(comparison: Comparison, runs: Runs) -> str:
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
        table_html(
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
        else muted("The comparison has no runs.")
    )
    return f'<dl class="facts">{dl}</dl>{notes_html}{table}'


def table4_html(comparison: Comparison, runs: Runs) -> str:
    """Table 4 per mode: one row per run, then the leaderboard rows; the best in bold."""
    table4 = comparison.tables.table4
    parts = _table4_parts(comparison, runs, list(table4.items()))
    if not parts:
        return muted("No Table 4: the comparison has no metrics of any mode.")
    missing = [m for m in MODES if m not in table4]
    if missing:
        parts.append(
            muted(
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
    comparison: Comparison, runs: Runs, tables: Sequence[tuple[str, Table4]], sound: bool = False
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
                text = num(row.values.get(metric))
                interval = span(row.ci.get(metric))
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
            f"each run's {level(comparison)} interval below its value)"
        )
        parts.append(
            table_html(
                caption,
                ["run", *(METRIC_LABELS.get(c, c) for c in columns)],
                rows,
                "cmp-table table4 sound" if sound else "cmp-table table4",
            )
        )
    return parts


def table5_html(comparison: Comparison) -> str:
    """Table 5: the errored calls of each run and mode by type."""
    table = comparison.tables.table5
    columns = table.columns or list(TABLE5_COLUMNS)
    rows = []
    for row in table.rows:
        cells = "".join(
            f"<td>{esc(row.errored_calls) if c == 'errored_calls' else num(row.share(c))}</td>"
            for c in columns
        )
        rows.append(
            f'<tr><th scope="row">{esc(row.label)}</th>'
            f'<td class="text">{esc(row.mode)}</td>{cells}</tr>'
        )
    if not rows:
        return muted("No Table 5: the comparison lists no errored calls.")
    return table_html(
        "Table 5, error types (percent of errored tool calls)",
        ["run", "mode", *(TABLE5_LABELS.get(c, c) for c in columns)],
        rows,
        "cmp-table table5",
    )


def _row(cells: Sequence[str]) -> str:
    """A row whose first cell names it."""
    first, *rest = cells
    return (
        f'<tr><th scope="row">{esc(first)}</th>'
        + "".join(f"<td>{esc(c)}</td>" for c in rest)
        + "</tr>"
    )


# --------------------------------------------------------------------------------------------
# The page


def render_comparison_html(comparison: Comparison) -> str:
    """The whole page (see the module docstring)."""
    runs = Runs(comparison)
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
    robustness = compared_robustness(comparison)
    if robustness:
        html = "".join(
            table_html(title, names, [_row(cells) for cells in rows])
            for title, names, rows in robustness
        )
        sections.insert(-1, ("robustness", "Robustness under tool faults", html))
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
