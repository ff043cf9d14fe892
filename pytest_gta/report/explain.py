"""What the HTML report says about a run and its cases, as plain data: no markup here.

The page (:mod:`pytest_gta.report.html`) and pytest-html's extras render what these functions
decide from the typed report: the run's facts, what went wrong in a case and why, which step
diverged, how it was scored. Keeping the decisions out of the markup lets a test check them
directly, and keeps them in one place when the page's layout changes.

Nothing here scores. The step-mode divergence is the scorer's own decision, the ``turn`` of the
case's step-mode :class:`~pytest_gta.results.case.Verdict` (the step its failure message names),
and an objective answer's whitelist and blacklist hits are the verdict's ``answer_check``; a
case without a verdict has no mark and no checks. End to end the scorer does not align steps (it
counts calls per category); the first differing call (:func:`e2e_divergence`) is a reader's aid
read from the recorded steps and the dataset's reference chain, not a verdict.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import JsonValue

from pytest_gta.dataset import Dataset, Query
from pytest_gta.report.table import (
    erratum_lines,
    header_lines,
    identity_facts,
    isolation_lines,
    model_time,
)
from pytest_gta.results.case import CaseResult
from pytest_gta.results.primitives import E2EPrimitives, ScoreValue
from pytest_gta.results.recorded import Step
from pytest_gta.results.report import RunReport
from pytest_gta.vocabulary import CATEGORY_NAMES, tool_category

# --------------------------------------------------------------------------------------------
# The run


def duration_text(seconds: object) -> str:
    """A duration as a person reads it (``n/a`` when it is not a number)."""
    if not isinstance(seconds, int | float):
        return "n/a"
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, rest = divmod(int(seconds), 60)
    return f"{minutes} min {rest} s" if minutes < 60 else f"{minutes // 60} h {minutes % 60} min"


def facts(report: RunReport) -> list[tuple[str, str]]:
    """The run's header as (label, value) pairs: what ran, on what, how, at what cost."""
    dataset = report.dataset
    settings = report.settings
    agent = settings.agent
    how = "asked by the agent under test" if agent is not None else f"protocol {report.protocol}"
    out = [("model", f"{report.model} ({how})")]
    if agent is not None and agent.name:
        out.append(("agent under test", f"{agent.name} ({agent.kind})"))
        for line in isolation_lines(agent.isolation):
            fact, _, text = line.partition(": ")
            out.append((fact, text))
    out += identity_facts(report)
    out += [
        ("modes", ", ".join(settings.modes)),
        (
            "dataset",
            f"{dataset.path} ({dataset.source}; {dataset.queries} "
            f"queries, {dataset.selected} selected)",
        ),
        ("dataset sha256", dataset.sha256),
    ]
    said = erratum_lines(report, shown=60)
    if said:
        out.append(("erratum", "; ".join(said)))
    if settings.tools:
        out.append(("tools", settings.tools))
    if settings.tool_routes:
        out.append(("tool routes", ", ".join(f"{k}: {v}" for k, v in settings.tool_routes.items())))
    sandbox = [
        f"{name}: {info['sandbox']}"
        for name, info in (settings.tool_backends or {}).items()
        if info.get("sandbox")
    ]
    if sandbox:
        out.append(("sandbox", ", ".join(sandbox)))
    if settings.sim_model:
        out.append(("similarity", f"{settings.sim_model} (pass at >= {settings.sim_threshold})"))
    if settings.generation:
        out.append(("generation", ", ".join(f"{k} {v}" for k, v in settings.generation.items())))
    for name, value in (
        ("limit", settings.limit),
        ("ids", settings.ids),
        ("max turns", settings.max_turns),
        ("shard", settings.shard),
    ):
        if value is not None:
            out.append((name, str(value)))
    if report.epochs > 1:
        out.append(("epochs", str(report.epochs)))
    usage = report.usage
    if usage.calls or usage.cached_calls:
        cost = usage.cost_usd
        out.append(
            (
                "usage",
                f"{usage.calls} model calls ({usage.cached_calls} from the cache), "
                f"{usage.input_tokens} tokens in, {usage.output_tokens} out"
                + ("" if cost is None else f", about ${float(cost):.4f}")
                + model_time(usage),
            )
        )
    out.append(("duration", duration_text(report.duration_s)))
    out.append(("pytest-gta", settings.pytest_gta))
    return out


