"""One case as the whole project sees it: built once when its test ends, read by every output.

A case (a query in one mode, in one sampling epoch) is scored where it ran, on an xdist worker
or in the controller, and becomes a :class:`CaseResult`: its outcome, the scorer's whole
:class:`Verdict` (the turn where the episode first diverged included), the metric primitives
the official aggregate is computed from (:mod:`.primitives`), the recorded steps as typed
messages, the agent's run and tool calls, its usage (:mod:`.recorded`). It travels to the
controller as this class's JSON and is read back by this class; the report's ``cases`` are
these objects; the terminal, JUnit, markdown, the HTML page, the Inspect logs, ``--gta-merge``,
``--gta-baseline`` and ``--gta-compare`` read them.

The JSON of a case is the report's ``cases`` entry, written in this field order. Its
``properties`` are the flat JUnit view of the typed fields (:func:`case_properties`), computed
again whenever a report is written, so they cannot disagree with the fields they flatten.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

from pydantic import Field, PrivateAttr, model_validator

from pytest_gta.results.base import Doc, Scalar, omitted
from pytest_gta.results.erratum import ErratumNote
from pytest_gta.results.primitives import (
    E2EPrimitives,
    Primitives,
    ScoreKind,
    StepPrimitives,
)
from pytest_gta.results.recorded import AgentRun, CaseUsage, Exchange, LoggedToolCall, Step
from pytest_gta.results.robustness import FaultEntry
from pytest_gta.vocabulary import CATEGORY_NAMES, ERROR_KINDS, MODEL_S_PROPERTY, Mode, Outcome

#: With the parts of a case that live in their own modules (:mod:`.recorded`, :mod:`.primitives`)
#: where other modules still import them from here.
__all__ = [
    "AgentRun",
    "AnswerCheck",
    "CaseResult",
    "CaseUsage",
    "Exchange",
    "LoggedToolCall",
    "Step",
    "Verdict",
    "case_id",
    "case_properties",
    "identity_properties",
    "result_properties",
]

#: The epoch tag of a repeated case's id (``e2e-17@epoch1``); :mod:`pytest_gta.case` has the same.
EPOCH_TAG = "@epoch"


def case_id(mode: str, query_id: str, epoch: int | None) -> str:
    """A case's id: ``e2e-17``, or ``e2e-17@epoch1`` in a repeated run."""
    base = f"{mode}-{query_id}"
    return base if epoch is None else f"{base}{EPOCH_TAG}{epoch}"


class AnswerCheck(Doc):
    """How the final answer fared against an objective reference (the page shows each group)."""

    whitelist: list[bool]
    """Per whitelist group of the reference: whether the answer mentions one of its aliases."""
    blacklist_hit: str | None
    """The blacklisted alias the answer contains, if any."""


class Verdict(Doc):
    """The scorer's judgement of the case (SPEC section 6), whole.

    The case's own ``score`` and ``message`` repeat the verdict's where it was scored: they
    also say why a case that was never scored errored or was skipped.
    """

    passed: bool
    """The query was solved."""
    score: float = Field(ge=0, le=1)
    """Within [0, 1]: a step case's mean step match, an end-to-end case's AnsAcc or Ans+I
    share (a float32 similarity that rounds above 1 is 1)."""
    message: str
    """Why it failed: what was expected, what came instead, where ("" when it passed)."""
    turn: int | None
    """Index into the case's replies of the turn the message is about: the first diverging
    step in step mode, -1 (the last turn) end to end; ``null``: no turn to point at."""
    answer_check: AnswerCheck | None
    """The final answer against an objective reference (``null``: not an objective query,
    or no final answer)."""

    @classmethod
    def of(
        cls,
        passed: bool,
        score: float,
        message: str = "",
        turn: int | None = None,
        answer_check: AnswerCheck | None = None,
    ) -> Verdict:
        """A verdict with its score put within [0, 1] (similarities are float32 cosines)."""
        return cls(
            passed=passed,
            score=min(1.0, max(0.0, float(score))),
            message=message,
            turn=turn,
            answer_check=answer_check,
        )


