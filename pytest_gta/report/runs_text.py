"""Pure renderers of a comparison of runs (:mod:`.runs`): terminal text and markdown.

Like :mod:`.table` for one run, they only read the comparison
(:class:`~pytest_gta.results.comparison.Comparison`), so the terminal, the markdown file and
the JSON can never disagree. Both renderers share :func:`sections`; they differ in how a best
value is marked (``*`` in the terminal, bold in markdown, as the paper bolds it) and in that
only markdown lists the whole per-query matrix.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from pytest_gta.report.robustness import compared_robustness
from pytest_gta.report.table import (
    METRIC_LABELS,
    MODE_TITLES,
    SOUND_LABEL,
    aligned,
    fmt,
    markdown_items,
    markdown_table,
    markdown_text,
    strong,
)
from pytest_gta.results.comparison import (
    TABLE5_COLUMNS,
    Comparison,
    MatrixCell,
    MatrixQuery,
    Table4,
    Table4Row,
    metric_value,
)
from pytest_gta.results.report import Interval

#: (title, headers, rows) of one table.
Section = tuple[str, list[str], list[list[str]]]
#: How a renderer marks a best value.
Marker = Callable[[str], str]
#: Flaky or flipping queries listed per line before the rest is left to the JSON and markdown.
MAX_IDS = 20
#: Notes beyond this many are left to the JSON.
MAX_NOTES = 10
#: Where a run is on a front, as the cost table shows it.
FRONT_NAMES = {"cost": "cost", "time": "time"}
#: Table 5's error kinds, in its columns' order.
ERROR_COLUMNS = TABLE5_COLUMNS[1:]


def _star(text: str) -> str:
    return f"{text}*"


def _bold(text: str) -> str:
    return strong(text)


def row_name(row: Table4Row) -> str:
    """How a Table 4 row is named: the run's label, or ``MODEL (published BOARD)``."""
    if row.kind == "leaderboard":
        return f"{row.model} (published {row.board})"
    return row.label


def _ids(ids: Sequence[str]) -> str:
    shown = ", ".join(ids[:MAX_IDS])
    return shown + (f", ... ({len(ids)} in all)" if len(ids) > MAX_IDS else "")


def _seconds(value: float | None, digits: int = 2) -> str:
    return "n/a" if value is None else f"{float(value):.{digits}f}"


def _money(value: float | None) -> str:
    return "n/a" if value is None else f"{float(value):.4f}"


def _span(low: float | None, high: float | None) -> str:
    """An interval as the tables show it, ``[low, high]`` to one decimal (``n/a``: none)."""
    if low is None or high is None:
        return "n/a"
    return f"[{float(low):.1f}, {float(high):.1f}]"


def _pair(pair: tuple[float, float] | None) -> str:
    return _span(None, None) if pair is None else _span(*pair)


def _interval(interval: Interval) -> str:
    return _span(interval.low, interval.high)


def _table4_rows(
    table: Table4, mark: Marker, level: float, name: Callable[[Table4Row], str] = row_name
) -> list[list[str]]:
    """A Table 4's rows, the best value per column marked, each run's interval line below."""
    columns = table.columns
    best = table.best
    rows: list[list[str]] = []
    for row in table.rows:
        cells = []
        for column in columns:
            text = fmt(row.values.get(column))
            cells.append(mark(text) if row.label in best.get(column, []) else text)
        rows.append([name(row), *cells])
        if row.ci:
            rows.append([f"  {level:g}% CI", *(_pair(row.ci.get(c)) for c in columns)])
    return rows


def table4_sections(comparison: Comparison, mark: Marker) -> list[Section]:
    """Table 4 per mode: a row per run with its interval line, then the published rows."""
    return [
        (
            f"Table 4, {MODE_TITLES.get(mode, mode)} (percent; best per column marked)",
            ["run", *(METRIC_LABELS.get(c, c) for c in table.columns)],
            _table4_rows(table, mark, comparison.level * 100),
        )
        for mode, table in comparison.tables.table4.items()
    ]


def sound_name(comparison: Comparison, mode: str, label: str) -> str:
    """A run's row of the sound Table 4: its label and the queries it is over."""
    run = comparison.run(label)
    counts = run.sound_counts(mode) if run is not None else None
    return f"{label} ({counts[0]} of {counts[1]} queries)" if counts else f"{label} (all)"


