"""Several runs side by side: the paper's tables with one row per run (``--gta-compare``).

A model team runs GTA many times (checkpoints, ReAct against native calling, its own agent) and
sets the runs beside the published leaderboard, as the paper's Table 4 sets one row per model.
:func:`build_comparison` turns the runs' reports into the ``pytest-gta-comparison/1``
:class:`~pytest_gta.results.comparison.Comparison` (docs/compare.md documents it field by
field); :mod:`.runs_text` renders it for the terminal and as markdown, :mod:`.runs_html` as a
page.

Nothing a run's report already says is computed again: its metrics, intervals, pass rates and
error counts are copied from the report, so every number of a run here equals the one its own
report shows. The paired tests against the reference run are :func:`.baseline.compare`'s, the
gates' own statistics. What is new is only what needs several runs or every epoch at once:
the per-query matrix, reliability over epochs (pass^k, pass@k), and the cost and time fronts.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Literal, NamedTuple, TypeVar

from pytest_gta.dataset import Dataset
from pytest_gta.erratum import shipped_erratum
from pytest_gta.errors import GtaUsageError
from pytest_gta.flags import OPT_COMPARE, OPT_COMPARE_REF, OPT_LEADERBOARD_ROWS, OPT_PRICE
from pytest_gta.models.catalog import leaderboard_boards, leaderboard_numbers, leaderboard_rows
from pytest_gta.report.baseline import Baseline, compare
from pytest_gta.report.build import ordered, sound_sections
from pytest_gta.results.base import PerMode
from pytest_gta.results.case import CaseResult
from pytest_gta.results.comparison import (
    COMPARISON_SCHEMA,
    FRONT_KEYS,
    MIXED,
    TABLE4_COLUMNS,
    TABLE5_COLUMNS,
    ComparedDataset,
    ComparedRun,
    Comparison,
    Front,
    FrontKey,
    FrontPoint,
    Fronts,
    Matrix,
    MatrixCell,
    MatrixGroup,
    MatrixQuery,
    Paired,
    PublishedRow,
    Reliability,
    RunCost,
    Table4,
    Table4Row,
    Table5,
    Table5Row,
    Tables,
    Versus,
    interval_value,
    metric_value,
)
from pytest_gta.results.erratum import ErratumEntry
from pytest_gta.results.report import E2EMetrics, RunReport, StepMetrics
from pytest_gta.version import __version__
from pytest_gta.vocabulary import CATEGORY_NAMES, MODES, QUERY_TYPES, Mode

#: Values are compared for "best" at the precision the tables show (two decimals), so two
#: rows that read the same are both marked, as the paper marks ties.
BEST_DIGITS = 2

S = TypeVar("S")
E = TypeVar("E")


@dataclass(frozen=True)
class RunInput:
    """One run to compare: its (merged) report, and where it came from."""

    #: How every table names the run; unique in a comparison (the command de-duplicates).
    label: str
    #: The report file(s) as given (a run's shards are merged into one report first).
    sources: tuple[str, ...]
    report: RunReport
    #: The run's own HTML report beside it (a path, for links), if there is one.
    html: str | None = None


def build_comparison(
    runs: Sequence[RunInput],
    dataset: Dataset,
    *,
    reference: str | None = None,
    leaderboard: Sequence[str] = (),
    level: float = 0.95,
    samples: int = 2000,
    notes: Sequence[str] = (),
) -> Comparison:
    """The comparison (``pytest-gta-comparison/1``, docs/compare.md) of ``runs``.

    Args:
        runs: the runs in the order the tables list them; each report is on ``dataset``.
        dataset: the dataset every run scored (query types, tool categories, order).
        reference: the label of the run the paired tests compare with (``None``: the first).
        leaderboard: board names (every row of the board) and model names (the model's
            newest row), as ``--gta-leaderboard-rows`` lists them.
        level: the confidence level of the paired tests' intervals.
        samples: bootstrap and permutation resamples of the paired tests.
        notes: what the caller found (settings that differ, merged shards), kept first.

    Raises:
        GtaUsageError: no run, a label given twice, an unknown reference label, or a
            leaderboard name that is neither a board nor a model on one.
    """
    if not runs:
        raise GtaUsageError(f"{OPT_COMPARE}: no run to compare")
    labels = [run.label for run in runs]
    twice = sorted({label for label in labels if labels.count(label) > 1})
    if twice:
        raise GtaUsageError(f"{OPT_COMPARE}: the label(s) {', '.join(twice)} name several runs")
    ref = _reference(labels, reference)
    published = leaderboard_selection(leaderboard)
    out_notes = list(notes)
    in_order = {run.label: ordered(run.report.cases, dataset) for run in runs}
    named = shipped_erratum().of_dataset(dataset)
    entries = [_run_entry(run, in_order[run.label], out_notes, dataset, named) for run in runs]
    out_notes += _selection_notes(runs, in_order, published, dataset)
    candidates = [
        Candidate(e.label, e.modes, e.cost, metric_value(e.metrics.e2e, "ans_acc")) for e in entries
    ]
    return Comparison(
        schema=COMPARISON_SCHEMA,
        pytest_gta=__version__,
        created_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        dataset=ComparedDataset(sha256=dataset.sha256, path=dataset.root_str, queries=len(dataset)),
        level=level,
        samples=samples,
        reference=ref,
        notes=out_notes,
        runs=entries,
        tables=Tables(
            table4=table4(entries, published),
            table5=table5(entries),
            table4_sound=table4_sound(entries),
        ),
        leaderboard=published,
        paired=_paired(runs, in_order, ref, level=level, samples=samples, dataset=dataset),
        matrix=query_matrix(labels, in_order, ref, dataset),
        front=Fronts(
            cost=front(candidates, FRONT_KEYS["cost"]), time=front(candidates, FRONT_KEYS["time"])
        ),
    )


# --------------------------------------------------------------------------------------------
# Names: the reference run and the leaderboard rows


def _reference(labels: Sequence[str], reference: str | None) -> str:
    if reference is None:
        return labels[0]
    if reference in labels:
        return reference
    close = difflib.get_close_matches(reference, labels, n=3, cutoff=0.5)
    hint = f"; did you mean {', '.join(close)}?" if close else ""
    raise GtaUsageError(
        f"{OPT_COMPARE_REF}={reference}: no run has that label{hint} "
        f"(the runs: {', '.join(labels)})"
    )


def leaderboard_selection(names: Sequence[str]) -> list[PublishedRow]:
    """The published rows ``names`` choose, in that order.

    A board name (``2026-02``) takes every row of that board; a model name (case-insensitive)
    its newest row. A row named twice is listed once.

    Raises:
        GtaUsageError: a name that is neither, listing the boards and the close model names.
    """
    boards = leaderboard_boards()
    newest = leaderboard_rows()
    by_lower = {model.lower(): model for model in newest}
    chosen: dict[tuple[str, str], PublishedRow] = {}
    for raw in names:
        name = raw.strip()
        if not name:
            continue
        if name in boards:
            rows = list(boards[name].values())
        elif name.lower() in by_lower:
            rows = [newest[by_lower[name.lower()]]]
        else:
            close = difflib.get_close_matches(name.lower(), list(by_lower), n=3, cutoff=0.5)
            hint = f"; did you mean {', '.join(by_lower[c] for c in close)}?" if close else ""
            raise GtaUsageError(
                f"{OPT_LEADERBOARD_ROWS}={name}: neither a leaderboard board nor a model on one"
                f"{hint} (the boards: {', '.join(boards)}; a model name takes its newest row)"
            )
        for row in rows:
            numbers = leaderboard_numbers(row)
            values = {k: float(v) for k, v in numbers.items() if isinstance(v, int | float)}
            chosen.setdefault(
                (row["board"], row["model"]),
                PublishedRow(model=row["model"], board=row["board"], values=values),
            )
    return list(chosen.values())


def leaderboard_label(row: PublishedRow) -> str:
    """How the tables name a published row: ``MODEL@BOARD`` (a model may be on two boards)."""
    return f"{row.model}@{row.board}"


# --------------------------------------------------------------------------------------------
# One run


def _in_modes(value: PerMode[S, E], modes: Sequence[str]) -> PerMode[S, E]:
    """``value`` with only the modes of ``modes``."""
    return value.model_copy(
        update={mode: None for mode in MODES if mode not in modes and mode in value}
    )


def _run_entry(
    run: RunInput,
    cases: Sequence[CaseResult],
    notes: list[str],
    dataset: Dataset,
    named: Mapping[str, Sequence[ErratumEntry]],
) -> ComparedRun:
    """The run's entry: its report's own numbers, its cost, its reliability over epochs.

    A report written before ``metrics_sound`` gets it from its cases, as its run would have
    (``named``: the erratum's queries of ``dataset``).
    """
    report = run.report
    sound, sound_denominators = report.metrics_sound, report.denominators_sound
    if sound is None or sound_denominators is None:
        sound, sound_denominators = sound_sections(cases, dataset, named)
    # A hook may have renamed the run through the report's top-level label: that one is shown.
    identity = report.identity.model_copy(update={"label": report.label})
    modes: list[Mode] = [m for m in MODES if m in report.metrics]
    return ComparedRun(
        label=run.label,
        model=report.model,
        protocol=identity.protocol,
        agent=identity.agent,
        identity=identity,
        sources=list(run.sources),
        html=run.html,
        modes=modes,
        epochs=report.epochs,
        cases=len(report.cases),
        settings=report.settings,
        metrics=report.metrics,
        metrics_ci=_in_modes(report.metrics_ci, modes),
        pass_rate=_in_modes(report.pass_rate, modes),
        errors=_in_modes(report.errors, modes),
        tool_calls=_in_modes(report.tool_calls, modes),
        outcomes=report.outcomes,
        cost=cost_of(report, cases),
        reliability=reliability_of(run.label, cases, modes, report.epochs, notes),
        metrics_sound=_in_modes(sound, modes),
        denominators=_in_modes(report.denominators, modes),
        denominators_sound=_in_modes(sound_denominators, modes),
    )


def cost_of(report: RunReport, cases: Sequence[CaseResult]) -> RunCost:
    """The run's tokens, cost and times, in total and per case that ran (skipped ones not).

    Tokens and cost are the report's ``usage``; the wall time its ``duration_s``. The wall time
    per case is that over the cases that ran: what the configuration (concurrency, workers
    included) costs in time, which is what the time front weighs. A merged report has no
    ``duration_s`` (its shards ran apart): there it is the mean of the scored cases' own
    durations (an episode played ahead counts its time in the pool). The model time is
    ``usage.model_s``, else the sum of the cases' ``model_s`` (``None`` where no case has one).
    """
    ran = [c for c in cases if c.outcome != "skipped"]
    count = len(ran)
    usage = report.usage
    tokens_in, tokens_out = usage.input_tokens, usage.output_tokens
    cost = usage.cost_usd
    wall = report.duration_s
    durations = [
        float(c.duration) for c in ran if c.primitives is not None and c.duration is not None
    ]
    model_s: float | None
    if isinstance(usage.model_s, int | float):
        model_s = float(usage.model_s)
    else:  # a report from before usage.model_s
        timed = [c.model_s for c in cases if c.model_s is not None]
        model_s = sum(timed) if timed else None

    def per_case(total: float | None) -> float | None:
        return None if total is None or not count else float(total) / count

    return RunCost(
        cases=count,
        input_tokens=tokens_in,
        output_tokens=tokens_out,
        tokens_per_case=(tokens_in + tokens_out) / count if count else 0.0,
        cost_usd=None if cost is None else float(cost),
        cost_per_case=per_case(cost),
        wall_s=None if wall is None else float(wall),
        wall_per_case_s=per_case(wall)
        if wall is not None
        else (sum(durations) / len(durations) if durations else None),
        model_s=model_s,
        model_per_case_s=per_case(model_s),
    )


def pass_hat_k(outcomes: Sequence[tuple[int, int]], k: int) -> float | None:
    """tau-bench's pass^k: the mean over queries of C(c, k) / C(n, k), in percent.

    ``outcomes`` holds each query's (n epochs, c passed); queries with fewer than ``k`` epochs
    are left out (``None``: no query has ``k``).
    """
    terms = [math.comb(c, k) / math.comb(n, k) for n, c in outcomes if n >= k]
    return sum(terms) / len(terms) * 100 if terms else None


def pass_at_k(outcomes: Sequence[tuple[int, int]], k: int) -> float | None:
    """The unbiased pass@k (Codex, MCPMark): the mean of 1 - C(n - c, k) / C(n, k), in percent."""
    terms = [1 - math.comb(n - c, k) / math.comb(n, k) for n, c in outcomes if n >= k]
    return sum(terms) / len(terms) * 100 if terms else None


def reliability_of(
    label: str,
    cases: Sequence[CaseResult],
    modes: Sequence[Mode],
    epochs: int,
    notes: list[str],
) -> PerMode[Reliability, Reliability]:
    """Per mode: pass^k and pass@k for k = 1..epochs, and the flaky queries in dataset order.

    ``epochs`` is the report's. An errored or skipped epoch counts as not passed. A query with
    fewer epochs than the run is counted with its own number of epochs (and a note says so).
    """
    out: dict[str, Reliability] = {}
    for mode in modes:
        counts: dict[str, list[int]] = {}
        for case in cases:
            if case.mode == mode:
                slot = counts.setdefault(case.query_id, [0, 0])
                slot[0] += 1
                slot[1] += case.outcome == "passed"
        pairs = [(n, c) for n, c in counts.values()]
        # The report's epochs count those in which some case ran; an epoch whose cases were
        # all skipped (a session stopped early) still counts here, as not passed.
        most = max([epochs, *(n for n, _c in pairs)])
        short = [qid for qid, (n, _c) in counts.items() if n < most]
        if short:
            notes.append(
                f"{label}: {len(short)} {mode} quer{'y' if len(short) == 1 else 'ies'} "
                f"({', '.join(short[:5])}{', ...' if len(short) > 5 else ''}) ran fewer than the "
                f"run's {most} epochs; pass^k and pass@k count each with its own epochs"
            )
        ks = list(range(1, most + 1))
        out[mode] = Reliability(
            epochs=most,
            k=ks,
            pass_hat_k={str(k): pass_hat_k(pairs, k) for k in ks},
            pass_at_k={str(k): pass_at_k(pairs, k) for k in ks},
            flaky=[qid for qid, (n, c) in counts.items() if 0 < c < n],
        )
    return PerMode[Reliability, Reliability](step=out.get("step"), e2e=out.get("e2e"))


# --------------------------------------------------------------------------------------------
# Tables


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


# --------------------------------------------------------------------------------------------
# Paired tests, the per-query matrix and the fronts


def _paired(
    runs: Sequence[RunInput],
    in_order: Mapping[str, Sequence[CaseResult]],
    reference: str,
    *,
    level: float,
    samples: int,
    dataset: Dataset,
) -> Paired:
    """Each run against the reference, by :func:`.baseline.compare` (the gates' statistics)."""
    ref = next(run for run in runs if run.label == reference)
    baseline = Baseline(reference, tuple(in_order[reference]), ref.report)
    return Paired(
        reference=reference,
        runs={
            run.label: compare(in_order[run.label], baseline, dataset, level=level, samples=samples)
            for run in runs
            if run.label != reference
        },
    )


def _cell(cases: Sequence[CaseResult]) -> MatrixCell:
    outcomes = {c.outcome for c in cases}
    return MatrixCell(
        outcome=next(iter(outcomes)) if len(outcomes) == 1 else MIXED,
        passed=sum(c.outcome == "passed" for c in cases),
        epochs=len(cases),
    )


def query_matrix(
    labels: Sequence[str],
    in_order: Mapping[str, Sequence[CaseResult]],
    reference: str,
    dataset: Dataset,
) -> Matrix:
    """Which run passes which query (every epoch counted), grouped by query type and category.

    A query flips when the runs that have it do not all pass it at the same rate; against the
    reference a run ``regressed`` a query whose pass rate fell, ``fixed`` one whose rate rose.
    """
    by_case: dict[tuple[Mode, str], dict[str, list[CaseResult]]] = {}
    for label in labels:
        for case in in_order[label]:
            by_case.setdefault((case.mode, case.query_id), {}).setdefault(label, []).append(case)
    mode_order: dict[str, int] = {m: i for i, m in enumerate(MODES)}
    keys = sorted(by_case, key=lambda k: (mode_order[k[0]], dataset[k[1]].position))
    queries = []
    for mode, qid in keys:
        found = by_case[(mode, qid)]
        cells = {
            label: _cell(found[label])
            if label in found
            else MatrixCell(outcome=None, passed=0, epochs=0)
            for label in labels
        }
        rates = {label: cells[label].rate for label in found}
        versus: dict[str, Versus] = {}
        if reference in rates:
            for label, rate in rates.items():
                if label != reference:
                    before = rates[reference]
                    versus[label] = (
                        "same" if rate == before else "regressed" if rate < before else "fixed"
                    )
        query = dataset[qid]
        queries.append(
            MatrixQuery(
                mode=mode,
                query_id=qid,
                type=query.type,
                categories=[c for c in CATEGORY_NAMES if c in query.categories],
                cells=cells,
                flip=len(set(rates.values())) > 1,
                versus_reference=versus,
            )
        )
    return Matrix(runs=list(labels), queries=queries, groups=_groups(labels, queries))


def _groups(labels: Sequence[str], queries: Sequence[MatrixQuery]) -> list[MatrixGroup]:
    """Per mode, query type and tool category: the queries, and each run's passed cases."""
    groups: list[MatrixGroup] = []
    for mode in MODES:
        mine = [q for q in queries if q.mode == mode]
        if not mine:
            continue
        kinds: list[tuple[Literal["type", "category"], str, list[MatrixQuery]]] = [
            *(("type", name, [q for q in mine if q.type == name]) for name in QUERY_TYPES),
            *(
                ("category", name, [q for q in mine if name in q.categories])
                for name in CATEGORY_NAMES
            ),
        ]
        for by, name, members in kinds:
            if not members:
                continue
            groups.append(
                MatrixGroup(
                    mode=mode,
                    by=by,
                    name=name,
                    queries=len(members),
                    passed={label: sum(q.cells[label].passed for q in members) for label in labels},
                    cases={label: sum(q.cells[label].epochs for q in members) for label in labels},
                )
            )
    return groups


def pareto(points: Sequence[tuple[str, float, float]]) -> list[str]:
    """The labels of the points no other point beats: x as low and y as high, one strictly.

    Points that are equal on both are all on the front; the labels keep the order given.
    """
    return [
        label
        for label, x, y in points
        if not any((ox <= x and oy >= y) and (ox < x or oy > y) for _other, ox, oy in points)
    ]


class Candidate(NamedTuple):
    """A run as the fronts weigh it: its modes, its cost, its end-to-end AnsAcc."""

    label: str
    modes: Sequence[str]
    cost: RunCost | None
    ans_acc: float | None


def front(candidates: Sequence[Candidate], x_key: FrontKey) -> Front:
    """The runs' (``x_key``, e2e AnsAcc) points and the Pareto front among them."""
    points = []
    left_out: dict[str, str] = {}
    for run in candidates:
        x = None if run.cost is None else run.cost.x(x_key)
        if "e2e" not in run.modes:
            left_out[run.label] = "no end-to-end mode (AnsAcc is an e2e metric)"
        elif run.ans_acc is None:
            left_out[run.label] = "AnsAcc is undefined (no query with an answer)"
        elif x is None:
            left_out[run.label] = _MISSING_X[x_key]
        else:
            points.append(FrontPoint(label=run.label, x=float(x), ans_acc=float(run.ans_acc)))
    on_front = pareto([(p.label, p.x, p.ans_acc) for p in points])
    return Front(x=x_key, points=points, front=on_front, left_out=left_out)


_MISSING_X: dict[FrontKey, str] = {
    "cost_per_case": f"no cost known (no prices for the model: {OPT_PRICE} sets them)",
    "wall_per_case_s": "no case durations in the report",
}


# --------------------------------------------------------------------------------------------
# Notes


def _selection_notes(
    runs: Sequence[RunInput],
    in_order: Mapping[str, Sequence[CaseResult]],
    published: Sequence[PublishedRow],
    dataset: Dataset,
) -> list[str]:
    """What makes the tables' rows not strictly comparable: modes, query selections."""
    notes = []
    for mode in MODES:
        having = {
            run.label: {c.query_id for c in in_order[run.label] if c.mode == mode} for run in runs
        }
        having = {label: qids for label, qids in having.items() if qids}
        if not having:
            continue
        missing = [run.label for run in runs if run.label not in having]
        if missing:
            notes.append(
                f"{', '.join(missing)} did not run the {mode} mode: the {mode} tables leave "
                f"{'it' if len(missing) == 1 else 'them'} out"
            )
        selections = {frozenset(q) for q in having.values()}
        if len(selections) > 1:
            sizes = ", ".join(f"{label} {len(q)}" for label, q in having.items())
            notes.append(
                f"the runs scored different {mode} queries ({sizes}): each run's metrics are "
                "over its own queries; the paired tests use the queries both runs have"
            )
    if published:
        scored = max(len({c.query_id for c in cases}) for cases in in_order.values())
        if scored != 229 or len(dataset) != 229:
            notes.append(
                f"the runs scored at most {scored} of the dataset's {len(dataset)} queries; the "
                "published rows are over all 229 GTA queries, so they are not directly comparable"
            )
    return notes
