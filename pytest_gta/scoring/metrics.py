"""GTA's metrics, computed the way the official evaluator computes them: the per-case half.

Scoring is split in two so that ``-n 0`` and ``-n 8`` give identical numbers:

1. *Per case* (here, on whichever process ran it): the primitives the evaluator's loop looks at,
   e.g. "predicted type equals reference type and no error", "tool name matched", an answer
   score. They are plain builtins and travel on the test report.
2. *Aggregation* (:mod:`pytest_gta.scoring.aggregate`, on the controller only): the evaluator's
   loop replayed over those primitives in dataset order.

Formula quirks kept on purpose (official ``GTABenchEvaluator.score``): ToolAcc counts calls that
errored; a reference call is a hit if its tool appears *anywhere* among the predictions (which
lets F1's precision exceed 1); Ans+I starts each image query at 1 and multiplies similarities
of JSON-dumped arguments.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import numpy as np

from pytest_gta.dataset import call_function
from pytest_gta.scoring.answer import iscorrect
from pytest_gta.scoring.similarity import Similarity, simscore
from pytest_gta.vocabulary import (
    CATEGORY_NAMES,
    ERROR_KINDS,
    IMAGEGEN_TOOLS,
    INVALID_ACTION,
    NO_ACTION,
    ErrorKind,
    Mode,
    tool_category,
)

ScoreKind = Literal["bool", "int", "f32"]


@dataclass(frozen=True)
class Score:
    """A score with the scalar type the official loop would hold (it changes the rounding)."""

    kind: ScoreKind
    value: float

    @classmethod
    def of(cls, native: Any) -> Score:
        """Wrap a ``bool``, an ``int`` or a NumPy float as produced by the official formulas."""
        if isinstance(native, (bool, np.bool_)):
            return cls("bool", float(bool(native)))
        if isinstance(native, (int, np.integer)):
            return cls("int", float(int(native)))
        return cls("f32", float(np.float32(native)))

    def native(self) -> Any:
        """The value as the official loop holds it: ``bool``, ``int`` or ``np.float32``."""
        if self.kind == "bool":
            return bool(self.value)
        if self.kind == "int":
            return int(self.value)
        return np.float32(self.value)

    def to_json(self) -> list[Any]:
        """A builtin form that survives xdist's execnet transport."""
        return [self.kind, self.value]

    @classmethod
    def from_json(cls, raw: Sequence[Any] | None) -> Score | None:
        """Inverse of :meth:`to_json` (``None`` stays ``None``)."""
        if raw is None:
            return None
        kind, value = raw
        if kind not in ("bool", "int", "f32"):
            raise ValueError(f"unknown score kind {kind!r}")
        return cls(kind, float(value))


def response_type(item: Mapping[str, Any]) -> tuple[str, Any]:
    """The official ``get_response_type``: ``tool``, ``answer`` or ``tool_return``."""
    if "tool_calls" in item:
        return "tool", call_function(item)
    if item.get("role") == "assistant":
        return "answer", item.get("content")
    return "tool_return", item.get("content")


def error_kind(pred: Mapping[str, Any]) -> ErrorKind | None:
    """Table 5 class of an errored call: format (NoAction, InvalidAction), args, or other.

    The official repository has no code for Table 5; this mapping is ours.
    """
    if "error" not in pred:
        return None
    name = ""
    if "tool_calls" in pred:
        # In step mode a call paired with an answer is never looked into by the official loop,
        # so its function may be any value (see check_steps).
        function = call_function(pred)
        name = str(function.get("name")) if isinstance(function, Mapping) else ""
    if name in (NO_ACTION, INVALID_ACTION):
        return "format"
    error = pred.get("error")
    if isinstance(error, Mapping) and error.get("type") == "ARGS_ERROR":
        return "args"
    return "other"


def _answer_score(pred: Any, ref: Any, similarity: Similarity | None) -> Score | None:
    if isinstance(ref, dict):
        return Score.of(iscorrect(str(pred), ref))
    if isinstance(ref, list):
        if similarity is None:
            raise RuntimeError("a similarity model is needed to score subjective answers")
        return Score.of(simscore(similarity, str(pred), ref))
    return None


# --------------------------------------------------------------------------------------------
# Step-by-step mode


