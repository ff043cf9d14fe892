"""A scored benchmark's run against others: its baseline, its gates, merged shards, comparisons.

Pure functions on :mod:`pytest_gta.results.scored`'s models, as :mod:`.baseline`,
:mod:`.gate_verdicts`, :mod:`.merge` and :mod:`.runs` are for GTA-Atomic: the comparison with
``--gta-baseline`` pairs the cases by id (a paired permutation test of each metric's per-case
difference, the bootstrap interval of its mean, the cases that flipped), the gates read the
metrics and that comparison, a merge takes every case once and recomputes the metrics.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from pytest_gta.gates import SCORED, GateSettings
from pytest_gta.report import stats
from pytest_gta.report.gate_verdicts import floor_verdict, gates_verdict
from pytest_gta.report.merge import shard_cases
from pytest_gta.report.workflow_baseline import regression_verdicts
from pytest_gta.results.report import GatesVerdict
from pytest_gta.results.scored import (
    PASS_RATE,
    ScoredCase,
    ScoredComparison,
    ScoredReport,
    ScoredRun,
    ScoredRuns,
)
from pytest_gta.results.workflow import WorkflowMetricDiff
from pytest_gta.scoring.scored import scored_metrics


def _value(case: ScoredCase, metric: str) -> float:
    """A case's contribution to ``metric``, in percent (an errored case's is 0)."""
    if metric == PASS_RATE:
        return 100.0 if case.passed else 0.0
    return 100.0 * (case.scores.get(metric) or 0.0)


def _counted(report: ScoredReport) -> dict[str, ScoredCase]:
    return {c.id: c for c in report.cases if c.outcome != "skipped"}


def compare(
    report: ScoredReport, baseline: ScoredReport, given: str, level: float, samples: int
) -> ScoredComparison:
    """This run against the baseline, paired by case id."""
    this, base = _counted(report), _counted(baseline)
    matched = [cid for cid in this if cid in base]
    metrics: dict[str, WorkflowMetricDiff] = {}
    for name in report.metrics:
        if name not in baseline.metrics:
            continue
        diffs = np.array([_value(this[c], name) - _value(base[c], name) for c in matched])
        test = stats.mean_permutation_test(diffs, samples=samples) if len(diffs) else None
        draws = stats.mean_bootstrap_draws(diffs, samples=samples)
        low, high = (None, None)
        if len(diffs):
            tail = (1.0 - level) / 2.0
            low, high = (float(np.nanquantile(draws, q)) for q in (tail, 1.0 - tail))
        metrics[name] = WorkflowMetricDiff(
            baseline=baseline.metrics[name],
            this=report.metrics[name],
            difference=float(diffs.mean()) if len(diffs) else None,
            ci_low=low,
            ci_high=high,
            p_value=None if test is None else test.p_value,
            p_drop=None if test is None else test.p_drop,
        )
    return ScoredComparison(
        baseline=given,
        baseline_label=baseline.label,
        level=level,
        matched=len(matched),
        only_this_run=sum(1 for c in this if c not in base),
        only_baseline=sum(1 for c in base if c not in this),
        metrics=metrics,
        regressed=[c for c in matched if base[c].passed and not this[c].passed],
        fixed=[c for c in matched if this[c].passed and not base[c].passed],
    )


def judge(report: ScoredReport, gates: GateSettings) -> GatesVerdict:
    """The gates' verdicts on a scored report (a metric not measured fails its floor)."""
    verdicts: list = [  # type: ignore[type-arg]
        floor_verdict(floor, report.metrics.get(floor.ref.metric), "by this run")
        for floor in gates.floors
    ]
    if gates.regression:
        found = report.comparison
        verdicts += regression_verdicts(
            None if found is None else found.metrics, gates, lambda name: f"{SCORED}.{name}"
        )
    return gates_verdict(verdicts, gates)


#: What every shard of one run has in common, as messages name it.
_SAME: tuple[tuple[str, Callable[[ScoredReport], object]], ...] = (
    ("benchmark", lambda r: r.benchmark),
    ("model", lambda r: r.model),
    ("dataset", lambda r: r.dataset),
)


def merge(reports: Sequence[tuple[str, ScoredReport]]) -> ScoredReport:
    """One report from the shards' (every case once, the metrics recomputed).

    Raises:
        GtaUsageError: reports of different runs, or a case in two of them.
    """
    first = reports[0][1]
    merged = shard_cases(reports, _SAME, lambda r: r.cases, "case")
    metrics, counted, errors = scored_metrics(merged)
    return ScoredReport(
        benchmark=first.benchmark,
        model=first.model,
        label=first.label,
        identity=first.identity,
        dataset=first.dataset,
        metrics=metrics,
        counted=counted,
        errors=errors,
        notes=list(dict.fromkeys(n for _, r in reports for n in r.notes)),
        merged_from=[label for label, _ in reports],
        cases=merged,
    )


def runs(reports: Sequence[tuple[str, ScoredReport]]) -> ScoredRuns:
    """``--gta-compare``: the runs' metrics side by side (labels made unique with ``#2``)."""
    seen: dict[str, int] = {}
    out = []
    notes = []
    for source, report in reports:
        seen[report.label] = seen.get(report.label, 0) + 1
        label = report.label if seen[report.label] == 1 else f"{report.label}#{seen[report.label]}"
        out.append(
            ScoredRun(label=label, source=source, model=report.model, metrics=report.metrics)
        )
    datasets = {r.dataset for _, r in reports}
    if len(datasets) > 1:
        notes.append(f"the runs' datasets differ ({', '.join(sorted(datasets))})")
    return ScoredRuns(benchmark=reports[0][1].benchmark, runs=out, notes=notes)
