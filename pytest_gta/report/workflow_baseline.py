"""A GTA-Workflow run against ``--gta-baseline``, and its gates' verdicts.

A baseline report is paired with this run task by task (a task repeated with ``--gta-epochs``
counts once: its mean root score, passed when every epoch passed): the mean per-task root-score
difference with a paired bootstrap interval and the paired permutation test of
:mod:`pytest_gta.report.stats`, Root SR's difference with the exact McNemar test on the tasks
that flipped, and the other columns as the difference of the two tables (no test: they are
ratios over leaves, calls or categories, not per-task values). A leaderboard row is unpaired:
this run's interval and a one-sided bootstrap p-value against the published number, as for
atomic runs.

The gates read the finished report: a floor on a column of its table, no significant drop
in the comparison; :func:`pytest_gta.report.gate_verdicts.exit_status` turns the verdict into
the exit status.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from pytest_gta.flags import OPT_BASELINE, OPT_LEADERBOARD_ROWS, OPT_REPORT
from pytest_gta.gates import ALL, ROBUSTNESS, GateSettings
from pytest_gta.models.catalog import LEADERBOARD_PREFIX
from pytest_gta.report import stats
from pytest_gta.report.gate_verdicts import floor_verdict, gates_verdict
from pytest_gta.report.robustness import robustness_value
from pytest_gta.results.io import expect_benchmark, read_report_data
from pytest_gta.results.report import FloorVerdict, GatesVerdict, RegressionVerdict
from pytest_gta.results.workflow import BENCHMARK as WORKFLOW
from pytest_gta.results.workflow import (
    WorkflowCase,
    WorkflowComparison,
    WorkflowFlip,
    WorkflowMetricDiff,
    WorkflowReport,
    parse_workflow_report,
)
from pytest_gta.results.workflow_board import (
    METRICS,
    WorkflowBoardRow,
    find_row,
    select_rows,
)

Baseline = WorkflowReport | WorkflowBoardRow
#: The columns tested per task; the others are the difference of the two tables.
PAIRED = ("root_score", "root_sr")
UNPAIRED_TEST = "difference of the two tables (no per-task test)"


def load_baseline(spec: str, given: str) -> Baseline:
    """``--gta-baseline``: a previous Workflow report, or ``leaderboard:NAME[@BOARD]``.

    Raises:
        GtaUsageError: not a Workflow report (an atomic one included), or an unknown row.
    """
    if spec.startswith(LEADERBOARD_PREFIX):
        return find_row(spec.removeprefix(LEADERBOARD_PREFIX), f"{OPT_BASELINE}={given}")
    named = f"{OPT_BASELINE} {given}"
    data = read_report_data(Path(spec), named, f"{OPT_BASELINE} reads a {OPT_REPORT} file")
    expect_benchmark(data, named, WORKFLOW, "this run")
    return parse_workflow_report(named, data)


def leaderboard_rows(names: Sequence[str]) -> list[WorkflowBoardRow]:
    """``--gta-leaderboard-rows`` on a Workflow run (or compare): the rows, in order."""
    return select_rows(names, OPT_LEADERBOARD_ROWS) if names else []


@dataclass(frozen=True)
class _Task:
    score: float | None
    passed: bool


def _tasks(report: WorkflowReport) -> dict[str, _Task]:
    """Each counted task (skipped ones are not), epochs folded into one."""
    cases: dict[str, list[WorkflowCase]] = {}
    for case in report.cases:
        if case.outcome != "skipped":
            cases.setdefault(case.task_id, []).append(case)
    out = {}
    for task, runs in cases.items():
        scores = [c.root_score for c in runs if c.root_score is not None]
        out[task] = _Task(
            score=sum(scores) / len(scores) if scores else None,
            passed=all(c.passed for c in runs),
        )
    return out


def _interval(draws: np.ndarray, level: float) -> tuple[float | None, float | None]:
    bounds = stats.percentile_intervals({"d": draws}, level)["d"]
    return (None, None) if bounds is None else bounds


def _column(this: WorkflowReport, metric: str) -> float | None:
    value = getattr(this.metrics, metric)
    return None if value is None else float(value)


def compare_report(
    this: WorkflowReport, base: WorkflowReport, label: str, level: float, samples: int
) -> WorkflowComparison:
    """Paired by task (see the module docstring)."""
    mine, theirs = _tasks(this), _tasks(base)
    common = [t for t in mine if t in theirs]
    scored = [t for t in common if mine[t].score is not None and theirs[t].score is not None]
    diffs = np.array([(mine[t].score or 0.0) - (theirs[t].score or 0.0) for t in scored])
    metrics: dict[str, WorkflowMetricDiff] = {}
    if scored:
        test = stats.mean_permutation_test(diffs, samples=samples)
        low, high = _interval(stats.mean_bootstrap_draws(diffs, samples=samples), level)
        metrics["root_score"] = WorkflowMetricDiff(
            baseline=sum(theirs[t].score or 0.0 for t in scored) / len(scored),
            this=sum(mine[t].score or 0.0 for t in scored) / len(scored),
            difference=float(diffs.mean()),
            ci_low=low,
            ci_high=high,
            p_value=None if test is None else test.p_value,
            p_drop=None if test is None else test.p_drop,
            test=f"{stats.METHOD_TEST.replace('queries', 'tasks')} (mean root score)",
        )
    regressed = [t for t in common if theirs[t].passed and not mine[t].passed]
    fixed = [t for t in common if mine[t].passed and not theirs[t].passed]
    if common:
        flips = stats.mcnemar(len(regressed), len(fixed))
        wins = np.array([float(mine[t].passed) - float(theirs[t].passed) for t in common])
        low, high = _interval(100.0 * stats.mean_bootstrap_draws(wins, samples=samples), level)
        metrics["root_sr"] = WorkflowMetricDiff(
            baseline=100.0 * sum(theirs[t].passed for t in common) / len(common),
            this=100.0 * sum(mine[t].passed for t in common) / len(common),
            difference=100.0 * float(wins.mean()),
            ci_low=low,
            ci_high=high,
            p_value=flips.p_value,
            p_drop=flips.p_drop,
            test="exact McNemar test on the tasks that flipped",
        )
    for metric in METRICS:
        if metric not in metrics:
            a, b = _column(this, metric), _column(base, metric)
            metrics[metric] = WorkflowMetricDiff(
                baseline=b,
                this=a,
                difference=None if a is None or b is None else a - b,
                test=UNPAIRED_TEST,
            )
    return WorkflowComparison(
        kind="report",
        baseline=label,
        baseline_model=base.label or base.model,
        paired=True,
        level=level,
        matched=len(scored),
        only_this_run=len([t for t in mine if t not in theirs]),
        only_baseline=len([t for t in theirs if t not in mine]),
        mean_difference=float(diffs.mean()) if scored else None,
        metrics=metrics,
        regressed=[_flip(t, mine, theirs) for t in regressed],
        fixed=[_flip(t, mine, theirs) for t in fixed],
        notes=_notes(this, base),
    )


def _flip(task: str, mine: dict[str, _Task], theirs: dict[str, _Task]) -> WorkflowFlip:
    return WorkflowFlip(
        task_id=task, baseline_score=theirs[task].score, root_score=mine[task].score
    )


def _notes(this: WorkflowReport, base: WorkflowReport) -> list[str]:
    notes = []
    for what, a, b in (
        ("dataset", this.dataset, base.dataset),
        ("judge", this.judge.model, base.judge.model),
        ("judge protocol (official)", this.judge.official, base.judge.official),
        ("threshold", this.judge.threshold, base.judge.threshold),
    ):
        if a != b:
            notes.append(f"the baseline's {what} differs: {b} (this run: {a})")
    return notes


def compare_row(
    this: WorkflowReport, row: WorkflowBoardRow, label: str, level: float, samples: int
) -> WorkflowComparison:
    """Unpaired: this run's interval against the published row, column by column."""
    tasks = _tasks(this)
    per_task = {
        "root_score": [t.score for t in tasks.values() if t.score is not None],
        "root_sr": [100.0 * t.passed for t in tasks.values()],
    }
    metrics: dict[str, WorkflowMetricDiff] = {}
    for metric in METRICS:
        published, mine = row.value(metric), _column(this, metric)
        diff = WorkflowMetricDiff(
            baseline=published,
            this=mine,
            difference=None if published is None or mine is None else mine - published,
            test="difference from the published value (no test)",
        )
        values = per_task.get(metric)
        if values and published is not None and mine is not None:
            draws = stats.mean_bootstrap_draws(values, samples=samples)
            diff.ci_low, diff.ci_high = _interval(draws, level)
            diff.p_drop = float((1 + np.sum(draws >= published)) / (1 + draws.size))
            diff.test = "bootstrap of this run against the published value (unpaired)"
        metrics[metric] = diff
    counted = len(tasks)
    over = f"a {row.tasks}-task subset" if row.tasks else "the whole GTA-Workflow set"
    notes = [
        f"this run counted {counted} tasks; the published row is over {over}, judged by the "
        "authors' judge, so the two are not directly comparable"
    ]
    root = metrics["root_score"].difference
    return WorkflowComparison(
        kind="leaderboard",
        baseline=label,
        baseline_model=f"{row.label} (GTA-Workflow {row.table} board)",
        board=row.board,
        paired=False,
        level=level,
        matched=0,
        only_this_run=counted,
        only_baseline=0,
        mean_difference=root,
        metrics=metrics,
        regressed=[],
        fixed=[],
        notes=notes,
    )