def sound_tables(comparison: Comparison) -> list[tuple[str, Table4]]:
    """The sound Table 4 of each mode in which the erratum left out a query of some run."""
    tables = comparison.tables.table4_sound
    return [
        (mode, table)
        for mode, table in (tables.items() if tables is not None else [])
        if any(
            (run := comparison.run(row.label)) is not None and run.sound_counts(mode)
            for row in table.rows
        )
    ]


def table4_sound_sections(comparison: Comparison, mark: Marker) -> list[Section]:
    """Table 4 again per mode, over each run's queries with a sound reference (the erratum)."""
    out = []
    for mode, table in sound_tables(comparison):

        def name(row: Table4Row, mode: str = mode) -> str:
            return sound_name(comparison, mode, row.label)

        out.append(
            (
                f"Table 4, {MODE_TITLES.get(mode, mode)}, {SOUND_LABEL} (percent over the "
                "queries the erratum does not name; best per column marked)",
                ["run", *(METRIC_LABELS.get(c, c) for c in table.columns)],
                _table4_rows(table, mark, comparison.level * 100, name),
            )
        )
    return out


def table5_section(comparison: Comparison) -> list[Section]:
    """Table 5: a row per run and mode, the error kinds' shares of the errored calls."""
    rows = [
        [
            row.label,
            row.mode,
            str(row.errored_calls),
            *("-" if (share := row.share(k)) is None else fmt(share) for k in ERROR_COLUMNS),
        ]
        for row in comparison.tables.table5.rows
    ]
    if not rows:
        return []
    return [
        (
            "Table 5, error types (percent of errored tool calls)",
            ["run", "mode", "errored calls", "format", "argument format", "N/A"],
            rows,
        )
    ]


def _p(value: float | None) -> str:
    return "n/a" if value is None else f"{float(value):.4f}"


def paired_sections(comparison: Comparison) -> list[Section]:
    """Per mode, each run against the reference: difference, interval, p-values, flips."""
    paired = comparison.paired
    level = comparison.level * 100
    by_mode: dict[str, list[list[str]]] = {}
    matched: dict[str, list[str]] = {}
    for label, result in paired.runs.items():
        flipped = result.flipped
        for mode, metrics in result.metrics.items():
            counts = result.cases.get(mode)
            matched.setdefault(mode, []).append(
                f"{label} {'?' if counts is None else counts.matched}"
            )
            regressed = sum(1 for e in flipped.regressed if e.mode == mode)
            fixed = sum(1 for e in flipped.fixed if e.mode == mode)
            for metric, row in metrics.items():
                difference = row.difference
                by_mode.setdefault(mode, []).append(
                    [
                        label,
                        METRIC_LABELS.get(metric, metric),
                        fmt(row.baseline),
                        fmt(row.this),
                        "n/a" if difference is None else f"{float(difference):+.2f}",
                        _interval(row.ci),
                        _p(row.p_value),
                        _p(row.p_drop),
                        f"{regressed}/{fixed}" if metric == "pass_rate" else "",
                    ]
                )
    return [
        (
            f"Paired tests against {paired.reference}, {MODE_TITLES.get(mode, mode)} "
            f"(queries matched: {', '.join(matched[mode])})",
            [
                "run",
                "metric",
                "reference",
                "run's value",
                "difference",
                f"{level:g}% CI",
                "p",
                "p(drop)",
                "regressed/fixed",
            ],
            rows,
        )
        for mode, rows in by_mode.items()
    ]


def reliability_section(comparison: Comparison) -> list[Section]:
    """pass^k and pass@k per run and mode for every k up to the most epochs a run has."""
    entries = [
        (run.label, mode, values)
        for run in comparison.runs
        for mode, values in run.reliability.items()
    ]
    if not entries:
        return []
    most = max(values.epochs for _l, _m, values in entries)
    ks = [str(k) for k in range(1, most + 1)]
    rows = [
        [
            label,
            mode,
            str(values.epochs),
            *(fmt(values.pass_hat_k.get(k)) if k in values.pass_hat_k else "" for k in ks),
            *(fmt(values.pass_at_k.get(k)) if k in values.pass_at_k else "" for k in ks),
            str(len(values.flaky)),
        ]
        for label, mode, values in entries
    ]
    return [
        (
            "Reliability over epochs (percent; pass^k: every one of k epochs passes, "
            "pass@k: at least one does)",
            [
                "run",
                "mode",
                "epochs",
                *(f"pass^{k}" for k in ks),
                *(f"pass@{k}" for k in ks),
                "flaky",
            ],
            rows,
        )
    ]


