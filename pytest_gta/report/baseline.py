"""How sure a run's numbers are, and whether it is worse than a baseline (controller only).

With 229 queries a 3-point drop in AnsAcc can be noise. Following "Adding Error Bars to Evals"
(Miller, 2024), every interval and test here treats the *query* as the unit of resampling: the
official metrics are ratios of sums over queries, a query's epochs (``--gta-epochs``) are one
cluster, and two runs on the same queries are compared pair by pair, which removes the
between-query variance that an unpaired comparison would count as noise.

* ``metrics_ci``: a percentile bootstrap interval per official metric (and the pass rate),
  resampling query ids and recomputing the official aggregate (:mod:`pytest_gta.report.stats`).
* ``comparison`` against ``--gta-baseline=REPORT``: cases matched on (mode, query id); per
  metric the baseline's and this run's values over the matched queries, the paired difference
  with its bootstrap interval, a paired permutation test (exact McNemar for the pass rate of
  single-epoch runs), and the queries that flipped.
* against ``--gta-baseline=leaderboard:NAME[@BOARD]`` (the newest board with NAME, or BOARD): an
  official row has no per-query results, so the comparison is unpaired: this run's interval, and
  how often a bootstrap resample of this run reaches the published value.

Everything reads :class:`~pytest_gta.results.case.CaseResult` lists, so a single run, a merged
run (``--gta-merge``) and a baseline report are treated by the same code.
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypedDict

import numpy as np

from pytest_gta.dataset import Dataset
from pytest_gta.errors import GtaUsageError
from pytest_gta.flags import OPT_BASELINE, OPT_BASELINE_LENIENT, OPT_REPORT
from pytest_gta.models.catalog import (
    LEADERBOARD_PREFIX,
    boards_with,
    leaderboard_boards,
    leaderboard_numbers,
    leaderboard_rows,
)
from pytest_gta.report import stats
from pytest_gta.report.build import (
    by_epoch,
    epoch_metrics,
    interval,
    ordered,
    query_clusters,
    query_pass_rates,
)
from pytest_gta.results.base import PerMode
from pytest_gta.results.case import CaseResult
from pytest_gta.results.io import ATOMIC, expect_benchmark, parse_report, read_report_data
from pytest_gta.results.report import (
    BaselineComparison,
    Flipped,
    FlippedCase,
    LeaderboardRow,
    MatchedCases,
    MetricComparison,
    RunReport,
)
from pytest_gta.vocabulary import MODES

BASELINE_HOW = f"{OPT_BASELINE} reads a {OPT_REPORT} file written by an earlier run"
#: Leaderboard columns per mode (the CSV has no pass rate).
LEADERBOARD_METRICS = {
    "step": ("inst_acc", "tool_acc", "arg_acc", "summ_acc"),
    "e2e": ("ans_acc", "ans_acc_img", "p_f1", "o_f1", "l_f1", "c_f1"),
}


# --------------------------------------------------------------------------------------------
# The baseline


class ComparableRun(TypedDict):
    """What a report baseline must share with this run for their scores to compare."""

    sha256: str
    modes: list[str]
    #: ``None``: not known yet.
    protocol: str | None
    #: The scoring settings: runs scored with another similarity model or threshold differ.
    sim_model: str | None
    sim_threshold: float | None


def comparable_run(
    sha256: str,
    modes: Sequence[str],
    protocol: str | None,
    *,
    sim_model: str | None,
    sim_threshold: float | None,
) -> ComparableRun:
    """This run as :func:`mismatches` compares it: a session's, or a merged run's."""
    return {
        "sha256": sha256,
        "modes": list(modes),
        "protocol": protocol,
        "sim_model": sim_model,
        "sim_threshold": sim_threshold,
    }


@dataclass(frozen=True)
class Baseline:
    """What ``--gta-baseline`` named: a previous report's cases, or a leaderboard row."""

    #: How messages and the report name it (the path as given, or ``leaderboard:NAME``).
    label: str
    cases: tuple[CaseResult, ...] = ()
    #: The report (``None`` for a leaderboard row).
    report: RunReport | None = None
    #: The leaderboard row (``None`` for a report).
    row: LeaderboardRow | None = None


def load_baseline(spec: str, label: str) -> Baseline:
    """Read ``--gta-baseline``: a report file (checked field by field) or a leaderboard row.

    Raises:
        GtaUsageError: naming the file and field, or the unknown leaderboard name.
    """
    if spec.startswith(LEADERBOARD_PREFIX):
        return Baseline(label, row=leaderboard_baseline(spec.removeprefix(LEADERBOARD_PREFIX)))
    named = f"{OPT_BASELINE} {label}"
    data = read_report_data(Path(spec), named, BASELINE_HOW)
    expect_benchmark(data, named, ATOMIC, "this run")
    read = parse_report(named, data, BASELINE_HOW)
    return Baseline(label, tuple(read.report.cases), read.report)


