"""The paper's tables of a comparison: Table 4 per mode, its sound twin, Table 5.

Each row is a run's numbers as its own report has them (:mod:`pytest_gta.report.runs` copies
them into the run's entry), so the tables only lay them out: a row per run, then the chosen
published leaderboard rows, and per column the best value at the precision the tables show.
Laying out is its own step, apart from building the runs' entries and the statistics across
them (:mod:`.runs_stats`), because the terminal, markdown, page and plots all read these very
rows.
"""

from __future__ import annotations

from collections.abc import Sequence

from pytest_gta.results.base import PerMode
from pytest_gta.results.comparison import (
    TABLE4_COLUMNS,
    TABLE5_COLUMNS,
    ComparedRun,
    PublishedRow,
    Table4,
    Table4Row,
    Table5,
    Table5Row,
    interval_value,
    metric_value,
)
from pytest_gta.results.report import E2EMetrics, StepMetrics
from pytest_gta.vocabulary import MODES, Mode

#: Values are compared for "best" at the precision the tables show (two decimals), so two
#: rows that read the same are both marked, as the paper marks ties.
BEST_DIGITS = 2


def leaderboard_label(row: PublishedRow) -> str:
    """How the tables name a published row: ``MODEL@BOARD`` (a model may be on two boards)."""
    return f"{row.model}@{row.board}"


def _run_row(entry: ComparedRun, mode: Mode, columns: Sequence[str]) -> Table4Row:
    metrics = entry.metrics.get(mode)
    intervals = entry.metrics_ci.get(mode)
    ci: dict[str, tuple[float, float]] = {}
    for column in columns:
        interval = interval_value(intervals, column)
        if interval is not None and interval.low is not None and interval.high is not None:
            ci[column] = (float(interval.low), float(interval.high))
    return Table4Row(
        label=entry.label,
        kind="run",
        board=None,
        model=entry.model,
        values={c: metric_value(metrics, c) for c in columns},
        ci=ci,
    )


def table4(
    entries: Sequence[ComparedRun], published: Sequence[PublishedRow]
) -> PerMode[Table4, Table4]:
    """Per mode, a row per run that has the mode, then the published rows; the best marked."""
    out: dict[str, Table4] = {}
    for mode, columns in TABLE4_COLUMNS.items():
        rows = [_run_row(entry, mode, columns) for entry in entries if mode in entry.modes]
        if not rows:
            continue
        for row in published:
            rows.append(
                Table4Row(
                    label=leaderboard_label(row),
                    kind="leaderboard",
                    board=row.board,
                    model=row.model,
                    values={c: row.values.get(c) for c in columns},
                    ci={},
                )
            )
        out[mode] = Table4(columns=list(columns), rows=rows, best=best_of(rows, columns))
    return PerMode[Table4, Table4](step=out.get("step"), e2e=out.get("e2e"))


def table4_sound(entries: Sequence[ComparedRun]) -> PerMode[Table4, Table4]:
    """Per mode, a row per run with its ``metrics_sound`` (no interval, no published row)."""
    out: dict[str, Table4] = {}
    for mode, columns in TABLE4_COLUMNS.items():
        rows = []
        for entry in entries:
            sound = entry.metrics_sound.get(mode) if entry.metrics_sound else None
            if mode not in entry.modes or sound is None:
                continue
            metrics = sound if isinstance(sound, StepMetrics | E2EMetrics) else None
            rows.append(
                Table4Row(
                    label=entry.label,
                    kind="run",
                    board=None,
                    model=entry.model,
                    values={c: metric_value(metrics, c) for c in columns},
                    ci={},
                )
            )
        if rows:
            out[mode] = Table4(columns=list(columns), rows=rows, best=best_of(rows, columns))
    return PerMode[Table4, Table4](step=out.get("step"), e2e=out.get("e2e"))


def best_of(rows: Sequence[Table4Row], columns: Sequence[str]) -> dict[str, list[str]]:
    """Per column, the labels of the rows with the highest value at display precision."""
    best: dict[str, list[str]] = {}
    for column in columns:
        values = {
            row.label: None if (v := row.values.get(column)) is None else round(v, BEST_DIGITS)
            for row in rows
        }
        known = [v for v in values.values() if v is not None]
        top = max(known) if known else None
        best[column] = [label for label, v in values.items() if top is not None and v == top]
    return best


def table5(entries: Sequence[ComparedRun]) -> Table5:
    """A row per run and mode: the errored calls, and each error kind's share in percent."""
    rows = []
    for entry in entries:
        for mode in MODES:
            counts = entry.errors.get(mode)
            if counts is None:
                continue
            total = counts.total()
            kinds = (counts.format, counts.args, counts.other)
            shares = [count / total * 100 if total else None for count in kinds]
            rows.append(
                Table5Row(
                    label=entry.label,
                    mode=mode,
                    errored_calls=total,
                    format=shares[0],
                    args=shares[1],
                    other=shares[2],
                )
            )
    return Table5(columns=list(TABLE5_COLUMNS), rows=rows)