@dataclass(frozen=True)
class StepOutcome:
    """What the evaluator's step loop sees for one (prediction, reference) pair."""

    gt_type: str
    pred_type: str
    error: ErrorKind | None = None
    tool_ok: bool = False
    args_ok: bool = False
    answer: Score | None = None

    @property
    def inst_ok(self) -> bool:
        """Counted by InstAcc: same step type and no error."""
        return self.pred_type == self.gt_type and self.error is None

    def to_json(self) -> dict[str, Any]:
        """Builtin form for transport."""
        return {
            "gt_type": self.gt_type,
            "pred_type": self.pred_type,
            "error": self.error,
            "tool_ok": self.tool_ok,
            "args_ok": self.args_ok,
            "answer": None if self.answer is None else self.answer.to_json(),
        }

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> StepOutcome:
        """Inverse of :meth:`to_json`."""
        return cls(
            gt_type=str(raw["gt_type"]),
            pred_type=str(raw["pred_type"]),
            error=raw.get("error"),
            tool_ok=bool(raw.get("tool_ok")),
            args_ok=bool(raw.get("args_ok")),
            answer=Score.from_json(raw.get("answer")),
        )


@dataclass(frozen=True)
class StepCaseScore:
    """One query's contribution to the step-mode metrics."""

    has_answer_ref: bool
    steps: tuple[StepOutcome, ...]

    @property
    def tool_steps(self) -> int:
        """Reference tool steps (ToolAcc/ArgAcc denominator share)."""
        return sum(s.gt_type == "tool" for s in self.steps)

    @property
    def inst_correct(self) -> int:
        """Steps counted by InstAcc."""
        return sum(s.inst_ok for s in self.steps)

    @property
    def tool_correct(self) -> int:
        """Steps counted by ToolAcc."""
        return sum(s.tool_ok for s in self.steps)

    @property
    def arg_correct(self) -> int:
        """Steps counted by ArgAcc."""
        return sum(s.args_ok for s in self.steps)

    @property
    def tool_calls(self) -> int:
        """Predicted tool calls."""
        return sum(s.pred_type == "tool" for s in self.steps)

    @property
    def tool_call_errors(self) -> int:
        """Predicted tool calls that errored."""
        return sum(s.pred_type == "tool" and s.error is not None for s in self.steps)

    @property
    def summary(self) -> Score | None:
        """The answer step's score, when the reference has an answer to match."""
        for step in self.steps:
            if step.answer is not None:
                return step.answer
        return None

    def errors(self) -> dict[str, int]:
        """Errored predictions by Table 5 class."""
        return {k: sum(s.error == k for s in self.steps) for k in ERROR_KINDS}

    def to_json(self) -> dict[str, Any]:
        """Builtin form for transport."""
        return {
            "has_answer_ref": self.has_answer_ref,
            "steps": [s.to_json() for s in self.steps],
        }

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> StepCaseScore:
        """Inverse of :meth:`to_json`."""
        return cls(
            bool(raw["has_answer_ref"]),
            tuple(StepOutcome.from_json(s) for s in raw["steps"]),
        )


def score_step_case(
    predictions: Sequence[Mapping[str, Any]],
    gold: Sequence[Mapping[str, Any]],
    ref: Any,
    similarity: Similarity | None,
) -> StepCaseScore:
    """Primitives of one query in step mode (official ``every_with_gt`` branch)."""
    steps = []
    for pred, gt in zip(predictions, gold, strict=False):  # the official zip truncates
        pred_type, pred_ = response_type(pred)
        gt_type, gt_ = response_type(gt)
        tool_ok = args_ok = False
        answer = None
        if pred_type == gt_type == "tool" and pred_.get("name") == gt_.get("name"):
            tool_ok = True
            args_ok = pred_.get("arguments") == gt_.get("arguments")
        elif pred_type == gt_type == "answer":
            answer = _answer_score(pred_, ref, similarity)
        steps.append(StepOutcome(gt_type, pred_type, error_kind(pred), tool_ok, args_ok, answer))
    return StepCaseScore(bool(ref), tuple(steps))


def unanswered_step_case(gold: Sequence[Mapping[str, Any]], ref: Any) -> StepCaseScore:
    """A query whose predictions never came (infrastructure error): every step is wrong."""
    steps = tuple(StepOutcome(response_type(gt)[0], "none") for gt in gold)
    return StepCaseScore(bool(ref), steps)


# --------------------------------------------------------------------------------------------
# End-to-end mode


