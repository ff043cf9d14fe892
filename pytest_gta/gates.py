"""Gates: what decides a run's exit status when it is used as a model-CI check.

Every real model fails a large share of GTA's queries, so pytest's own exit status (1 when any
case failed) is red on every run and means nothing to a CI job. A gate says what a run must
reach instead: a floor on a metric (``--gta-fail-under=ans_acc=45``), or no significant drop
against a baseline run (``--gta-fail-on-regression``). When any gate is configured the gates and
harness errors decide the exit status (SPEC section 7); the cases' own outcomes stay in the
terminal and JUnit XML as they are.

This module judges a finished report (a plain dict, so the merged report of ``--gta-merge`` is
judged the same way); the numbers it reads are computed by :mod:`pytest_gta.report.baseline`,
the options are parsed by :mod:`pytest_gta.options.gates`. Standard library only: the settings
are built in every session.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypedDict

import pytest

from pytest_gta.flags import OPT_BASELINE, OPT_FAIL_ON_REGRESSION, OPT_MODE, OPT_REPORT
from pytest_gta.vocabulary import MODES, Mode

#: The official metrics a gate may name, with their mode (their names do not overlap).
GATE_METRICS: dict[str, Mode] = {
    "inst_acc": "step",
    "tool_acc": "step",
    "arg_acc": "step",
    "summ_acc": "step",
    "ans_acc": "e2e",
    "ans_acc_img": "e2e",
    "p_f1": "e2e",
    "o_f1": "e2e",
    "l_f1": "e2e",
    "c_f1": "e2e",
}
#: Not an official metric: the share of cases that passed (SPEC section 6), one per mode.
PASS_RATE = "pass_rate"
#: ``--gta-fail-on-regression`` without a value: every metric both runs measured.
ALL = "all"


@dataclass(frozen=True, order=True)
class MetricRef:
    """One metric of one mode (``e2e.ans_acc``); how gates and the comparison name it."""

    mode: Mode
    metric: str

    def __str__(self) -> str:
        return f"{self.mode}.{self.metric}"


def metric_names() -> list[str]:
    """Every name a gate accepts, for messages."""
    return [*GATE_METRICS, *(f"{m}.{PASS_RATE}" for m in MODES)]


@dataclass(frozen=True)
class Floor:
    """``--gta-fail-under``: the metric must reach ``value`` (percent)."""

    ref: MetricRef
    value: float


@dataclass(frozen=True)
class GateSettings:
    """The gates of a run (all empty: no gate, pytest's exit status as usual)."""

    floors: tuple[Floor, ...] = ()
    #: ``()``: no regression gate; :data:`ALL` or the named metrics.
    regression: tuple[MetricRef, ...] | str = ()
    alpha: float = 0.05
    min_drop: float = 0.0

    @property
    def active(self) -> bool:
        """Whether the gates, not the cases, decide the exit status."""
        return bool(self.floors or self.regression)

    def check_modes(self, modes: Sequence[str], baseline: bool) -> None:
        """Refuse at start-up what could never be judged (a metric of a mode not run)."""
        for ref in [f.ref for f in self.floors] + list(
            self.regression if isinstance(self.regression, tuple) else ()
        ):
            if ref.mode not in modes:
                raise pytest.UsageError(
                    f"pytest-gta: a gate names {ref}, but this run's modes are "
                    f"{','.join(modes)}; add {OPT_MODE}={','.join(sorted({*modes, ref.mode}))} "
                    "or drop the gate"
                )
        if self.regression and not baseline:
            raise pytest.UsageError(
                f"pytest-gta: {OPT_FAIL_ON_REGRESSION} needs a run to compare with: pass "
                f"{OPT_BASELINE}=PATH (a previous {OPT_REPORT}) or {OPT_BASELINE}=leaderboard:NAME"
            )


class GatesVerdict(TypedDict):
    """The report's ``gates`` section (:func:`judge`); the report schema names it ``Gates``."""

    passed: bool
    alpha: float
    min_drop: float
    #: Each gate with the numbers it was judged on, whether it held, and why.
    verdicts: list[dict[str, Any]]


def judge(report: Mapping[str, Any], gates: GateSettings) -> GatesVerdict:
    """The gates' verdicts on a report (with its ``comparison`` when there is a baseline).

    Returns the report's ``gates`` section: every gate with the numbers it was judged on,
    whether it held, and ``passed`` over all of them. A metric the run did not measure (its
    cases were all skipped) fails its gate: a gate that cannot be checked must not pass.
    """
    verdicts: list[dict[str, Any]] = []
    metrics = report.get("metrics", {})
    rates = report.get("pass_rate", {})
    for floor in gates.floors:
        value = _value(metrics, rates, floor.ref)
        held = value is not None and value >= floor.value
        verdicts.append(
            {
                "gate": "fail_under",
                "metric": str(floor.ref),
                "floor": floor.value,
                "value": value,
                "passed": held,
                "reason": (
                    f"{floor.ref} was not measured (no case of that mode ran)"
                    if value is None
                    else f"{floor.ref} = {value:.2f} {'>=' if held else '<'} {floor.value:g}"
                ),
            }
        )
    if gates.regression:
        verdicts += _regression_verdicts(report.get("comparison"), gates)
    return {
        "passed": all(v["passed"] for v in verdicts),
        "alpha": gates.alpha,
        "min_drop": gates.min_drop,
        "verdicts": verdicts,
    }


def _value(metrics: Mapping[str, Any], rates: Mapping[str, Any], ref: MetricRef) -> float | None:
    source = rates if ref.metric == PASS_RATE else metrics.get(ref.mode, {})
    value = source.get(ref.mode if ref.metric == PASS_RATE else ref.metric)
    return None if value is None else float(value)


def _regression_verdicts(comparison: Any, gates: GateSettings) -> list[dict[str, Any]]:
    if not isinstance(comparison, Mapping):
        return [
            {
                "gate": "fail_on_regression",
                "metric": ALL if isinstance(gates.regression, str) else "",
                "passed": False,
                "reason": "no comparison with the baseline could be made",
            }
        ]
    rows: dict[str, Mapping[str, Any]] = {
        f"{mode}.{metric}": row
        for mode, table in comparison.get("metrics", {}).items()
        for metric, row in table.items()
    }
    if isinstance(gates.regression, str):
        wanted = [name for name, row in rows.items() if row.get("difference") is not None]
    else:
        wanted = [str(ref) for ref in gates.regression]
    verdicts = []
    for name in wanted:
        row = rows.get(name)
        if row is None or row.get("difference") is None:
            verdicts.append(
                {
                    "gate": "fail_on_regression",
                    "metric": name,
                    "passed": False,
                    "reason": f"{name} could not be compared with the baseline",
                }
            )
            continue
        drop = -float(row["difference"])
        p_drop = row.get("p_drop")
        significant = p_drop is not None and float(p_drop) < gates.alpha
        regressed = significant and drop > gates.min_drop
        shown_p = "n/a" if p_drop is None else f"{float(p_drop):.4f}"
        reason = (
            f"{name} {row['this']:.2f} vs baseline {row['baseline']:.2f}: "
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
            {
                "gate": "fail_on_regression",
                "metric": name,
                "difference": -drop,
                "p_drop": p_drop,
                "passed": not regressed,
                "reason": reason,
            }
        )
    return verdicts


def gated_exit_status(report: Mapping[str, Any], current: int) -> int:
    """The exit status of a run with this report: pytest's own when it has no ``gates``."""
    gates = report.get("gates")
    if not isinstance(gates, Mapping):
        return current
    return exit_status(gates, int(report.get("outcomes", {}).get("error", 0)), current)


def exit_status(gates: Mapping[str, Any], errored: int, current: int) -> int:
    """The session's exit status when gates are configured (SPEC section 7).

    Args:
        gates: The report's ``gates`` section (:func:`judge`).
        errored: Cases that ended as errors (a broken harness or endpoint).
        current: pytest's own status; interruptions, usage and internal errors keep it.
    """
    if current not in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED):
        return current
    if errored or not gates.get("passed", False):
        return int(pytest.ExitCode.TESTS_FAILED)
    return int(pytest.ExitCode.OK)
