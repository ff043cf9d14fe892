"""The gates' verdict on a finished report, and the exit status it gives (SPEC section 7).

:mod:`pytest_gta.gates` parses the options (standard library only: every session parses them);
here a typed report is judged, so a session's report and the merged report of ``--gta-merge``
are judged by the same code. The numbers it reads are computed by
:mod:`pytest_gta.report.baseline` and :mod:`pytest_gta.report.build`.
"""

from __future__ import annotations

from typing import Any

import pytest

from pytest_gta.gates import ALL, PASS_RATE, ROBUSTNESS, Floor, GateSettings, MetricRef
from pytest_gta.report.robustness import robustness_value
from pytest_gta.results.report import (
    BaselineComparison,
    FloorVerdict,
    GatesVerdict,
    RegressionVerdict,
    RunReport,
)


def judge(report: RunReport, gates: GateSettings) -> GatesVerdict:
    """The gates' verdicts on a report (with its ``comparison`` when there is a baseline).

    Returns the report's ``gates`` section: every gate with the numbers it was judged on,
    whether it held, and ``passed`` over all of them. A metric the run did not measure (its
    cases were all skipped) fails its gate: a gate that cannot be checked must not pass.
    """
    verdicts: list[FloorVerdict | RegressionVerdict] = [
        floor_verdict(floor, _value(report, floor.ref), "no case of that mode ran")
        for floor in gates.floors
    ]
    if gates.regression:
        verdicts += _regression_verdicts(report.comparison, gates)
    return gates_verdict(verdicts, gates)


def floor_verdict(floor: Floor, value: float | None, unmeasured: str) -> FloorVerdict:
    """A ``--gta-fail-under`` floor's verdict (a value not measured fails, ``unmeasured`` why)."""
    held = value is not None and value >= floor.value
    return FloorVerdict(
        gate="fail_under",
        metric=str(floor.ref),
        floor=floor.value,
        value=value,
        passed=held,
        reason=(
            f"{floor.ref} was not measured ({unmeasured})"
            if value is None
            else f"{floor.ref} = {value:.2f} {'>=' if held else '<'} {floor.value:g}"
        ),
    )


def gates_verdict(
    verdicts: list[FloorVerdict | RegressionVerdict], gates: GateSettings
) -> GatesVerdict:
    """The gates' verdict: every one held, with the settings that judged them."""
    return GatesVerdict(
        passed=all(v.passed for v in verdicts),
        alpha=gates.alpha,
        min_drop=gates.min_drop,
        verdicts=verdicts,
    )


def _value(report: RunReport, ref: MetricRef) -> float | None:
    if ref.mode == ROBUSTNESS:
        return robustness_value(report.robustness, ref.metric)
    if ref.metric == PASS_RATE:
        value: Any = report.pass_rate.get(ref.mode)
    else:
        metrics = report.metrics.get(ref.mode)
        value = getattr(metrics, ref.metric, None) if metrics is not None else None
    return None if value is None else float(value)


def _not_compared(metric: str, reason: str) -> RegressionVerdict:
    return RegressionVerdict(gate="fail_on_regression", metric=metric, passed=False, reason=reason)


def _regression_verdicts(
    comparison: BaselineComparison | None, gates: GateSettings
) -> list[RegressionVerdict]:
    if comparison is None:
        metric = ALL if isinstance(gates.regression, str) else ""
        return [_not_compared(metric, "no comparison with the baseline could be made")]
    rows = {
        f"{mode}.{metric}": row
        for mode, table in comparison.metrics.items()
        for metric, row in table.items()
    }
    if isinstance(gates.regression, str):
        wanted = [name for name, row in rows.items() if row.difference is not None]
    else:
        wanted = [str(ref) for ref in gates.regression]
    verdicts = []
    for name in wanted:
        row = rows.get(name)
        if row is None or row.difference is None or row.this is None or row.baseline is None:
            verdicts.append(_not_compared(name, f"{name} could not be compared with the baseline"))
            continue
        drop = -float(row.difference)
        p_drop = row.p_drop
        significant = p_drop is not None and float(p_drop) < gates.alpha
        regressed = significant and drop > gates.min_drop
        shown_p = "n/a" if p_drop is None else f"{float(p_drop):.4f}"
        reason = (
            f"{name} {row.this:.2f} vs baseline {row.baseline:.2f}: "
            f"{-drop:+.2f} points, p(drop) = {shown_p}"
        )
        if regressed:
            reason += f" < alpha {gates.alpha:g}"
            if gates.min_drop:
                reason += f" and the drop exceeds {gates.min_drop:g} points"
            reason += ": a significant regression"
        elif significant:
            reason += f": significant, but not more than {gates.min_drop:g} points"
        else:
            reason += ": no significant drop"
        verdicts.append(
            RegressionVerdict(
                gate="fail_on_regression",
                metric=name,
                difference=-drop,
                p_drop=p_drop,
                passed=not regressed,
                reason=reason,
            )
        )
    return verdicts


def final_status(gates: GatesVerdict | None, errored: int, current: int, write_failed: bool) -> int:
    """A finished run's exit status, for any benchmark's report.

    The gates' (:func:`exit_status`) when it has any, pytest's own else; and not 0 when a file
    it was asked for could not be written.
    """
    status = current if gates is None else exit_status(gates, errored, current)
    if write_failed and status == pytest.ExitCode.OK:
        status = int(pytest.ExitCode.TESTS_FAILED)
    return status


def exit_status(gates: GatesVerdict, errored: int, current: int) -> int:
    """The session's exit status when gates are configured (SPEC section 7).

    Args:
        gates: The report's ``gates`` section (:func:`judge`).
        errored: Cases that ended as errors (a broken harness or endpoint).
        current: pytest's own status; interruptions, usage and internal errors keep it.
    """
    if current not in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED):
        return current
    if errored or not gates.passed:
        return int(pytest.ExitCode.TESTS_FAILED)
    return int(pytest.ExitCode.OK)
