"""The gates' options: floors on metrics, no significant regression, and how significant.

Its part of the settings is :class:`pytest_gta.gates.GateSettings` itself, which
:func:`pytest_gta.gates.judge` judges a finished report with (``--gta-merge`` included); this
module parses what the options say.
"""

from __future__ import annotations

import math

import pytest

from pytest_gta.flags import (
    OPT_ALPHA,
    OPT_BASELINE,
    OPT_FAIL_ON_REGRESSION,
    OPT_FAIL_UNDER,
    OPT_MIN_DROP,
    OPT_TOOL_FAULTS,
)
from pytest_gta.gates import (
    ALL,
    GATE_METRICS,
    PASS_RATE,
    RECOVERY,
    ROBUSTNESS,
    ROOT_SCORE_MAX,
    SCORED,
    WORKFLOW,
    WORKFLOW_GATE_METRICS,
    Floor,
    GateSettings,
    MetricRef,
    metric_names,
)
from pytest_gta.options.core import Feature, Given, OptionSpec, fields
from pytest_gta.vocabulary import MODES


def parse_metric(name: str, flag: str) -> MetricRef:
    """``ans_acc``, ``e2e.ans_acc``, ``step.pass_rate`` or ``root_score`` as a :class:`MetricRef`.

    The GTA-Workflow columns (``root_score``, ``root_sr``...) are accepted on any run; an
    atomic run refuses them at start-up, as a Workflow run refuses the atomic ones.
    """
    text = name.strip().lower()
    mode_text, dot, metric = text.rpartition(".")
    if not dot:
        metric = text
    if dot and mode_text == SCORED and metric.replace("_", "").isalnum():
        return MetricRef(SCORED, metric)
    if metric == RECOVERY and (not dot or mode_text == ROBUSTNESS):
        return MetricRef(ROBUSTNESS, RECOVERY)
    if metric in WORKFLOW_GATE_METRICS and (not dot or mode_text == WORKFLOW):
        return MetricRef(WORKFLOW, metric)
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
        if ref.metric == "root_score" and not 0 <= floor <= ROOT_SCORE_MAX:
            raise pytest.UsageError(
                f"{OPT_FAIL_UNDER}: {item!r}: root_score is 0-10 (the official score), so its "
                f"floor is from 0 to 10; e.g. {OPT_FAIL_UNDER}=root_score=4.0,root_sr=10"
            )
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
    if any(ref.mode == ROBUSTNESS for ref in refs):
        raise pytest.UsageError(
            f"{OPT_FAIL_ON_REGRESSION}: {RECOVERY} takes a floor ({OPT_FAIL_UNDER}={RECOVERY}=80); "
            "a drop under faults is gated on the metrics themselves against a clean baseline"
        )
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


ROWS: tuple[OptionSpec, ...] = (
    OptionSpec(
        OPT_FAIL_UNDER,
        "METRIC=VALUE,...",
        "gate: fail the run when a metric is below its floor (percent), e.g. "
        "ans_acc=45,tool_acc=60 (GTA-Workflow: root_score=4.0,root_sr=10); with any gate, "
        "gates and errors decide the exit status",
        parse=parse_fail_under,
        setting="floors",
        doc_default="none",
        doc="gate: a floor per metric in percent (`ans_acc=45,tool_acc=60`, `e2e.pass_rate=30`; "
        "on a GTA-Workflow run its columns, `root_score=4.0,root_sr=10`, Root Score 0-10); "
        "with any gate, the gates and errored cases decide the exit status",
        doc_range="0 to 100 percent per metric",
    ),
    OptionSpec(
        OPT_FAIL_ON_REGRESSION,
        "METRIC,...",
        f"gate: fail the run on a significant drop against {OPT_BASELINE}, in the named metrics "
        "or (the flag alone) in every metric both runs measured",
        kind="optional",
        parse=parse_fail_on_regression,
        const=ALL,
        setting="regression",
        doc_default="none",
        doc=f"gate: fail on a significant drop against `{OPT_BASELINE}` (one-sided, at "
        f"`{OPT_ALPHA}`), in the named metrics or, the flag alone, every metric both runs "
        "measured",
    ),
    OptionSpec(
        OPT_ALPHA,
        "ALPHA",
        f"significance level of {OPT_FAIL_ON_REGRESSION} (one-sided; default: 0.05)",
        parse=parse_alpha,
        default=0.05,
        setting="alpha",
        doc_default="`0.05`",
        doc=f"significance level of `{OPT_FAIL_ON_REGRESSION}`",
        doc_range="more than 0, less than 0.5",
    ),
    OptionSpec(
        OPT_MIN_DROP,
        "POINTS",
        "a regression must also drop more than this many points (default: 0)",
        parse=parse_min_drop,
        default=0.0,
        setting="min_drop",
        doc_default="`0`",
        doc="a regression must also drop more than this many points",
        doc_range="0 to 100 points",
    ),
)
FEATURE = Feature("gates", ROWS, {})


def settings(given: Given) -> GateSettings:
    """The gates of the run (none configured: pytest's exit status as usual)."""
    found = fields(ROWS, given)
    return GateSettings(
        floors=found["floors"] or (),
        regression=found["regression"] or (),
        alpha=found["alpha"],
        min_drop=found["min_drop"],
    )


def check_robustness(gates: GateSettings, faulted: bool) -> None:
    """Refuse a floor on ``recovery`` in a run without tool faults: it could never be measured.

    Raises:
        pytest.UsageError: naming the gate and the option it needs.
    """
    if not faulted and any(floor.ref.mode == ROBUSTNESS for floor in gates.floors):
        raise pytest.UsageError(
            f"{OPT_FAIL_UNDER}: {RECOVERY} is measured under tool faults only; add "
            f"{OPT_TOOL_FAULTS}=SPEC (see docs/robustness.md) or drop the gate"
        )