def zero_by_category() -> dict[str, int]:
    """A count per tool category, each 0 (what the official loop starts its F1 counts at)."""
    return dict.fromkeys(CATEGORY_NAMES, 0)


@dataclass(frozen=True)
class E2ECaseScore:
    """One query's contribution to the end-to-end metrics."""

    has_answer_ref: bool
    answer: Score | None = None
    imggen: Score | None = None
    tool_calls: int = 0
    tool_call_errors: int = 0
    errors: dict[str, int] = field(default_factory=lambda: dict.fromkeys(ERROR_KINDS, 0))
    predicted: dict[str, int] = field(default_factory=zero_by_category)
    reference: dict[str, int] = field(default_factory=zero_by_category)
    hits: dict[str, int] = field(default_factory=zero_by_category)

    def to_json(self) -> dict[str, Any]:
        """Builtin form for transport."""
        return {
            "has_answer_ref": self.has_answer_ref,
            "answer": None if self.answer is None else self.answer.to_json(),
            "imggen": None if self.imggen is None else self.imggen.to_json(),
            "tool_calls": self.tool_calls,
            "tool_call_errors": self.tool_call_errors,
            "errors": dict(self.errors),
            "predicted": dict(self.predicted),
            "reference": dict(self.reference),
            "hits": dict(self.hits),
        }

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> E2ECaseScore:
        """Inverse of :meth:`to_json`."""
        return cls(
            has_answer_ref=bool(raw["has_answer_ref"]),
            answer=Score.from_json(raw.get("answer")),
            imggen=Score.from_json(raw.get("imggen")),
            tool_calls=int(raw.get("tool_calls", 0)),
            tool_call_errors=int(raw.get("tool_call_errors", 0)),
            errors={k: int(v) for k, v in raw.get("errors", {}).items()},
            predicted={k: int(v) for k, v in raw["predicted"].items()},
            reference={k: int(v) for k, v in raw["reference"].items()},
            hits={k: int(v) for k, v in raw["hits"].items()},
        )