def run_warnings(report: RunReport) -> list[str]:
    """What a reader must know before trusting the numbers: an interrupted or stopped run."""
    out = []
    lines = header_lines(report)
    if lines and lines[0].startswith("INTERRUPTED"):
        out.append(lines[0])
    if report.stopped:
        out.append(f"stopped early: {report.stopped}")
    agent = report.settings.agent
    isolation = None if agent is None else agent.isolation
    if isolation is not None and not isolation.isolated:
        why = f" (no sandbox: {'; '.join(isolation.attempts)})" if isolation.attempts else ""
        out.append(
            f"the agent under test was NOT isolated from the answers and the harness{why}: "
            + "; ".join([*isolation.gaps, *(f.check for f in isolation.probe if not f.held)])
        )
    return out


def flips(report: RunReport) -> dict[str, str]:
    """``{"mode-query_id": "regressed" | "fixed"}`` against the baseline (empty without one)."""
    comparison = report.comparison
    if comparison is None:
        return {}
    out = {}
    for kind, entries in (
        ("regressed", comparison.flipped.regressed),
        ("fixed", comparison.flipped.fixed),
    ):
        for entry in entries:
            out[f"{entry.mode}-{entry.query_id}"] = kind
    return out


# --------------------------------------------------------------------------------------------
# Steps


def reference_steps(query: Query) -> list[Step]:
    """The query's reference chain as written in the dataset (relative paths), as steps."""
    return [Step(dict(message)) for message in query.dialogs]


@dataclass(frozen=True)
class StepView:
    """A recorded or reference step as the page shows it.

    ``kind`` is ``call`` (``tool``, ``category``, ``arguments``, ``error``), ``output``
    (``content``, a tool's output), ``answer`` (``content``), ``other`` (any other role, its
    ``content``) or ``raw`` (not a step record at all: ``content`` is the value itself).
    """

    kind: str
    role: str | None = None
    content: JsonValue = None
    tool: str = ""
    category: str = ""
    arguments: JsonValue = None
    #: ``(type, message)`` of a call that failed.
    error: tuple[JsonValue, str] | None = None


def step_view(step: Step) -> StepView:
    """What a step is: a call (with its tool, arguments and error), an output or an answer."""
    record = step.record
    if record is None:
        return StepView("raw", content=step.root)
    role = step.role
    if step.is_call:
        call = step.call
        # A malformed call shows its record's tool_calls as they are.
        name, args = (call.name, call.arguments) if call else ("?", record["tool_calls"])
        error = step.error
        failed = None if error is None else (error.type, error.msg)
        return StepView(
            "call", role, tool=name, category=tool_category(name), arguments=args, error=failed
        )
    if role == "tool":
        return StepView("output", role, step.content)
    if role == "assistant":
        return StepView("answer", role, step.content)
    return StepView("other", role, step.content)


def _call_indices(steps: Sequence[Step]) -> list[int]:
    return [i for i, s in enumerate(steps) if s.is_call]


def generated_images(case: CaseResult) -> list[str]:
    """Paths of images the case's tools produced (tool outputs of type image), in order."""
    return list(dict.fromkeys(path for step in case.steps for path in step.output_images()))


# --------------------------------------------------------------------------------------------
# Where a case went wrong


@dataclass(frozen=True)
class Divergence:
    """Where the model's chain first left the reference's (indices into the shown lists)."""

    reference: int | None
    model: int | None
    why: str


