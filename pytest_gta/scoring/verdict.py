"""Pass/fail of one case, and the message that explains a failure.

The metrics stay continuous; a case needs a yes/no for pytest. The rules (SPEC section 6):
objective answers pass when ``iscorrect``; subjective when the similarity reaches
``--gta-sim-threshold``; image-generation queries when every reference image tool was called
without error (Ans+I factor > 0); a step-mode case when every step matched type, tool and
arguments and the summary passed by the same rules. A failure message says what was expected,
what came instead, and where the first divergence is.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from pytest_gta.dataset import call_function
from pytest_gta.flags import OPT_SIM_THRESHOLD
from pytest_gta.outward import clip
from pytest_gta.results.case import AnswerCheck, Verdict
from pytest_gta.scoring.answer import blacklist_hit, whitelist_hits
from pytest_gta.scoring.metrics import (
    E2ECaseScore,
    Score,
    StepCaseScore,
    StepOutcome,
    missing_imagegen_tool,
    response_type,
)

_CLIP = 240


def _clip(text: str, limit: int = _CLIP) -> str:
    return clip(text, limit)


def describe(step: Mapping[str, Any]) -> str:
    """A one-line description of a recorded or reference step."""
    kind, body = response_type(step)
    if kind == "tool":
        if not isinstance(body, Mapping):
            # a call paired with an answer in step mode: never looked into (see check_steps)
            return _clip(f"call {body!r}")
        args = body.get("arguments")
        shown = args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)
        text = f"call {body.get('name')} {shown}"
        error = step.get("error")
        if isinstance(error, Mapping):
            text += f" -> {error.get('type')}: {error.get('msg')}"
        return _clip(text)
    if kind == "answer":
        return _clip(f"answer {str(body)!r}")
    return "tool output"


def answer_passes(ref: Any, score: Score | None, threshold: float) -> bool:
    """Whether an answer passes (the pass rule of SPEC section 6, which messages explain).

    Objective references pass on ``iscorrect``, subjective ones when the similarity reaches
    ``threshold``; with no text reference (image queries) there is nothing to fail.
    """
    if isinstance(ref, dict):
        return score is not None and bool(score.native())
    if isinstance(ref, list):
        return (0.0 if score is None else score.value) >= threshold
    return True


def _answer_problem(pred: str, ref: Any, score: Score | None, threshold: float) -> str | None:
    """Why an answer fails, or ``None`` if it passes."""
    if answer_passes(ref, score, threshold):
        return None
    if isinstance(ref, dict):
        missing = [
            group
            for group, hit in zip(ref["whitelist"], whitelist_hits(pred, ref), strict=True)
            if not hit
        ]
        if missing:
            return f"expected the answer to mention one of {missing[0]!r}; got {_clip(repr(pred))}"
        return (
            f"the answer contains the blacklisted {blacklist_hit(pred, ref)!r}: {_clip(repr(pred))}"
        )
    value = 0.0 if score is None else score.value
    return (
        f"similarity to the reference answers {value:.3f} < {OPT_SIM_THRESHOLD} "
        f"{threshold}; got {_clip(repr(pred))}; closest reference {_clip(repr(ref[0]), 120)}"
    )


def _score_value(score: Score | None) -> float:
    return 0.0 if score is None else score.value


def step_diverges(outcome: StepOutcome, ref: Any, threshold: float) -> bool:
    """Whether a step-mode step is wrong: the one decision behind a step-mode verdict.

    Wrong is another kind of step, an error, another tool, other arguments, or a summary that
    fails :func:`answer_passes`. :func:`judge_step` explains the steps this flags and points
    its ``turn`` at the first of them (:func:`first_divergence`); the HTML report marks that
    same step, so the page and the failure message cannot disagree.
    """
    if outcome.pred_type != outcome.gt_type or outcome.error is not None:
        return True
    if outcome.gt_type == "tool":
        return not (outcome.tool_ok and outcome.args_ok)
    return not answer_passes(ref, outcome.answer, threshold)


def first_divergence(scored: StepCaseScore, ref: Any, threshold: float) -> int | None:
    """Index of the first step :func:`step_diverges` flags (``Verdict.turn`` in step mode)."""
    return next(
        (n for n, outcome in enumerate(scored.steps) if step_diverges(outcome, ref, threshold)),
        None,
    )


def _step_problem(
    n: int,
    total: int,
    outcome: StepOutcome,
    pred: Mapping[str, Any],
    gold: Mapping[str, Any],
    ref: Any,
    threshold: float,
) -> str | None:
    if not step_diverges(outcome, ref, threshold):
        return None
    where = f"step {n}/{total}"
    if outcome.pred_type != outcome.gt_type:
        return f"{where}: expected {describe(gold)}; got {describe(pred)}"
    if outcome.error is not None:
        return f"{where}: {describe(pred)} (expected {describe(gold)})"
    if outcome.gt_type == "tool":
        if not outcome.tool_ok:
            return f"{where}: expected {describe(gold)}; the model called {describe(pred)}"
        return f"{where}: arguments differ: expected {describe(gold)}; got {describe(pred)}"
    problem = _answer_problem(str(response_type(pred)[1]), ref, outcome.answer, threshold)
    return f"{where} (summary): {problem}"


def judge_step(
    predictions: Sequence[Mapping[str, Any]],
    gold: Sequence[Mapping[str, Any]],
    ref: Any,
    scored: StepCaseScore,
    threshold: float,
) -> Verdict:
    """Verdict of a step-mode case; the score is the mean over steps of their match."""
    problems = []
    values = []
    for n, (outcome, pred, gt) in enumerate(
        zip(scored.steps, predictions, gold, strict=False), start=1
    ):
        problem = _step_problem(n, len(gold), outcome, pred, gt, ref, threshold)
        if problem is not None:
            problems.append(problem)
        if outcome.gt_type == "answer" and outcome.answer is not None and outcome.inst_ok:
            values.append(_score_value(outcome.answer))
        else:
            values.append(1.0 if problem is None else 0.0)
    if len(predictions) < len(gold):
        problems.append(f"only {len(predictions)} of {len(gold)} steps were predicted")
        values.extend([0.0] * (len(gold) - len(predictions)))
    score = sum(values) / len(values) if values else 0.0
    check = answer_check(predictions, ref)
    if problems:
        more = f" (+{len(problems) - 1} more diverging steps)" if len(problems) > 1 else ""
        turn = first_divergence(scored, ref, threshold)
        return Verdict.of(False, score, problems[0] + more, turn, check)
    return Verdict.of(True, score, answer_check=check)


def judge_e2e(
    predictions: Sequence[Mapping[str, Any]],
    gold: Sequence[Mapping[str, Any]],
    ref: Any,
    scored: E2ECaseScore,
    threshold: float,
) -> Verdict:
    """Verdict of an end-to-end case; the score is the query's AnsAcc (or Ans+I) share."""
    check = answer_check(predictions, ref)
    if not ref:
        value = 0.0 if scored.imggen is None else scored.imggen.value
        if value > 0:
            return Verdict.of(True, value, answer_check=check)
        missing = missing_imagegen_tool(predictions, gold)
        if missing is not None:
            reason = f"the reference image tool {missing} was never called without error"
        else:
            reason = "the image tools' arguments have zero similarity to the reference"
        return Verdict.of(False, value, f"{reason} ({_calls_summary(predictions)})", -1, check)
    if not predictions:
        return Verdict.of(False, 0.0, "the episode recorded no steps", answer_check=check)
    kind, answer = response_type(predictions[-1])
    if kind != "answer" or not answer:
        # An episode without a finish ends on a tool's output; the model's last act is the call.
        last = next(
            (p for p in reversed(predictions) if response_type(p)[0] != "tool_return"),
            predictions[-1],
        )
        return Verdict.of(
            False,
            0.0,
            f"no final answer: the episode ended on {describe(last)} "
            f"({_calls_summary(predictions)})",
            -1,
            check,
        )
    value = _score_value(scored.answer)
    problem = _answer_problem(str(answer), ref, scored.answer, threshold)
    if problem is None:
        return Verdict.of(True, value, answer_check=check)
    return Verdict.of(False, value, problem, -1, check)