def _last_imagegen_args(predictions: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    predicted: dict[str, Any] = {}
    for pred in predictions:
        if "tool_calls" in pred and "error" not in pred:
            function = call_function(pred)
            if function["name"] in IMAGEGEN_TOOLS:
                predicted[function["name"]] = function["arguments"]
    return predicted


def missing_imagegen_tool(
    predictions: Sequence[Mapping[str, Any]], gold: Sequence[Mapping[str, Any]]
) -> str | None:
    """The first reference image tool never called without error, if any."""
    predicted = _last_imagegen_args(predictions)
    for gt in gold:
        if "tool_calls" in gt:
            name = call_function(gt)["name"]
            if name in IMAGEGEN_TOOLS and name not in predicted:
                return str(name)
    return None


def imggen_score(
    predictions: Sequence[Mapping[str, Any]],
    gold: Sequence[Mapping[str, Any]],
    similarity: Similarity | None,
) -> Any:
    """The official image-generation factor of one query (``int`` or ``float32``).

    The last error-free argument dict per image tool is compared, as JSON text, with each
    reference call to that tool in order; a reference image tool never called makes it 0, and
    a chain without image tools leaves it at 1.
    """
    predicted = _last_imagegen_args(predictions)
    score: Any = 1
    for gt in gold:
        if "tool_calls" not in gt:
            continue
        function = call_function(gt)
        name = function["name"]
        if name not in IMAGEGEN_TOOLS:
            continue
        if name not in predicted:
            return 0
        if similarity is None:
            raise RuntimeError("a similarity model is needed to score image-generation queries")
        score = score * similarity.sim(
            json.dumps(function["arguments"]), json.dumps(predicted[name])
        )
    return score


def score_e2e_case(
    predictions: Sequence[Mapping[str, Any]],
    gold: Sequence[Mapping[str, Any]],
    ref: Any,
    similarity: Similarity | None,
) -> E2ECaseScore:
    """Primitives of one query in end-to-end mode (official ``every`` branch)."""
    answer = imggen = None
    if predictions:
        pred_type, pred_answer = response_type(predictions[-1])
        if ref and pred_type == "answer" and pred_answer:
            answer = _answer_score(pred_answer, ref, similarity)
    if not ref:
        imggen = Score.of(imggen_score(predictions, gold, similarity))
    calls = [p for p in predictions if "tool_calls" in p]
    errors: dict[str, int] = dict.fromkeys(ERROR_KINDS, 0)
    for call in calls:
        kind = error_kind(call)
        if kind is not None:
            errors[kind] += 1
    predicted_names = [str(call_function(c)["name"]) for c in calls]
    predicted, reference, hits = zero_by_category(), zero_by_category(), zero_by_category()
    for name in predicted_names:
        category = tool_category(name)
        if category in predicted:
            predicted[category] += 1
    for gt in gold:
        if "tool_calls" in gt:
            name = str(call_function(gt)["name"])
            category = tool_category(name)
            if category in reference:
                reference[category] += 1
                if name in predicted_names:
                    hits[category] += 1
    return E2ECaseScore(
        has_answer_ref=bool(ref),
        answer=answer,
        imggen=imggen,
        tool_calls=len(calls),
        tool_call_errors=sum(1 for c in calls if "error" in c),
        errors=errors,
        predicted=predicted,
        reference=reference,
        hits=hits,
    )


def unanswered_e2e_case(gold: Sequence[Mapping[str, Any]], ref: Any) -> E2ECaseScore:
    """A query whose episode never completed (infrastructure error): no answer, no calls.

    An image query scores 0 even when its chain has no image tool (where the official factor
    would stay at 1), so an error is never counted as a success.
    """
    empty = score_e2e_case([], gold, ref, None)
    return empty if ref else replace(empty, imggen=Score.of(0))


# --------------------------------------------------------------------------------------------
# Recorded steps the functions above can read


#: What the sentence-transformers tokenizer refuses (the official evaluator crashes on it too).
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def check_steps(
    mode: Mode,
    predictions: Sequence[Any],
    gold: Sequence[Any],
    ref: Any,
    *,
    pred_at: str = "prediction",
    gold_at: str = "gold",
) -> str | None:
    """Where recorded steps break a read of the official evaluator, as ``"path: problem"``.

    The scoring functions of this module read no more of a step than the official
    ``GTABenchEvaluator.score`` does, so steps written elsewhere (OpenCompass prediction files)
    are safe to score wherever that evaluator could score them. This walk replays its reads and
    returns the first that would raise: an entry is refused only where the official evaluator
    would crash, and whatever it can score is scored. Hence the checks follow its loops: step
    mode looks only at the zipped pairs, at a call's ``name`` only when both sides are calls and
    at its ``arguments`` only when the names match; an episode has only its last step
    classified, and any value for which ``'tool_calls' in value`` is false is passed over. An
    answer must be text only where the reference sends it to ``re.search`` or to the sentence
    encoder (whose tokenizer also refuses lone surrogates).

    Lenient on purpose where the official evaluator crashes, because the scoring functions have
    a fair score for it: an episode with no steps (it indexes ``[-1]``; here: no answer) and a
    reference call to a tool outside the 14 (its category table has no ``none`` key; here: in
    no category).

    Args:
        mode: ``step`` (``predictions[i]`` is paired with ``gold[i]``) or ``e2e`` (one episode).
        predictions: The recorded steps.
        gold: The reference steps they are scored against.
        ref: The query's ``gt_answer``.
        pred_at: How messages name ``predictions`` (``prediction[0]`` for an episode).
        gold_at: How messages name ``gold``.
    """
    if mode == "step":
        for n, (pred, gt) in enumerate(zip(predictions, gold, strict=False)):
            problem = _pair_problem(pred, gt, ref, f"{pred_at}[{n}]", f"{gold_at}[{n}]")
            if problem is not None:
                return problem
        return None
    return _episode_problem(predictions, gold, ref, pred_at, gold_at)


def _pair_problem(pred: Any, gt: Any, ref: Any, pred_at: str, gold_at: str) -> str | None:
    """The official ``every_with_gt`` reads of one zipped (prediction, reference) pair."""
    problem = _kind_problem(pred, pred_at) or _kind_problem(gt, gold_at)
    if problem is not None:
        return problem
    if "tool_calls" in pred and "tool_calls" in gt:
        problem = _function_problem(pred, pred_at, "name") or _function_problem(gt, gold_at, "name")
        if problem is None and call_function(pred)["name"] == call_function(gt)["name"]:
            problem = _function_problem(pred, pred_at, "arguments") or _function_problem(
                gt, gold_at, "arguments"
            )
        return problem
    if "tool_calls" not in pred and "tool_calls" not in gt:
        if pred["role"] == gt["role"] == "assistant":
            return _answer_text_problem(pred["content"], ref, pred_at)
    return None


def _episode_problem(
    predictions: Sequence[Any], gold: Sequence[Any], ref: Any, pred_at: str, gold_at: str
) -> str | None:
    """The official ``every`` reads of one episode and its reference chain."""
    if predictions:
        at = f"{pred_at}[{len(predictions) - 1}]"
        last = predictions[-1]
        problem = _kind_problem(last, at)
        if problem is not None:
            return problem
        if ref and "tool_calls" not in last and last["role"] == "assistant" and last["content"]:
            problem = _answer_text_problem(last["content"], ref, at)
            if problem is not None:
                return problem
    # Image queries (no gt_answer) also read arguments: those of every error-free predicted
    # call, and those of the reference calls up to the first image tool never called without
    # error, where the official loop breaks (imggen_score returns there).
    imagegen = not ref
    called: set[str] = set()
    for n, pred in enumerate(predictions):
        with_arguments = imagegen and isinstance(pred, dict) and "error" not in pred
        problem = _listed_call_problem(pred, f"{pred_at}[{n}]", with_arguments)
        if problem is not None:
            return problem
        if (
            with_arguments
            and "tool_calls" in pred
            and call_function(pred)["name"] in IMAGEGEN_TOOLS
        ):
            called.add(call_function(pred)["name"])
    reading_arguments = imagegen
    for n, gt in enumerate(gold):
        problem = _listed_call_problem(gt, f"{gold_at}[{n}]", reading_arguments)
        if problem is not None:
            return problem
        if reading_arguments and isinstance(gt, dict) and "tool_calls" in gt:
            name = call_function(gt)["name"]
            reading_arguments = name not in IMAGEGEN_TOOLS or name in called
    return None


def _kind_problem(step: Any, at: str) -> str | None:
    """Why the official ``get_response_type`` cannot classify ``step``."""
    if not isinstance(step, dict):
        return f"{at}: must be an object (a recorded step), not {_json_type(step)}"
    if "tool_calls" not in step:
        if "role" not in step or "content" not in step:
            return f"{at}: must have 'tool_calls', or a 'role' and a 'content'"
        return None
    calls = step["tool_calls"]
    if not (isinstance(calls, list) and calls and isinstance(calls[0], dict)):
        return f"{at}.tool_calls: must be a non-empty list of objects"
    if "function" not in calls[0]:
        return f"{at}.tool_calls[0]: must have a 'function'"
    return None


def _function_problem(step: Mapping[str, Any], at: str, key: str) -> str | None:
    """Why ``tool_calls[0].function[key]`` cannot be read (the step passed ``_kind_problem``)."""
    function = call_function(step)
    if not isinstance(function, dict) or key not in function:
        return f"{at}.tool_calls[0].function: must be an object with {key!r}"
    return None


def _listed_call_problem(step: Any, at: str, with_arguments: bool) -> str | None:
    """The reads of the official loops ``for step in steps: if 'tool_calls' in step: ...``."""
    if isinstance(step, str | list) and "tool_calls" not in step:
        return None
    if not isinstance(step, dict):
        return f"{at}: must be an object (a recorded step), not {_json_type(step)}"
    if "tool_calls" not in step:
        return None
    return (
        _kind_problem(step, at)
        or _function_problem(step, at, "name")
        or (_function_problem(step, at, "arguments") if with_arguments else None)
    )


def _answer_text_problem(text: Any, ref: Any, at: str) -> str | None:
    """Why an answer cannot reach ``re.search`` (objective) or the encoder (subjective)."""
    if isinstance(ref, dict) and (ref.get("whitelist") or ref.get("blacklist")):
        texts = [text]
    elif isinstance(ref, list) and ref:
        # The encoder also embeds a list of texts (the official score is then the first one's).
        texts = text if isinstance(text, list) and text else [text]
    else:
        return None  # the official evaluator never reads it
    if not all(isinstance(t, str) for t in texts):
        return f"{at}.content: must be text, not {_json_type(text)}"
    if isinstance(ref, list) and any(_LONE_SURROGATE.search(t) for t in texts):
        return f"{at}.content: must be valid Unicode text (it holds a lone surrogate)"
    return None


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "an object"
