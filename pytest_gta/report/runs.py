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
the per-query matrix, reliability over epochs (pass^k, pass@k), and the cost and time fronts
(:mod:`.runs_stats`); the tables lay the runs' numbers out (:mod:`.runs_tables`). This module
checks what it is given and puts the comparison together.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TypeVar

from pytest_gta.dataset import Dataset
from pytest_gta.erratum import shipped_erratum
from pytest_gta.errors import GtaUsageError
from pytest_gta.flags import OPT_COMPARE, OPT_COMPARE_REF, OPT_LEADERBOARD_ROWS
from pytest_gta.models.catalog import leaderboard_boards, leaderboard_numbers, leaderboard_rows
from pytest_gta.report.baseline import Baseline, compare
from pytest_gta.report.build import ordered, sound_sections
from pytest_gta.report.runs_stats import Candidate, cost_of, front, query_matrix, reliability_of
from pytest_gta.report.runs_tables import table4, table4_sound, table5
from pytest_gta.results.base import PerMode
from pytest_gta.results.case import CaseResult
from pytest_gta.results.comparison import (
    COMPARISON_SCHEMA,
    FRONT_KEYS,
    ComparedDataset,
    ComparedRun,
    Comparison,
    Fronts,
    Paired,
    PublishedRow,
    Tables,
    metric_value,
)
from pytest_gta.results.erratum import ErratumEntry
from pytest_gta.results.report import RunReport
from pytest_gta.version import __version__
from pytest_gta.vocabulary import MODES, Mode

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
        robustness=report.robustness,
    )


# --------------------------------------------------------------------------------------------
# Paired tests


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