def e2e_divergence(reference: Sequence[Step], steps: Sequence[Step]) -> Divergence | None:
    """The first call that differs from the reference chain's call at the same position.

    End-to-end scoring does not align steps (it counts calls per category); for a reader the
    first call of another tool, the first failed call, or a chain that stops early or runs on is
    where to look. Indices point into the step lists as shown (calls, outputs and the answer).
    """
    ref_calls = _call_indices(reference)
    got_calls = _call_indices(steps)
    for n in range(max(len(ref_calls), len(got_calls))):
        ref_i = ref_calls[n] if n < len(ref_calls) else None
        got_i = got_calls[n] if n < len(got_calls) else None
        if ref_i is None:
            return Divergence(None, got_i, "the model called a tool after the reference answered")
        ref_call = reference[ref_i].call
        expected = ref_call.name if ref_call else "?"
        if got_i is None:
            return Divergence(ref_i, None, f"the model answered; the reference called {expected}")
        got_call = steps[got_i].call
        got = got_call.name if got_call else "?"
        if expected != got:
            return Divergence(
                ref_i, got_i, f"expected a call to {expected}; the model called {got}"
            )
        if steps[got_i].error is not None:
            return Divergence(ref_i, got_i, f"the call to {got} failed")
    return None


def step_divergence(case: CaseResult) -> int | None:
    """The step-mode step the page marks: the first the scorer judged wrong.

    The verdict's ``turn`` (:func:`pytest_gta.scoring.verdict.first_divergence`), so the page
    marks the step the failure message names; a case without a verdict marks none.
    """
    verdict = case.verdict
    return verdict.turn if verdict is not None and case.mode == "step" else None


# --------------------------------------------------------------------------------------------
# One case


@dataclass(frozen=True)
class CaseFacts:
    """The line of facts above a case's drill-down and the message that says why it failed."""

    outcome: str
    score: float
    mode: str
    type: str
    duration: str
    tokens: int
    #: ``tool by backend`` per tool the case used (end to end).
    backends: list[str]
    message: str
    #: An infrastructure error (shown as an error record) rather than the model being wrong.
    message_is_error: bool
    #: ``(kind, evidence)`` of each fault the erratum names for the query.
    erratum: list[tuple[str, str]]


def case_facts(case: CaseResult) -> CaseFacts:
    """The facts of one case, its failure message included."""
    return CaseFacts(
        outcome=case.outcome,
        score=case.score,
        mode=case.mode,
        type=case.type,
        duration=duration_text(case.duration),
        tokens=case.tokens(),
        backends=[f"{k} by {v}" for k, v in case.backends.items()],
        message=case.message,
        message_is_error=case.outcome == "error",
        erratum=[(note.kind, note.evidence) for note in case.erratum],
    )


@dataclass(frozen=True)
class Opening:
    """What the model saw before its first turn end to end (the ReAct prompt's messages)."""

    tools: str
    #: The files line of the first user message ("" when the query has no files).
    files: str
    query: str


def opening(query: Query) -> Opening:
    """The system and user messages an end-to-end episode starts with, as the page names them."""
    return Opening(
        tools=", ".join(query.tool_names),
        files=", ".join(f"`{f.path}`" for f in query.files),
        query=query.text,
    )


@dataclass(frozen=True)
class Turn:
    """A step of the model's end-to-end chain and the raw reply that produced it."""

    step: Step
    #: The model's raw text for a call or an answer (``None`` for a tool's output).
    reply: str | None
    diverges: bool


def e2e_turns(case: CaseResult, mark: int | None) -> list[Turn]:
    """The model's end-to-end steps, each call or answer beside the reply it came from."""
    return turns_of(case.steps, case.replies, mark)


def turns_of(steps: Sequence[Step], replies: Sequence[str], mark: int | None) -> list[Turn]:
    """Recorded steps, each call or answer beside the raw reply it came from (in order).

    Any producer's trace: an atomic case's, or a GTA-Workflow task's (its loop's or agent's
    steps, or an eval pack's trace, which has no replies).
    """
    out = []
    turn = 0
    for index, step in enumerate(steps):
        reply = None
        if step.role != "tool" and turn < len(replies):
            reply = replies[turn]
            turn += 1
        out.append(Turn(step, reply, index == mark))
    return out


