"""One case as the whole project sees it: built once when its test ends, read by every output.

A case (a query in one mode, in one sampling epoch) is scored where it ran, on an xdist worker
or in the controller, and becomes a :class:`CaseResult`: its outcome, the scorer's whole
:class:`Verdict` (the turn where the episode first diverged included), the metric primitives
the official aggregate is computed from, the recorded steps as typed messages, the agent's run
and tool calls, its usage. It travels to the controller as this class's JSON and is read back
by this class; the report's ``cases`` are these objects; the terminal, JUnit, markdown, the HTML
page, the Inspect logs, ``--gta-merge``, ``--gta-baseline`` and ``--gta-compare`` read them.

The JSON of a case is the report's ``cases`` entry, written in this field order. Its
``properties`` are the flat JUnit view of the typed fields (:func:`case_properties`), computed
again whenever a report is written, so they cannot disagree with the fields they flatten.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Literal, cast

from pydantic import (
    BeforeValidator,
    Discriminator,
    Field,
    JsonValue,
    PrivateAttr,
    RootModel,
    Tag,
    field_validator,
    model_validator,
)

from pytest_gta.results.base import Doc, JsonObject, Scalar, omitted
from pytest_gta.results.erratum import ErratumNote
from pytest_gta.vocabulary import (
    CATEGORY_NAMES,
    ERROR_KINDS,
    MODEL_S_PROPERTY,
    ErrorKind,
    Mode,
    Outcome,
)

__all__ = [
    "AgentRun",
    "AnswerCheck",
    "CaseResult",
    "CaseUsage",
    "CategoryCounts",
    "E2EPrimitives",
    "ErrorCounts",
    "Exchange",
    "ExchangeUsage",
    "LoggedToolCall",
    "Primitives",
    "ScoreValue",
    "Step",
    "StepError",
    "StepOutcome",
    "StepPrimitives",
    "ToolCall",
    "Verdict",
    "case_id",
    "case_properties",
    "identity_properties",
    "result_properties",
]

#: The largest finite float32: a ``f32`` score beyond it would overflow the official sum.
FLOAT32_MAX = 3.4028234663852886e38
#: How a scalar type of the official loop is named in a score: ``bool`` (iscorrect), ``int``
#: (an image query's factor 0 or 1) or ``f32`` (a similarity).
ScoreKind = Literal["bool", "int", "f32"]
#: The epoch tag of a repeated case's id (``e2e-17@epoch1``); :mod:`pytest_gta.case` has the same.
EPOCH_TAG = "@epoch"


def case_id(mode: str, query_id: str, epoch: int | None) -> str:
    """A case's id: ``e2e-17``, or ``e2e-17@epoch1`` in a repeated run."""
    base = f"{mode}-{query_id}"
    return base if epoch is None else f"{base}{EPOCH_TAG}{epoch}"


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


@dataclass(frozen=True)
class ToolCall:
    """The first tool call of a step: the tool's name and its arguments as recorded."""

    name: str
    arguments: JsonValue


@dataclass(frozen=True)
class StepError:
    """The error record of a failed call (Lagent's ``ActionStatusCode`` and message)."""

    type: JsonValue
    msg: str