def final_answer(steps: Sequence[Any]) -> str | None:
    """The model's answer as a reader finds it: its last assistant step without a call."""
    for step in reversed(steps):
        if (
            isinstance(step, Mapping)
            and step.get("role") == "assistant"
            and not step.get("tool_calls")
        ):
            return str(step.get("content"))
    return None


def answer_check(predictions: Sequence[Any], ref: Any) -> AnswerCheck | None:
    """The final answer against an objective reference: each whitelist group, the blacklist.

    The HTML report shows it beside the answer; ``None`` for a subjective or image query, or
    where there is no final answer. A reference the official matcher cannot read (a hostile
    prediction file's) checks no group rather than failing the case.
    """
    answer = final_answer(predictions)
    if not isinstance(ref, Mapping) or answer is None:
        return None
    try:
        hits = whitelist_hits(answer, ref)
        black = blacklist_hit(answer, ref)
    except (KeyError, TypeError, re.error):
        hits, black = [], None
    return AnswerCheck(whitelist=[bool(h) for h in hits], blacklist_hit=black)


def judge(
    mode: str,
    predictions: Sequence[Mapping[str, Any]],
    gold: Sequence[Mapping[str, Any]],
    ref: Any,
    scored: StepCaseScore | E2ECaseScore,
    threshold: float,
) -> Verdict:
    """The verdict of a case of ``mode`` (:func:`judge_step` or :func:`judge_e2e`)."""
    if mode == "step" and isinstance(scored, StepCaseScore):
        return judge_step(predictions, gold, ref, scored, threshold)
    if mode == "e2e" and isinstance(scored, E2ECaseScore):
        return judge_e2e(predictions, gold, ref, scored, threshold)
    raise TypeError(f"{type(scored).__name__} is not a {mode}-mode score")


def _calls_summary(predictions: Sequence[Mapping[str, Any]]) -> str:
    calls = [p for p in predictions if "tool_calls" in p]
    if not calls:
        return "no tool calls"
    names = [str(call_function(c)["name"]) + ("!" if "error" in c else "") for c in calls]
    return (
        "calls: " + ", ".join(names) + (" (! = error)" if any("error" in c for c in calls) else "")
    )