def leaderboard_baseline(spec: str) -> LeaderboardRow:
    """The official row ``NAME`` or ``NAME@BOARD`` names, as numbers.

    ``NAME`` (case-insensitive) takes the newest board that has the model; ``@BOARD`` (e.g.
    ``@2025-03``) a given one, for comparing with the number a paper or an older run cited.

    Raises:
        GtaUsageError: an unknown model, an unknown board, or a board without the model; the
            message names the option, the boards that have the model, and what to write.
    """
    option = f"{OPT_BASELINE}={LEADERBOARD_PREFIX}{spec}"
    name, at, board = spec.partition("@")
    rows = leaderboard_rows()
    by_lower = {model.lower(): model for model in rows}
    found = by_lower.get(name.strip().lower())
    if found is None:
        close = difflib.get_close_matches(name.lower(), list(by_lower), n=3, cutoff=0.5)
        hint = f"; did you mean {', '.join(by_lower[c] for c in close)}?" if close else ""
        raise GtaUsageError(
            f"{option}: no such model on the official leaderboard{hint} (the models: "
            f"{', '.join(rows)})"
        )
    if not at:
        return LeaderboardRow.model_validate(leaderboard_numbers(rows[found]))
    board = board.strip()
    boards = leaderboard_boards()
    row = boards.get(board, {}).get(found)
    if row is None:
        has = boards_with(found)
        problem = (
            f"{found} is not on the {board} board"
            if board in boards
            else f"no board {board!r} (the boards: {', '.join(boards)})"
        )
        raise GtaUsageError(
            f"{option}: {problem}; {found} is on the {', '.join(has)} board(s). Write "
            f"{LEADERBOARD_PREFIX}{found}@BOARD with one of those, or {LEADERBOARD_PREFIX}{found} "
            f"for the newest ({has[-1]})"
        )
    return LeaderboardRow.model_validate(leaderboard_numbers(row))


def mismatches(baseline: Baseline, run: ComparableRun) -> list[str]:
    """How a report baseline's run differs from this one where scores would not compare."""
    data = baseline.report
    if data is None:
        return []
    found = []
    theirs = data.dataset.sha256
    if theirs != run["sha256"]:
        found.append(f"dataset sha256 {theirs[:16]}... vs this run's {str(run['sha256'])[:16]}...")
    settings = data.settings
    modes = list(settings.modes)
    if modes != list(run["modes"]):
        found.append(f"modes {_show(modes)} vs this run's {','.join(run['modes'])}")
    if run["protocol"] is not None and data.protocol != run["protocol"]:
        found.append(f"protocol {data.protocol} vs this run's {run['protocol']}")
    for key, theirs_value, mine in (
        ("sim_model", settings.sim_model, run["sim_model"]),
        ("sim_threshold", settings.sim_threshold, run["sim_threshold"]),
    ):
        if theirs_value != mine:
            found.append(f"{key} {_show(theirs_value)} vs this run's {_show(mine)}")
    return found


def _show(value: Any) -> str:
    if isinstance(value, list):
        return ",".join(str(v) for v in value)
    return str(value)


def read_baseline(
    spec: str, label: str, run: ComparableRun, lenient: bool
) -> tuple[Baseline, list[str]]:
    """Read ``--gta-baseline`` and check it against this run (``run`` as for :func:`mismatches`).

    Returns the baseline and the differences ``--gta-baseline-lenient`` let through.

    Raises:
        GtaUsageError: an unreadable baseline, or one from another kind of run (not lenient).
    """
    baseline = load_baseline(spec, label)
    found = mismatches(baseline, run)
    if found and not lenient:
        raise GtaUsageError(
            f"{OPT_BASELINE} {baseline.label} is not comparable with this run: "
            f"{'; '.join(found)}. Compare runs of the same dataset, modes, protocol and scoring "
            f"settings, or pass {OPT_BASELINE_LENIENT} to compare anyway (the report notes the "
            "differences)"
        )
    return baseline, found


# --------------------------------------------------------------------------------------------
# Comparing