class CaseResult(Doc):
    """A case of a run: the report's ``cases`` entry (see the module docstring)."""

    id: str
    """``e2e-17``, or ``e2e-17@epoch1`` in a repeated run."""
    query_id: str
    mode: Mode
    epoch: int | None = Field(ge=0, lt=2**31)
    """The sampling epoch in a repeated run (``--gta-epochs``); ``null`` in a single run."""
    type: str
    """The query's type: objective, subjective or image."""
    outcome: Outcome
    score: float
    """The verdict's score in [0, 1] (0 when the case was not scored)."""
    message: str
    """Why it failed (the verdict's explanation), errored or was skipped (pytest's)."""
    nodeid: str
    steps: list[Step]
    """The predicted steps as recorded (the model's episode, or the agent's)."""
    replies: list[str]
    """The model's raw reply of each turn."""
    backends: dict[str, str]
    """Which backend served each tool."""
    duration: float | None = Field(ge=0)
    """Seconds the case took (``null`` in an old shard's report)."""
    properties: dict[str, Scalar]
    """The flat view JUnit has (``gta_*``), written from the fields (:func:`case_properties`)."""
    primitives: Primitives | None
    """The metric primitives, so shards merge into the very same metrics; ``null``: the case
    was not scored."""
    images: dict[str, str]
    """{path as a step wrote it: key} in the session's image store (the HTML report)."""
    agent: AgentRun | None = omitted()
    """The agent under test's run (absent without an agent)."""
    tool_log: list[LoggedToolCall] | None = omitted()
    """Every tool call of the agent, as the MCP server logged it (absent without an agent)."""
    exchanges: list[Exchange] | None = omitted()
    """The agent's model requests through the recording proxy (absent without an agent)."""
    verdict: Verdict | None = None
    """The scorer's judgement (``null``: not scored, or an old report's case)."""
    usage: CaseUsage | None = None
    """The case's model calls (``null``: none)."""
    model_s: float | None = Field(default=None, ge=0)
    """Seconds the case waited on the model (``null``: no model was called)."""
    erratum: list[ErratumNote] = Field(default_factory=list, exclude_if=lambda v: not v)
    """The faults the erratum names for the case's query (absent: none, or an older report)."""
    faults: list[FaultEntry] | None = Field(default=None, exclude_if=lambda v: v is None)
    """The tool faults the case's calls met (``--gta-tool-faults``; absent: none injected)."""

    #: What other layers derive from the fields once (the aggregate parses the primitives into
    #: the official formulas' types): kept with the case, never written.
    _memo: dict[str, Any] = PrivateAttr(default_factory=dict)

    def memo(self) -> dict[str, Any]:
        """Values derived from this case's fields by another layer, by name (never written)."""
        # Straight from pydantic's store of private attributes: ``self._memo`` goes through
        # BaseModel.__getattr__, a tenth of --gta-compare's time spent looking up one dict.
        private = cast(dict[str, Any], self.__pydantic_private__)
        memo: dict[str, Any] = private["_memo"]
        return memo

    def __eq__(self, other: object) -> bool:
        # The fields make the case; what another layer derived from them does not.
        if not isinstance(other, CaseResult):
            return NotImplemented
        return self.__dict__ == other.__dict__

    __hash__ = None  # type: ignore[assignment]

    @classmethod
    def unscored(
        cls,
        mode: Mode,
        query_id: str,
        epoch: int | None = None,
        *,
        query_type: str = "",
        outcome: Outcome = "passed",
        message: str = "",
        nodeid: str = "",
    ) -> CaseResult:
        """A case that was never scored: it errored or was skipped before (or its worker died)."""
        return cls(
            id=case_id(mode, query_id, epoch),
            query_id=query_id,
            mode=mode,
            epoch=epoch,
            type=query_type,
            outcome=outcome,
            score=0.0,
            message=message,
            nodeid=nodeid,
            steps=[],
            replies=[],
            backends={},
            duration=None,
            properties={},
            primitives=None,
            images={},
        )

    @model_validator(mode="after")
    def _primitives_of_mode(self) -> CaseResult:
        wanted = StepPrimitives if self.mode == "step" else E2EPrimitives
        if self.primitives is not None and not isinstance(self.primitives, wanted):
            raise ValueError(f"primitives are not {self.mode}-mode metric primitives")
        return self

    @property
    def scored(self) -> bool:
        """Whether the case has a score (it was not an error or a skip before scoring)."""
        return self.primitives is not None

    @property
    def passed(self) -> bool:
        """Whether the case passed."""
        return self.outcome == "passed"

    def final_answer(self) -> str | None:
        """The model's answer: the content of its last assistant step without a call."""
        for step in reversed(self.steps):
            if step.is_answer:
                return str(step.content)
        return None

    def tokens(self) -> int:
        """The case's tokens in and out (0 for recorded predictions)."""
        usage = self.usage
        return 0 if usage is None else usage.input_tokens + usage.output_tokens


#: The property names :func:`case_properties` writes; others a report holds are kept after them.
_USAGE_NAMES = ("gta_tokens_in", "gta_tokens_out", "gta_model_calls", "gta_cached_calls")


def _score_of(value: tuple[ScoreKind, float] | None) -> float | None:
    return None if value is None else float(value[1])


