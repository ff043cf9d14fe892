"""Gates: what decides a run's exit status when it is used as a model-CI check.

Every real model fails a large share of GTA's queries, so pytest's own exit status (1 when any
case failed) is red on every run and means nothing to a CI job. A gate says what a run must
reach instead: a floor on a metric (``--gta-fail-under=ans_acc=45``), or no significant drop
against a baseline run (``--gta-fail-on-regression``). When any gate is configured the gates and
harness errors decide the exit status (SPEC section 7); the cases' own outcomes stay in the
terminal and JUnit XML as they are.

This module parses the options into :class:`GateSettings`; judging a finished report is
:mod:`pytest_gta.report.gate_verdicts`; the numbers it reads are computed by
:mod:`pytest_gta.report.baseline`. Standard library only: the options are parsed in every
session.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import pytest

from pytest_gta.vocabulary import MODES, Mode

OPT_FAIL_UNDER = "--gta-fail-under"
OPT_FAIL_ON_REGRESSION = "--gta-fail-on-regression"
OPT_ALPHA = "--gta-alpha"
OPT_MIN_DROP = "--gta-min-drop"

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


def parse_metric(name: str, flag: str) -> MetricRef:
    """``ans_acc``, ``e2e.ans_acc`` or ``step.pass_rate`` as a :class:`MetricRef`."""
    text = name.strip().lower()
    mode_text, dot, metric = text.rpartition(".")
    if not dot:
        metric = text
    if metric in GATE_METRICS and (not dot or mode_text == GATE_METRICS[metric]):
        return MetricRef(GATE_METRICS[metric], metric)
    if metric == PASS_RATE and mode_text in MODES:
        return MetricRef("step" if mode_text == "step" else "e2e", PASS_RATE)
    hint = ""
    if metric == PASS_RATE:
        hint = " (pass_rate needs its mode: step.pass_rate or e2e.pass_rate)"
    elif metric in GATE_METRICS:
        hint = f" ({metric} is a {GATE_METRICS[metric]}-mode metric)"
    raise pytest.UsageError(
        f"{flag}: unknown metric {name.strip()!r}{hint}; choose from {', '.join(metric_names())}"
    )


def _float(text: str) -> float:
    """``text`` as a number; NaN (which fails every range check) when it is not one."""
    try:
        return float(text)
    except ValueError:
        return math.nan


@dataclass(frozen=True)
class Floor:
    """``--gta-fail-under``: the metric must reach ``value`` (percent)."""

    ref: MetricRef
    value: float


def parse_fail_under(value: str) -> tuple[Floor, ...]:
    """``METRIC=VALUE[,...]`` in percent, e.g. ``ans_acc=45,tool_acc=60``."""
    floors: list[Floor] = []
    example = f"e.g. {OPT_FAIL_UNDER}=ans_acc=45,tool_acc=60"
    for item in (part.strip() for part in value.split(",")):
        if not item:
            continue
        name, eq, number = item.partition("=")
        if not eq:
            raise pytest.UsageError(f"{OPT_FAIL_UNDER}: {item!r} is not METRIC=VALUE; {example}")
        ref = parse_metric(name, OPT_FAIL_UNDER)
        floor = _float(number)
        if not 0 <= floor <= 100:
            raise pytest.UsageError(
                f"{OPT_FAIL_UNDER}: {item!r}: the floor is a percentage from 0 to 100; {example}"
            )
        if any(f.ref == ref for f in floors):
            raise pytest.UsageError(f"{OPT_FAIL_UNDER}: {ref} is given twice")
        floors.append(Floor(ref, floor))
    if not floors:
        raise pytest.UsageError(f"{OPT_FAIL_UNDER} is empty; {example}")
    return tuple(floors)


def parse_fail_on_regression(value: str) -> tuple[MetricRef, ...] | str:
    """``all`` (the flag alone) or ``METRIC[,...]``: which metrics must not drop significantly."""
    if value.strip().lower() == ALL:
        return ALL
    try:
        refs = [parse_metric(n, OPT_FAIL_ON_REGRESSION) for n in value.split(",") if n.strip()]
    except pytest.UsageError as exc:
        # The value is optional, so argparse takes a path that follows the bare flag as one.
        raise pytest.UsageError(
            f"{exc} (for every metric write {OPT_FAIL_ON_REGRESSION}=all, or put the bare flag "
            "after the paths)"
        ) from None
    if not refs:
        raise pytest.UsageError(
            f"{OPT_FAIL_ON_REGRESSION}: give metrics, e.g. {OPT_FAIL_ON_REGRESSION}=ans_acc,"
            "tool_acc, or the flag alone for every metric"
        )
    return tuple(dict.fromkeys(refs))


def parse_alpha(value: str) -> float:
    """A significance level strictly between 0 and 0.5."""
    alpha = _float(value)
    if not 0 < alpha < 0.5:
        raise pytest.UsageError(
            f"{OPT_ALPHA}={value}: give a significance level between 0 and 0.5, e.g. 0.05"
        )
    return alpha


def parse_min_drop(value: str) -> float:
    """Points (of a percentage metric) a drop must exceed to fail the gate."""
    drop = _float(value)
    if not 0 <= drop <= 100:
        raise pytest.UsageError(
            f"{OPT_MIN_DROP}={value}: give points from 0 to 100, e.g. {OPT_MIN_DROP}=2"
        )
    return drop


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
                    f"{','.join(modes)}; add --gta-mode={','.join(sorted({*modes, ref.mode}))} "
                    "or drop the gate"
                )
        if self.regression and not baseline:
            raise pytest.UsageError(
                f"pytest-gta: {OPT_FAIL_ON_REGRESSION} needs a run to compare with: pass "
                "--gta-baseline=PATH (a previous --gta-report) or --gta-baseline=leaderboard:NAME"
            )