@dataclass(frozen=True)
class StepPair:
    """Step mode: one reference step and what the model predicted from the prefix before it."""

    number: int
    reference: Step | None
    #: ``None`` when the run was cut short before this step.
    model: Step | None
    reply: str | None
    diverges: bool


def step_pairs(case: CaseResult, query: Query | None) -> list[StepPair]:
    """Per reference step (per model step without the dataset), the pair and the scorer's mark."""
    steps = case.steps
    replies = case.replies
    wrong = step_divergence(case)
    indices = query.assistant_indices if query is not None else tuple(range(len(steps)))
    reference = reference_steps(query) if query is not None else None
    return [
        StepPair(
            number=n + 1,
            reference=reference[index] if reference is not None else None,
            model=steps[n] if n < len(steps) else None,
            reply=replies[n] if n < len(replies) else None,
            diverges=n == wrong,
        )
        for n, index in enumerate(indices)
    ]


# --------------------------------------------------------------------------------------------
# How a case was scored


def score_text(score: ScoreValue | None) -> str:
    """A recorded score (``[kind, value]``) as ``0.1234 (kind)``, or ``n/a``."""
    if score is None:
        return "n/a"
    kind, value = score
    return f"{float(value):.4f} ({kind})"


@dataclass(frozen=True)
class WhitelistCheck:
    """An objective answer's checks: each whitelist group hit or missed, the blacklist."""

    #: ``(aliases of the group, hit)`` per group.
    groups: list[tuple[list[str], bool]]
    #: Every blacklisted alias (``None`` when the reference has no blacklist).
    blacklist: list[str] | None
    blacklist_hit: str | None


@dataclass(frozen=True)
class StepRow:
    """One reference step's outcome as the scorer recorded it."""

    number: int
    gt_type: str
    pred_type: str
    tool_ok: bool
    args_ok: bool
    answer: str
    error: str


@dataclass(frozen=True)
class Scoring:
    """How a case was scored, as the page's scoring section shows it."""

    #: The model's final answer, shown when the query is known (``None``: no answer).
    answer: str | None
    show_answer: bool
    objective: WhitelistCheck | None
    #: Subjective references (the closest counts) and the similarity against the threshold.
    references: list[Any] | None
    similarity: str
    threshold: float | None
    #: End to end: the Ans+I score of an image query, else the answer score ("" for none).
    imggen: str
    answer_score: str
    #: End to end: ``(category, reference, model, matched)`` call counts for the F1 metrics.
    categories: list[tuple[str, int, int, int]]
    #: Step mode: per reference step.
    steps: list[StepRow]


def _whitelist(case: CaseResult, ref: Mapping[str, Any]) -> WhitelistCheck | None:
    """The verdict's check of the final answer against the reference's aliases."""
    check = case.verdict.answer_check if case.verdict is not None else None
    if check is None:
        return None
    groups = [
        ([str(alias) for alias in group], hit)
        for group, hit in zip(ref.get("whitelist", []), check.whitelist, strict=False)
    ]
    blacklist = ref.get("blacklist")
    aliases = [str(a) for g in blacklist for a in g] if blacklist else None
    return WhitelistCheck(groups, aliases, check.blacklist_hit)


