"""GTA's metrics over a run: the official evaluator's loop replayed over the cases' primitives.

The per-case half (:mod:`pytest_gta.scoring.metrics`) runs wherever a case ran; this half runs
on the controller alone, once every case is in, so that ``-n 0`` and ``-n 8`` give identical
numbers: the loop is replayed over the primitives in dataset order, with the same Python/NumPy
scalar types (``bool`` for matches, ``int`` 0 or ``float32`` similarities), so sums round
exactly as the official code's do.

Formula quirks kept on purpose (official ``GTABenchEvaluator.score``): F1 uses
``hit / (predicted + 1e-5)`` and ``2PR / (P + R + 1e-5)``, and its precision can exceed 1
because a reference call is a hit if its tool appears *anywhere* among the predictions.
Scikit-learn's precision/recall/F1 compute the textbook formulas and are therefore not used.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pytest_gta.scoring.metrics import E2ECaseScore, StepCaseScore, zero_by_category
from pytest_gta.vocabulary import CATEGORY_NAMES

STEP_METRICS = ("inst_acc", "tool_acc", "arg_acc", "summ_acc", "tool_call", "tool_call_error")
E2E_METRICS = (
    "ans_acc",
    "ans_acc_img",
    "p_f1",
    "o_f1",
    "l_f1",
    "c_f1",
    "tool_call",
    "tool_call_error",
)


def _pct(numerator: Any, denominator: int) -> float | None:
    if denominator == 0:
        return None
    return float(numerator / denominator * 100)


def aggregate_step(cases: Sequence[StepCaseScore]) -> dict[str, Any]:
    """InstAcc, ToolAcc, ArgAcc, SummAcc (percent) and call counts over cases in dataset order."""
    total_tool = total_answer = 0
    inst = tool_acc = arg_acc = tool_call = tool_call_error = 0
    answer_acc: Any = 0
    for case in cases:
        if case.has_answer_ref:
            total_answer += 1
        for step in case.steps:
            if step.inst_ok:
                inst += 1
            if step.gt_type == "tool":
                total_tool += 1
            if step.pred_type == "tool":
                tool_call += 1
                if step.error is not None:
                    tool_call_error += 1
            if step.tool_ok:
                tool_acc += 1
                if step.args_ok:
                    arg_acc += 1
            elif step.answer is not None:
                answer_acc += step.answer.native()
    return {
        "inst_acc": _pct(inst, total_tool + total_answer),
        "tool_acc": _pct(tool_acc, total_tool),
        "arg_acc": _pct(arg_acc, total_tool),
        "summ_acc": _pct(answer_acc, total_answer),
        "tool_call": tool_call,
        "tool_call_error": tool_call_error,
    }


def f1(hits: int, predicted: int, reference: int) -> float:
    """The official F1 in percent (see module docstring); 0 without reference calls."""
    precision = hits / (predicted + 1e-5)
    recall = hits / reference if reference else 0.0
    return 2 * precision * recall / (precision + recall + 1e-5) * 100


def aggregate_e2e(cases: Sequence[E2ECaseScore]) -> dict[str, Any]:
    """AnsAcc, Ans+I, the four category F1s (percent) and call counts, in dataset order."""
    total_all = total_answer = 0
    answer_acc: Any = 0
    answer_acc_img: Any = 0
    tool_call = tool_call_error = 0
    predicted, reference, hits = zero_by_category(), zero_by_category(), zero_by_category()
    for case in cases:
        total_all += 1
        if case.has_answer_ref:
            total_answer += 1
        if case.answer is not None:
            value = case.answer.native()
            answer_acc += value
            answer_acc_img += value
        if case.imggen is not None:
            answer_acc_img += case.imggen.native()
        tool_call += case.tool_calls
        tool_call_error += case.tool_call_errors
        for category in CATEGORY_NAMES:
            predicted[category] += case.predicted.get(category, 0)
            reference[category] += case.reference.get(category, 0)
            hits[category] += case.hits.get(category, 0)
    out: dict[str, Any] = {
        "ans_acc": _pct(answer_acc, total_answer),
        "ans_acc_img": _pct(answer_acc_img, total_all),
    }
    for category in CATEGORY_NAMES:
        out[f"{category[0]}_f1"] = f1(hits[category], predicted[category], reference[category])
    out["tool_call"] = tool_call
    out["tool_call_error"] = tool_call_error
    return out
