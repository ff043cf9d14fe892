"""A case's metric primitives: what it contributes to the official aggregate, as written.

The scorer (:mod:`pytest_gta.scoring.metrics`) computes these where the case ran; the report
keeps them so that ``--gta-merge``, ``--gta-baseline`` and ``--gta-compare`` aggregate shards and
earlier runs into the very same numbers, from the JSON alone. They live apart from the case
(:class:`~pytest_gta.results.case.CaseResult`) because they are the report's side of the
scorer's formulas, with the official loop's scalar types and Table 5's error classes, and the
report's and the comparison's error counts are the same :class:`ErrorCounts`.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Discriminator, Field, Tag, field_validator

from pytest_gta.results.base import Doc
from pytest_gta.vocabulary import CATEGORY_NAMES, ERROR_KINDS, ErrorKind

__all__ = [
    "CategoryCounts",
    "E2EPrimitives",
    "ErrorCounts",
    "Primitives",
    "ScoreKind",
    "ScoreValue",
    "StepOutcome",
    "StepPrimitives",
]

#: The largest finite float32: a ``f32`` score beyond it would overflow the official sum.
FLOAT32_MAX = 3.4028234663852886e38
#: How a scalar type of the official loop is named in a score: ``bool`` (iscorrect), ``int``
#: (an image query's factor 0 or 1) or ``f32`` (a similarity).
ScoreKind = Literal["bool", "int", "f32"]


def _as_tuple(value: Any) -> Any:
    """JSON has no tuples: a ``[kind, value]`` array is read as the pair it stands for."""
    return tuple(value) if isinstance(value, list) else value


def _finite_score(value: tuple[ScoreKind, float]) -> tuple[ScoreKind, float]:
    kind, number = value
    if kind == "f32" and abs(number) > FLOAT32_MAX:
        raise ValueError(f"{number} overflows a float32 similarity")
    return value


#: A score with the scalar type the official loop holds (``["f32", 0.87]``): the type changes
#: how the official sums round, so it travels with the value.
ScoreValue = Annotated[
    tuple[ScoreKind, float],
    BeforeValidator(_as_tuple),
    Field(description="[kind, value]: the official loop's scalar type (bool, int, f32), value"),
]


class ErrorCounts(Doc):
    """Errored calls by Table 5 class (the mapping is ours: SPEC section 6)."""

    format: int
    """NoAction and InvalidAction: the reply had no usable action."""
    args: int
    """ARGS_ERROR: the arguments were not valid JSON for the tool."""
    other: int
    """Any other API error of a tool."""

    def get(self, kind: str) -> int:
        """The count of ``kind`` (0 for a kind Table 5 does not have)."""
        return int(getattr(self, kind, 0)) if kind in ERROR_KINDS else 0

    def total(self) -> int:
        """Every errored call."""
        return self.format + self.args + self.other


class CategoryCounts(Doc):
    """Tool calls per tool category, as the official evaluator's ``gettype`` groups tools."""

    perception: int
    operation: int
    logic: int
    creativity: int

    def get(self, category: str) -> int:
        """The count of ``category`` (0 for a tool outside the 14)."""
        return int(getattr(self, category)) if category in CATEGORY_NAMES else 0


class StepOutcome(Doc):
    """What the official step loop saw for one (prediction, reference) pair."""

    gt_type: str
    """The reference step's kind: ``tool``, ``answer`` or ``tool_return``."""
    pred_type: str
    """The predicted step's kind (``none`` where no prediction came)."""
    error: ErrorKind | None
    """The prediction's error class, if it errored."""
    tool_ok: bool
    """Both are calls of the same tool (ToolAcc)."""
    args_ok: bool
    """... with equal arguments (ArgAcc)."""
    answer: ScoreValue | None
    """The summary's score, where both are answers."""

    @field_validator("answer")
    @classmethod
    def _finite(cls, value: tuple[ScoreKind, float] | None) -> tuple[ScoreKind, float] | None:
        return None if value is None else _finite_score(value)


class StepPrimitives(Doc):
    """A step-mode case's contribution to the official metrics."""

    has_answer_ref: bool
    """The query has a text reference answer (SummAcc's denominator)."""
    steps: list[StepOutcome]


class E2EPrimitives(Doc):
    """An end-to-end case's contribution to the official metrics."""

    has_answer_ref: bool
    answer: ScoreValue | None
    """The final answer's score (AnsAcc)."""
    imggen: ScoreValue | None
    """An image query's factor (Ans+I)."""
    tool_calls: int
    tool_call_errors: int
    errors: ErrorCounts
    predicted: CategoryCounts
    """Predicted calls per category (the F1s' precision)."""
    reference: CategoryCounts
    """Reference calls per category (the F1s' recall)."""
    hits: CategoryCounts
    """Reference calls whose tool the model called anywhere (the official hit rule)."""

    @field_validator("answer", "imggen")
    @classmethod
    def _finite(cls, value: tuple[ScoreKind, float] | None) -> tuple[ScoreKind, float] | None:
        return None if value is None else _finite_score(value)


def _primitives_kind(value: Any) -> str:
    """Which primitives a value holds: a step case's have ``steps``, an episode's do not."""
    if isinstance(value, dict):
        return "StepPrimitives" if "steps" in value else "E2EPrimitives"
    return type(value).__name__


#: A case's metric primitives, told apart by their shape (so an error names the right fields).
Primitives = Annotated[
    Annotated[StepPrimitives, Tag("StepPrimitives")]
    | Annotated[E2EPrimitives, Tag("E2EPrimitives")],
    Discriminator(_primitives_kind),
]