def scoring(case: CaseResult, query: Query | None, threshold: float | None) -> Scoring | None:
    """How the case was scored; ``None`` when it was not (the case did not finish).

    ``threshold`` is the run's ``sim_threshold``, shown beside a subjective answer's similarity.
    """
    primitives = case.primitives
    if primitives is None:
        return None
    answer = case.final_answer()
    ref = query.gt_answer if query is not None else None
    if isinstance(primitives, E2EPrimitives):
        answer_score = primitives.answer
    else:
        answer_score = primitives.steps[-1].answer if primitives.steps else None
    objective = None
    references = None
    if isinstance(ref, Mapping) and answer is not None:
        objective = _whitelist(case, ref)
    elif isinstance(ref, list):
        references = ref
    imggen = shown_score = ""
    categories = []
    steps = []
    if isinstance(primitives, E2EPrimitives):
        if primitives.imggen is not None:
            imggen = score_text(primitives.imggen)
        elif answer_score is not None and not isinstance(ref, list):
            shown_score = score_text(answer_score)
        categories = [
            (
                c,
                primitives.reference.get(c),
                primitives.predicted.get(c),
                primitives.hits.get(c),
            )
            for c in CATEGORY_NAMES
        ]
    else:
        steps = [
            StepRow(
                number=n + 1,
                gt_type=o.gt_type,
                pred_type=o.pred_type,
                tool_ok=o.tool_ok,
                args_ok=o.args_ok,
                answer=score_text(o.answer) if o.answer else "",
                error=o.error or "",
            )
            for n, o in enumerate(primitives.steps)
        ]
    return Scoring(
        answer=answer,
        show_answer=query is not None,
        objective=objective,
        references=references,
        similarity=score_text(answer_score),
        threshold=threshold,
        imggen=imggen,
        answer_score=shown_score,
        categories=categories,
        steps=steps,
    )


# --------------------------------------------------------------------------------------------
# The case table


@dataclass(frozen=True)
class CaseRow:
    """A case's row in the page's table: what it shows, filters, sorts and searches on."""

    id: str
    outcome: str
    mode: str
    type: str
    tools: list[str]
    categories: list[str]
    #: Lower-case text the search box matches: id, query, message and tools.
    search: str
    score: float
    #: ``-1`` when the case has no duration (sorts first, shows nothing).
    seconds: float
    duration: str
    tokens: int
    #: ``regressed`` or ``fixed`` against the baseline, else "".
    flip: str
    message: str
    #: The kinds of fault the erratum names for the query (none: a sound reference).
    erratum: list[str]


def case_row(case: CaseResult, query: Query | None, flip: str) -> CaseRow:
    """What the case table knows of one case."""
    tools = list(query.called_tools) if query is not None else []
    kinds = [note.kind for note in case.erratum]
    search = " ".join(
        [case.id, query.text if query is not None else "", case.message, *tools, *kinds]
    ).lower()
    seconds = case.duration if case.duration is not None else -1.0
    return CaseRow(
        id=case.id,
        outcome=case.outcome,
        mode=case.mode,
        type=case.type,
        tools=tools,
        categories=list(query.categories) if query is not None else [],
        search=search,
        score=case.score,
        seconds=seconds,
        duration=duration_text(seconds) if seconds >= 0 else "",
        tokens=case.tokens(),
        flip=flip,
        message=case.message,
        erratum=kinds,
    )


@dataclass(frozen=True)
class CaseTable:
    """The case table: its rows (flipped cases first) and the values its filters offer."""

    rows: list[CaseRow]
    modes: list[str]
    types: list[str]
    tools: list[str]
    #: Whether the run was compared with a baseline that flipped some case.
    flipped: bool
    #: The kinds of fault the erratum names for some case, in order of first appearance.
    erratum: list[str]


def case_table(report: RunReport, dataset: Dataset | None) -> CaseTable:
    """Every case as a row; cases that flipped against the baseline come first."""
    flipped = flips(report)
    order = {"regressed": 0, "fixed": 1}

    def query_of(case: CaseResult) -> Query | None:
        return None if dataset is None else dataset.queries.get(case.query_id)

    def flip_of(case: CaseResult) -> str:
        return flipped.get(f"{case.mode}-{case.query_id}", "")

    cases = sorted(report.cases, key=lambda c: order.get(flip_of(c), 2))
    queries = [q for q in map(query_of, cases) if q is not None]
    return CaseTable(
        rows=[case_row(c, query_of(c), flip_of(c)) for c in cases],
        modes=sorted({c.mode for c in cases}),
        types=sorted({c.type for c in cases}),
        tools=sorted({t for q in queries for t in q.called_tools}),
        flipped=bool(flipped),
        erratum=list(dict.fromkeys(n.kind for c in report.cases for n in c.erratum)),
    )
