"""Gates: what decides a run's exit status when it is used as a model-CI check.

Every real model fails a large share of GTA's queries, so pytest's own exit status (1 when any
case failed) is red on every run and means nothing to a CI job. A gate says what a run must
reach instead: a floor on a metric (``--gta-fail-under=ans_acc=45``), or no significant drop
against a baseline run (``--gta-fail-on-regression``). When any gate is configured the gates and
harness errors decide the exit status (SPEC section 7); the cases' own outcomes stay in the
terminal and JUnit XML as they are.

This module holds what a gate is (:class:`GateSettings`); the options are parsed by
:mod:`pytest_gta.options.gates`, a finished report is judged by
:mod:`pytest_gta.report.gate_verdicts`. Standard library only: the settings are built in every
session.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

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
#: The GTA-Workflow table's columns a gate may name (a Workflow run's only gate metrics).
WORKFLOW_GATE_METRICS = (
    "root_score",
    "root_sr",
    "leaf_sr",
    "tool_sr",
    "p_sr",
    "o_sr",
    "l_sr",
    "c_sr",
)
#: The scope of a Workflow metric, beside the atomic modes.
WORKFLOW: Literal["workflow"] = "workflow"
#: The scope of a scored benchmark's metric (a third party's: ``scored.pass_rate``).
SCORED: Literal["scored"] = "scored"
#: The robustness axis's metric a floor may name (``--gta-fail-under=recovery=80``, percent):
#: the share of the cases that met a tool fault and still passed (``--gta-tool-faults``).
RECOVERY = "recovery"
#: The scope of :data:`RECOVERY`: any benchmark's run with tool faults.
ROBUSTNESS: Literal["robustness"] = "robustness"
#: Root Score is 0-10, not a percentage.
ROOT_SCORE_MAX = 10.0
#: Not an official metric: the share of cases that passed (SPEC section 6), one per mode.
PASS_RATE = "pass_rate"
#: ``--gta-fail-on-regression`` without a value: every metric both runs measured.
ALL = "all"


@dataclass(frozen=True, order=True)
class MetricRef:
    """One metric of one mode (``e2e.ans_acc``); how gates and the comparison name it."""

    mode: Mode | Literal["workflow", "scored", "robustness"]
    metric: str

    def __str__(self) -> str:
        bare = self.mode in (WORKFLOW, ROBUSTNESS)
        return self.metric if bare else f"{self.mode}.{self.metric}"


def atomic_metric_names() -> list[str]:
    """The names a GTA-Atomic run's gates accept, for messages."""
    return [*GATE_METRICS, *(f"{m}.{PASS_RATE}" for m in MODES)]


def metric_names() -> list[str]:
    """Every name a gate accepts, for messages."""
    return [*atomic_metric_names(), *WORKFLOW_GATE_METRICS, f"{SCORED}.NAME", RECOVERY]


def _refs(gates: GateSettings) -> list[MetricRef]:
    named = gates.regression if isinstance(gates.regression, tuple) else ()
    return [f.ref for f in gates.floors] + list(named)


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
        for ref in _refs(self):
            if ref.mode == ROBUSTNESS:
                continue
            if ref.mode in (WORKFLOW, SCORED):
                kind = "GTA-Workflow" if ref.mode == WORKFLOW else "scored benchmark's"
                raise pytest.UsageError(
                    f"pytest-gta: a gate names {ref}, a {kind} metric, but this is a "
                    f"GTA-Atomic run; its gates take {', '.join(atomic_metric_names())}"
                )
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

    def check_workflow(self, baseline: bool) -> None:
        """Refuse at start-up, on a GTA-Workflow run, a gate naming an atomic metric."""
        for ref in _refs(self):
            if ref.mode not in (WORKFLOW, ROBUSTNESS):
                kind = "scored benchmark's" if ref.mode == SCORED else "GTA-Atomic"
                raise pytest.UsageError(
                    f"pytest-gta: a gate names {ref}, a {kind} metric, but this is a "
                    f"GTA-Workflow run; its gates take {', '.join(WORKFLOW_GATE_METRICS)}"
                )
        if self.regression and not baseline:
            raise pytest.UsageError(
                f"pytest-gta: {OPT_FAIL_ON_REGRESSION} needs a run to compare with: pass "
                f"{OPT_BASELINE}=PATH (a previous GTA-Workflow {OPT_REPORT}) or "
                f"{OPT_BASELINE}=leaderboard:NAME"
            )

    def check_scored(self, benchmark: str, baseline: bool) -> None:
        """Refuse at start-up, on a scored benchmark's run, a gate naming a GTA metric."""
        for ref in _refs(self):
            if ref.mode != SCORED:
                raise pytest.UsageError(
                    f"pytest-gta: a gate names {ref}, a GTA metric, but this is a run of the "
                    f"{benchmark} benchmark; its gates take {SCORED}.NAME (a score's name, or "
                    f"{SCORED}.{PASS_RATE})"
                )
        if self.regression and not baseline:
            raise pytest.UsageError(
                f"pytest-gta: {OPT_FAIL_ON_REGRESSION} needs a run to compare with: pass "
                f"{OPT_BASELINE}=PATH (a previous {OPT_REPORT} of the {benchmark} benchmark)"
            )