def flaky_lines(comparison: Comparison) -> list[str]:
    """The flaky queries of each run and mode (passed in some epochs, failed in others)."""
    return [
        f"flaky ({run.label}, {mode}): {_ids(values.flaky)}"
        for run in comparison.runs
        for mode, values in run.reliability.items()
        if values.flaky
    ]


def cost_section(comparison: Comparison) -> list[Section]:
    """Each run's tokens, cost and times per case, and the fronts it is on."""
    fronts = comparison.front.items()
    rows = []
    for run in comparison.runs:
        cost = run.cost
        on = [FRONT_NAMES.get(name, name) for name, front in fronts if run.label in front.front]
        ans_acc = metric_value(run.metrics.e2e, "ans_acc")
        rows.append(
            [
                run.label,
                str(cost.cases),
                f"{float(cost.tokens_per_case):.0f}",
                _money(cost.cost_usd),
                _money(cost.cost_per_case),
                _seconds(cost.wall_s, 1),
                _seconds(cost.wall_per_case_s),
                _seconds(cost.model_per_case_s),
                fmt(ans_acc) if "e2e" in run.modes else "",
                ",".join(on) or "-",
            ]
        )
    return [
        (
            "Cost and latency (per case that ran; front: best AnsAcc for the money, for the time)",
            [
                "run",
                "cases",
                "tokens/case",
                "cost $",
                "$/case",
                "wall s",
                "s/case",
                "model s/case",
                "AnsAcc",
                "front",
            ],
            rows,
        )
    ]


def front_lines(comparison: Comparison) -> list[str]:
    """Which runs each front leaves out, and why."""
    return [
        f"{name} front leaves out {label}: {reason}"
        for name, front in comparison.front.items()
        for label, reason in front.left_out.items()
    ]


def group_sections(comparison: Comparison) -> list[Section]:
    """Per mode, each query type's and tool category's cases passed by each run."""
    matrix = comparison.matrix
    labels = matrix.runs
    by_mode: dict[str, list[list[str]]] = {}
    for group in matrix.groups:
        by_mode.setdefault(group.mode, []).append(
            [
                f"{group.by} {group.name}",
                str(group.queries),
                *(
                    f"{group.passed.get(label, 0)}/{group.cases[label]}"
                    if group.cases.get(label)
                    else "-"
                    for label in labels
                ),
            ]
        )
    return [
        (
            f"Queries passed by type and tool category, {MODE_TITLES.get(mode, mode)} "
            "(cases passed / cases run)",
            ["group", "queries", *labels],
            rows,
        )
        for mode, rows in by_mode.items()
    ]


def matrix_lines(comparison: Comparison) -> list[str]:
    """Per mode: how many queries flip across the runs, which, and each run's flips."""
    matrix = comparison.matrix
    lines = []
    for mode in dict.fromkeys(q.mode for q in matrix.queries):
        queries = [q for q in matrix.queries if q.mode == mode]
        flips = [q.query_id for q in queries if q.flip]
        lines.append(
            f"{mode}: {len(flips)} of {len(queries)} queries flip across the runs"
            + (f": {_ids(flips)}" if flips else "")
        )
        versus: dict[str, dict[str, list[str]]] = {}
        for query in queries:
            for label, verdict in query.versus_reference.items():
                versus.setdefault(label, {}).setdefault(verdict, []).append(query.query_id)
        for label, verdicts in versus.items():
            parts = [
                f"{kind} {len(verdicts[kind])} ({_ids(verdicts[kind])})"
                for kind in ("regressed", "fixed")
                if verdicts.get(kind)
            ]
            if parts:
                lines.append(f"{mode}: {label} against {comparison.reference}: " + ", ".join(parts))
    return lines