def compare(
    this: WorkflowReport, baseline: Baseline, label: str, level: float, samples: int
) -> WorkflowComparison:
    """The run against a report (paired) or a published row (unpaired)."""
    if isinstance(baseline, WorkflowReport):
        return compare_report(this, baseline, label, level, samples)
    return compare_row(this, baseline, label, level, samples)


# --------------------------------------------------------------------------------------------
# Gates


def judge(report: WorkflowReport, gates: GateSettings) -> GatesVerdict:
    """The gates' verdicts on a Workflow report (a column not measured fails its floor)."""
    verdicts: list[FloorVerdict | RegressionVerdict] = [
        floor_verdict(
            floor,
            robustness_value(report.robustness, floor.ref.metric)
            if floor.ref.mode == ROBUSTNESS
            else _column(report, floor.ref.metric),
            "by this run",
        )
        for floor in gates.floors
    ]
    if gates.regression:
        found = report.comparison
        verdicts += regression_verdicts(None if found is None else found.metrics, gates)
    return gates_verdict(verdicts, gates)


def regression_verdicts(
    metrics: Mapping[str, WorkflowMetricDiff] | None,
    gates: GateSettings,
    named: Callable[[str], str] = str,
) -> list[RegressionVerdict]:
    """``--gta-fail-on-regression`` on a comparison's paired differences (``None``: none made).

    A GTA-Workflow run's and a scored benchmark's (``named`` gives the verdict's metric name,
    ``scored.exact``): every tested metric, or the ones the gate names.
    """
    if metrics is None:
        return [
            RegressionVerdict(
                gate="fail_on_regression",
                metric=ALL,
                passed=False,
                reason="no comparison with the baseline could be made",
            )
        ]
    if isinstance(gates.regression, str):
        wanted = [m for m, row in metrics.items() if row.p_drop is not None]
    else:
        wanted = [ref.metric for ref in gates.regression]
    verdicts = []
    for name in wanted:
        row = metrics.get(name)
        if row is None or row.difference is None or row.this is None or row.baseline is None:
            verdicts.append(
                RegressionVerdict(
                    gate="fail_on_regression",
                    metric=named(name),
                    passed=False,
                    reason=f"{name} could not be compared with the baseline",
                )
            )
            continue
        significant = row.p_drop is not None and row.p_drop < gates.alpha
        regressed = significant and -row.difference > gates.min_drop
        shown = "n/a (no test)" if row.p_drop is None else f"{row.p_drop:.4f}"
        reason = (
            f"{name} {row.this:.2f} vs baseline {row.baseline:.2f}: {row.difference:+.2f}, "
            f"p(drop) = {shown}"
        )
        if regressed:
            reason += f" < alpha {gates.alpha:g}: a significant regression"
        elif significant:
            reason += f": significant, but not more than {gates.min_drop:g} down"
        else:
            reason += ": no significant drop"
        verdicts.append(
            RegressionVerdict(
                gate="fail_on_regression",
                metric=named(name),
                difference=row.difference,
                p_drop=row.p_drop,
                passed=not regressed,
                reason=reason,
            )
        )
    return verdicts