def _primitive_properties(
    primitives: Primitives, replies: Sequence[str]
) -> list[tuple[str, Scalar]]:
    if isinstance(primitives, StepPrimitives):
        steps = primitives.steps
        summary = next((s.answer for s in steps if s.answer is not None), None)
        props: list[tuple[str, Scalar]] = [
            ("gta_ref_steps", len(steps)),
            ("gta_ref_tool_steps", sum(s.gt_type == "tool" for s in steps)),
            ("gta_inst_correct", sum(s.pred_type == s.gt_type and s.error is None for s in steps)),
            ("gta_tool_correct", sum(s.tool_ok for s in steps)),
            ("gta_arg_correct", sum(s.args_ok for s in steps)),
            ("gta_summ_score", _score_of(summary)),
            ("gta_tool_calls", sum(s.pred_type == "tool" for s in steps)),
            (
                "gta_tool_call_errors",
                sum(s.pred_type == "tool" and s.error is not None for s in steps),
            ),
        ]
        errors = {kind: sum(s.error == kind for s in steps) for kind in ERROR_KINDS}
    else:
        props = [
            ("gta_answer_score", _score_of(primitives.answer)),
            ("gta_imggen_score", _score_of(primitives.imggen)),
            ("gta_tool_calls", primitives.tool_calls),
            ("gta_tool_call_errors", primitives.tool_call_errors),
            ("gta_turns", len(replies)),
        ]
        for category in CATEGORY_NAMES:
            props += [
                (f"gta_ref_calls_{category}", primitives.reference.get(category)),
                (f"gta_pred_calls_{category}", primitives.predicted.get(category)),
                (f"gta_hit_calls_{category}", primitives.hits.get(category)),
            ]
        errors = {kind: primitives.errors.get(kind) for kind in ERROR_KINDS}
    return props + [(f"gta_errors_{kind}", int(errors[kind])) for kind in ERROR_KINDS]


def identity_properties(
    query_id: str,
    mode: str,
    query_type: str,
    epoch: int | None,
    *,
    model: str,
    agent: str | None = None,
    erratum: Sequence[str] = (),
) -> list[tuple[str, Scalar]]:
    """What identifies a case among the properties: known before it runs, so errors have them.

    ``gta_query_id``, ``gta_mode``, ``gta_type``, ``gta_model``, then ``gta_agent`` with an
    agent under test, ``gta_epoch`` in a repeated run and ``gta_erratum`` (the erratum's kinds,
    comma-separated) for a query it names (so other runs' JUnit is unchanged).
    """
    props: list[tuple[str, Scalar]] = [
        ("gta_query_id", query_id),
        ("gta_mode", mode),
        ("gta_type", query_type),
        ("gta_model", model),
    ]
    if agent is not None:
        props.append(("gta_agent", agent))
    if epoch is not None:
        props.append(("gta_epoch", epoch))
    if erratum:
        props.append(("gta_erratum", ",".join(erratum)))
    return props


def result_properties(case: CaseResult) -> list[tuple[str, Scalar]]:
    """The properties of a scored case after its identity: score, counts, usage, model time.

    Undefined values are left out (JUnit writes every property as text).
    """
    props: list[tuple[str, Scalar]] = []
    if case.verdict is not None and case.primitives is not None:
        props += [("gta_score", case.score), ("gta_passed", case.verdict.passed)]
        props += _primitive_properties(case.primitives, case.replies)
    usage = case.usage
    if usage is not None and usage.any:
        values = (usage.input_tokens, usage.output_tokens, usage.calls, usage.cached_calls)
        props += list(zip(_USAGE_NAMES, values, strict=True))
    if case.model_s is not None:
        props.append((MODEL_S_PROPERTY, case.model_s))
    if case.faults is not None:
        props += fault_properties(len(case.faults), case.outcome == "passed")
    return [(name, value) for name, value in props if value is not None]


def fault_properties(faults: int, passed: bool) -> list[tuple[str, Scalar]]:
    """``gta_faults`` (calls that met a fault) and ``gta_recovered`` (met one, and passed)."""
    return [("gta_faults", faults), ("gta_recovered", bool(faults) and passed)]


def case_properties(
    case: CaseResult, *, model: str, agent: str | None = None
) -> list[tuple[str, Scalar]]:
    """The case's flat properties, as JUnit XML and the report's ``properties`` have them.

    :func:`identity_properties`, then :func:`result_properties`. ``gta_*`` properties of the
    case's own ``properties`` that none of these names (a project's ``record_property``) are
    kept after them.
    """
    kinds = [note.kind for note in case.erratum]
    props = identity_properties(
        case.query_id, case.mode, case.type, case.epoch, model=model, agent=agent, erratum=kinds
    )
    props += result_properties(case)
    props += [
        (name, value)
        for name, value in case.properties.items()
        if name.startswith("gta_") and name not in _DERIVED and value is not None
    ]
    return props


#: Every name :func:`case_properties` derives: a stale one in a report read back is not kept.
_DERIVED = frozenset(
    {
        "gta_query_id",
        "gta_mode",
        "gta_type",
        "gta_model",
        "gta_agent",
        "gta_epoch",
        "gta_erratum",
        "gta_score",
        "gta_passed",
        "gta_ref_steps",
        "gta_ref_tool_steps",
        "gta_inst_correct",
        "gta_tool_correct",
        "gta_arg_correct",
        "gta_summ_score",
        "gta_tool_calls",
        "gta_tool_call_errors",
        "gta_answer_score",
        "gta_imggen_score",
        "gta_turns",
        "gta_faults",
        "gta_recovered",
        *(f"gta_{kind}_calls_{c}" for kind in ("ref", "pred", "hit") for c in CATEGORY_NAMES),
        *(f"gta_errors_{kind}" for kind in ERROR_KINDS),
        *_USAGE_NAMES,
        MODEL_S_PROPERTY,
    }
)