class Step(RootModel[JsonValue]):
    """One recorded step: a message of the episode, kept exactly as it was recorded.

    Steps come from the model's loop, from an agent's tool log, or from an OpenCompass
    prediction file, which may hold any value where the official evaluator reads nothing
    (:func:`pytest_gta.scoring.metrics.check_steps`). So the record is kept as written, and
    read through typed views: :attr:`role`, :attr:`content`, :attr:`call`, :attr:`error`.
    """

    @property
    def record(self) -> Mapping[str, JsonValue] | None:
        """The step as an object (``None`` for a value that is not a step record)."""
        return self.root if isinstance(self.root, dict) else None

    @property
    def role(self) -> str | None:
        """``assistant``, ``tool``, ``user``, ... (``None``: not a step record)."""
        record = self.record
        role = record.get("role") if record is not None else None
        return role if isinstance(role, str) else None

    @property
    def content(self) -> JsonValue:
        """What the message says (text, or a tool's outputs)."""
        record = self.record
        return record.get("content") if record is not None else None

    @property
    def is_call(self) -> bool:
        """The step calls a tool (it has ``tool_calls``)."""
        record = self.record
        return record is not None and bool(record.get("tool_calls"))

    @property
    def call(self) -> ToolCall | None:
        """The step's (first) tool call, if its record is well formed."""
        record = self.record
        calls = record.get("tool_calls") if record is not None else None
        if not isinstance(calls, list) or not calls or not isinstance(calls[0], dict):
            return None
        function = calls[0].get("function")
        if not isinstance(function, dict):
            return None
        return ToolCall(str(function.get("name")), function.get("arguments"))

    @property
    def error(self) -> StepError | None:
        """The call's error record, if the call failed."""
        record = self.record
        error = record.get("error") if record is not None else None
        if not isinstance(error, dict):
            return None
        return StepError(error.get("type"), str(error.get("msg")))

    @property
    def is_answer(self) -> bool:
        """The step is the model's answer (an assistant message without a call)."""
        return self.role == "assistant" and not self.is_call

    def output_images(self) -> list[str]:
        """Paths of the images a tool's output step holds, in order."""
        if self.role != "tool":
            return []
        content = self.content
        items = content if isinstance(content, list) else [content]
        return [
            str(item.get("content"))
            for item in items
            if isinstance(item, dict) and item.get("type") == "image"
        ]


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


class CaseUsage(Doc):
    """The case's model calls and their tokens."""

    input_tokens: int = Field(ge=0)
    output_tokens: int = Field(ge=0)
    calls: int = Field(ge=0)
    """Calls that reached the model."""
    cached_calls: int = Field(ge=0)
    """Calls answered from the response cache."""

    @property
    def any(self) -> bool:
        """Whether anything was counted."""
        return bool(self.calls or self.cached_calls or self.input_tokens or self.output_tokens)


class AgentRun(Doc):
    """What the agent under test did for the case (``--gta-agent``, ``--gta-agent-command``)."""

    name: str
    """The agent's callable or command."""
    answer: str | None
    images: list[str] = Field(default_factory=list, exclude_if=lambda v: not v)
    """Images the agent's answer names."""
    exit_status: int | None = omitted()
    """A command agent's exit status (absent: a Python agent, or killed on timeout)."""
    stderr_tail: str | None = omitted()
    """The end of a command agent's stderr (redacted)."""
    timed_out: bool = Field(default=False, exclude_if=lambda v: not v)
    duration: float


class ToolOutputError(Doc):
    """A failed tool call's error record."""

    type: str
    msg: str


class LoggedToolCall(Doc):
    """One tool call of the agent under test, as the case's MCP server logged it."""

    name: str
    arguments: JsonValue
    output: list[JsonObject] | None
    """The tool's outputs (``{type, content}`` items); ``None`` when it failed."""
    error: ToolOutputError | None
    duration: float


class ExchangeUsage(Doc):
    """Tokens of one model request through the proxy."""

    input_tokens: int
    output_tokens: int
    calls: int
    cached_calls: int


class Exchange(Doc):
    """One model request of the agent under test through the case's recording proxy."""

    api: str
    """``chat.completions``, ``responses`` or ``messages`` (``""``: refused before known)."""
    requested_model: str | None
    request: JsonValue
    """The body as forwarded, redacted, images elided."""
    reply: str
    usage: ExchangeUsage | None
    status: int
    cached: bool
    retries: int
    duration: float
    streamed: bool
    error: str | None


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
    return [(name, value) for name, value in props if value is not None]


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
        *(f"gta_{kind}_calls_{c}" for kind in ("ref", "pred", "hit") for c in CATEGORY_NAMES),
        *(f"gta_errors_{kind}" for kind in ERROR_KINDS),
        *_USAGE_NAMES,
        MODEL_S_PROPERTY,
    }
)