def compare(
    this: Sequence[CaseResult],
    baseline: Baseline,
    dataset: Dataset,
    *,
    level: float,
    samples: int,
    differences: Sequence[str] = (),
) -> BaselineComparison:
    """The report's ``comparison`` section (see the module docstring).

    ``this`` are this run's cases (:func:`~pytest_gta.report.build.ordered`); ``differences`` what
    :func:`mismatches` found and ``--gta-baseline-lenient`` let through.
    """
    if baseline.row is not None:
        return _compare_leaderboard(this, baseline.label, baseline.row, dataset, level, samples)

    theirs_all = ordered([c for c in baseline.cases if c.outcome != "skipped"], dataset)
    table: dict[str, dict[str, MetricComparison]] = {}
    flipped = Flipped(regressed=[], fixed=[])
    matched_counts: dict[str, MatchedCases] = {}
    for mode in MODES:
        mine = [c for c in this if c.mode == mode and c.outcome != "skipped"]
        theirs = [c for c in theirs_all if c.mode == mode]
        if not mine and not theirs:
            continue
        common = {c.query_id for c in mine} & {c.query_id for c in theirs}
        matched_counts[mode] = MatchedCases(
            matched=len(common),
            only_this_run=len({c.query_id for c in mine} - common),
            only_baseline=len({c.query_id for c in theirs} - common),
        )
        if not common:
            continue
        mine = [c for c in mine if c.query_id in common]
        theirs = [c for c in theirs if c.query_id in common]
        table[mode] = _mode_rows(mode, mine, theirs, dataset, level=level, samples=samples)
        regressed, fixed = _flips(mode, mine, theirs)
        flipped.regressed += regressed
        flipped.fixed += fixed
    method_ci = f"{stats.METHOD_DIFF} ({samples} resamples, seed {stats.SEED})"
    return BaselineComparison(
        kind="report",
        baseline=baseline.label,
        baseline_model=baseline.report.model if baseline.report is not None else None,
        paired=True,
        level=level,
        methods={
            "difference_ci": method_ci,
            "p_value": f"{stats.METHOD_TEST} ({samples} resamples or exact, seed {stats.SEED})",
            "pass_rate": "exact McNemar test when both runs have one epoch",
        },
        cases=PerMode[MatchedCases, MatchedCases](
            step=matched_counts.get("step"), e2e=matched_counts.get("e2e")
        ),
        differences=list(differences),
        metrics=_by_mode(table),
        flipped=flipped,
    )


def _by_mode(
    table: dict[str, dict[str, MetricComparison]],
) -> PerMode[dict[str, MetricComparison], dict[str, MetricComparison]]:
    return PerMode[dict[str, MetricComparison], dict[str, MetricComparison]](
        step=table.get("step"), e2e=table.get("e2e")
    )


def _mode_rows(
    mode: str,
    mine: Sequence[CaseResult],
    theirs: Sequence[CaseResult],
    dataset: Dataset,
    *,
    level: float,
    samples: int,
) -> dict[str, MetricComparison]:
    mine_clusters = query_clusters(mine, dataset)
    order = list(mine_clusters)
    theirs_clusters = query_clusters(theirs, dataset)
    this_m = stats.query_matrix(mode, [mine_clusters[q] for q in order])
    base_m = stats.query_matrix(mode, [theirs_clusters[q] for q in order])
    cis = stats.paired_bootstrap_ci(mode, this_m, base_m, samples=samples, level=level)
    tests = stats.permutation_test(mode, this_m, base_m, samples=samples)
    this_values = _point(mode, mine, dataset)
    base_values = _point(mode, theirs, dataset)
    mcnemar = None
    if len(by_epoch(mine)) == 1 and len(by_epoch(theirs)) == 1:
        now = {c.query_id: c.outcome == "passed" for c in mine}
        before = {c.query_id: c.outcome == "passed" for c in theirs}
        regressed = sum(1 for q in order if before[q] and not now[q])
        fixed = sum(1 for q in order if now[q] and not before[q])
        mcnemar = stats.mcnemar(regressed, fixed)
    rows: dict[str, MetricComparison] = {}
    for metric in stats.CI_METRICS[mode]:
        this_value, base_value = this_values.get(metric), base_values.get(metric)
        difference = None
        if this_value is not None and base_value is not None:
            difference = float(this_value) - float(base_value)
        test = mcnemar if metric == "pass_rate" and mcnemar is not None else tests.get(metric)
        rows[metric] = MetricComparison(
            baseline=base_value,
            this=this_value,
            difference=difference,
            ci=interval(cis.get(metric), level, stats.METHOD_DIFF),
            p_value=None if test is None or difference is None else test.p_value,
            p_drop=None if test is None or difference is None else test.p_drop,
            test="exact McNemar"
            if metric == "pass_rate" and mcnemar is not None
            else stats.METHOD_TEST,
        )
    return rows


def _point(mode: str, cases: Sequence[CaseResult], dataset: Dataset) -> dict[str, float | None]:
    """The metrics as the report shows them (mean over epochs of the official aggregate)."""
    values = dict(epoch_metrics(mode, cases, dataset)[0])
    values["pass_rate"] = sum(c.outcome == "passed" for c in cases) / len(cases) * 100
    return {k: None if v is None else float(v) for k, v in values.items()}