def sections(comparison: Comparison, mark: Marker) -> list[Section]:
    """Every table both renderers show, in order."""
    return [
        *table4_sections(comparison, mark),
        *table4_sound_sections(comparison, mark),
        *table5_section(comparison),
        *paired_sections(comparison),
        *reliability_section(comparison),
        *cost_section(comparison),
        *compared_robustness(comparison),
        *group_sections(comparison),
    ]


def header_lines(comparison: Comparison) -> list[str]:
    """What was compared: the dataset, the runs and where they came from, the reference."""
    dataset = comparison.dataset
    lines = [
        f"{len(comparison.runs)} runs on {dataset.path} ({dataset.queries} queries; "
        f"sha256 {dataset.sha256[:16]}); paired tests against {comparison.reference}",
    ]
    for run in comparison.runs:
        how = f"agent {run.agent}" if run.agent else str(run.protocol)
        epochs = f", {run.epochs} epochs" if run.epochs > 1 else ""
        lines.append(
            f"run {run.label}: {run.model} [{how}], modes {','.join(run.modes)}, "
            f"{run.cases} cases{epochs} ({', '.join(run.sources)})"
        )
    return lines


def _notes(comparison: Comparison) -> list[str]:
    return [*front_lines(comparison), *comparison.notes]


def render_text(comparison: Comparison) -> list[str]:
    """The terminal summary of a comparison, line by line."""
    lines = header_lines(comparison)
    for title, headers, rows in sections(comparison, _star):
        lines += ["", title, *aligned(headers, rows)]
    flaky = flaky_lines(comparison)
    matrix = matrix_lines(comparison)
    if flaky or matrix:
        lines += ["", *flaky, *matrix]
    notes = _notes(comparison)
    lines += [""] if notes else []
    lines += [f"note: {note}" for note in notes[:MAX_NOTES]]
    if len(notes) > MAX_NOTES:
        lines.append(f"note: ... and {len(notes) - MAX_NOTES} more notes in the JSON")
    return lines


#: How the markdown matrix shows a cell: every epoch passed, none, some, not run.
_CELL_MARKS = {"passed": "pass", "failed": "fail", "error": "error", "skipped": "skip"}


def _cell_text(cell: MatrixCell | None) -> str:
    if cell is None or cell.outcome is None:
        return "-"
    if cell.epochs > 1:
        return f"{cell.passed}/{cell.epochs}"
    return _CELL_MARKS.get(cell.outcome, cell.outcome)


def matrix_markdown(comparison: Comparison) -> list[str]:
    """The whole per-query matrix, per mode and query type; flipping queries in bold."""
    labels = comparison.matrix.runs
    lines: list[str] = []
    groups: dict[tuple[str, str], list[MatrixQuery]] = {}
    for query in comparison.matrix.queries:
        groups.setdefault((query.mode, query.type), []).append(query)
    for (mode, kind), queries in groups.items():
        rows = [
            [
                _bold(q.query_id) if q.flip else q.query_id,
                ", ".join(q.categories) or "-",
                *(_cell_text(q.cells.get(label)) for label in labels),
            ]
            for q in queries
        ]
        lines += [
            "",
            f"### {markdown_text(f'{MODE_TITLES.get(mode, mode)}, {kind} queries')}",
            "",
            *markdown_table(["query", "tool categories", *labels], rows),
        ]
    return lines


def render_markdown(comparison: Comparison) -> str:
    """The same tables as markdown (best in bold), plus the whole per-query matrix."""
    lines = ["# GTA comparison", "", *markdown_items(header_lines(comparison))]
    for title, headers, rows in sections(comparison, _bold):
        lines += ["", f"## {markdown_text(title)}", "", *markdown_table(headers, rows)]
    flaky = flaky_lines(comparison)
    if flaky:
        lines += ["", "## Flaky queries", "", *markdown_items(flaky)]
    lines += ["", "## Per-query matrix", "", *markdown_items(matrix_lines(comparison))]
    lines += [
        "",
        "A query in bold flips: the runs that have it do not all pass it alike. "
        "A cell is the case's outcome, or passed/epochs for a run of several epochs.",
    ]
    lines += matrix_markdown(comparison)
    notes = _notes(comparison)
    if notes:
        lines += ["", "## Notes", "", *markdown_items(notes)]
    return "\n".join(lines) + "\n"