def _flips(
    mode: str, mine: Sequence[CaseResult], theirs: Sequence[CaseResult]
) -> tuple[list[FlippedCase], list[FlippedCase]]:
    """Queries whose pass rate fell (regressed) or rose (fixed), in dataset order."""
    now, before = query_pass_rates(mine), query_pass_rates(theirs)
    nodeids: dict[str, list[str]] = {}
    outcomes: dict[str, list[str]] = {}
    for case in mine:
        nodeids.setdefault(case.query_id, []).append(case.nodeid)
        outcomes.setdefault(case.query_id, []).append(case.outcome)
    regressed: list[FlippedCase] = []
    fixed: list[FlippedCase] = []
    for qid, rate in now.items():
        if rate == before[qid]:
            continue
        flip = FlippedCase(
            id=f"{mode}-{qid}",
            mode="step" if mode == "step" else "e2e",
            query_id=qid,
            baseline_pass_rate=before[qid],
            pass_rate=rate,
            outcomes=outcomes[qid],
            nodeids=nodeids[qid],
        )
        (regressed if rate < before[qid] else fixed).append(flip)
    return regressed, fixed


def _compare_leaderboard(
    this: Sequence[CaseResult],
    label: str,
    row: LeaderboardRow,
    dataset: Dataset,
    level: float,
    samples: int,
) -> BaselineComparison:
    """Unpaired: this run's interval against a published number (no per-query results)."""
    table: dict[str, dict[str, MetricComparison]] = {}
    for mode, metrics in LEADERBOARD_METRICS.items():
        mine = [c for c in this if c.mode == mode and c.outcome != "skipped"]
        if not mine:
            continue
        clusters = query_clusters(mine, dataset)
        matrix = stats.query_matrix(mode, list(clusters.values()))
        resampled = stats.bootstrap_draws(mode, matrix, samples=samples)
        bounds = stats.percentile_intervals(resampled, level)
        values = _point(mode, mine, dataset)
        rows = {}
        for metric in metrics:
            published = float(row.get(metric) or 0.0)
            this_value = values.get(metric)
            draws = resampled[metric]
            draws = draws[~np.isnan(draws)]
            # One-sided bootstrap p-value of "this run is below the published value".
            p_drop = (
                None
                if this_value is None or not draws.size
                else float((1 + np.sum(draws >= published)) / (1 + draws.size))
            )
            rows[metric] = MetricComparison(
                baseline=published,
                this=this_value,
                difference=None if this_value is None else this_value - published,
                ci=interval(bounds.get(metric), level, f"{stats.METHOD_CI} of this run"),
                p_value=None,
                p_drop=p_drop,
                test="bootstrap of this run against the published value (unpaired)",
            )
        table[mode] = rows
    queries = len({c.query_id for c in this})
    notes = []
    if queries != len(dataset) or len(dataset) != 229:
        notes.append(
            f"this run scored {queries} of the dataset's {len(dataset)} queries; the leaderboard "
            "row is over all 229 GTA queries, so the two are not directly comparable"
        )
    return BaselineComparison(
        kind="leaderboard",
        baseline=label,
        baseline_model=f"{row.model} (leaderboard {row.board})",
        board=row.board,
        paired=False,
        level=level,
        methods={"p_drop": "one-sided bootstrap p-value of this run against the row"},
        cases=PerMode[MatchedCases, MatchedCases](),
        differences=notes,
        metrics=_by_mode(table),
        flipped=Flipped(regressed=[], fixed=[]),
    )


def compare_run(
    report: RunReport,
    dataset: Dataset,
    *,
    baseline: Baseline | None,
    differences: Sequence[str],
    level: float,
    samples: int,
) -> None:
    """Add ``comparison`` (with a baseline) to a built report, and a note on what differs.

    Shared by the session's collector and ``--gta-merge``, so a merged run is compared exactly
    as a single run of the same cases would be.
    """
    if baseline is None:
        return
    report.comparison = compare(
        ordered(report.cases, dataset),
        baseline,
        dataset,
        level=level,
        samples=samples,
        differences=differences,
    )
    if differences:
        report.notes.append(
            f"the baseline {baseline.label} differs from this run ({'; '.join(differences)}); "
            f"compared anyway ({OPT_BASELINE_LENIENT})"
        )


def regressed_nodeids(comparison: BaselineComparison | None) -> list[str]:
    """This run's node ids of the regressed queries (``--gta-rerun-regressions`` reruns them)."""
    if comparison is None:
        return []
    return [nodeid for entry in comparison.flipped.regressed for nodeid in entry.nodeids]
