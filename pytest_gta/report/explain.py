"""What the HTML report says about a run and its cases, as plain data: no markup here.

The page (:mod:`pytest_gta.report.html`) and pytest-html's extras render what these functions
decide: the run's facts, what went wrong in a case and why, which step diverged, how it was
scored. Keeping the decisions out of the markup lets a test check them directly, and keeps
them in one place when the page's layout changes.

The step-mode divergence is the scorer's own decision (:func:`pytest_gta.scoring.verdict.
first_divergence`, the ``turn`` of a step-mode verdict), taken from the per-step outcomes the
scorer recorded in the case's primitives, so the step the page marks is the step the failure
message names. End to end the scorer does not align steps (it counts calls per category); the
first differing call (:func:`e2e_divergence`) is a reader's aid, not a verdict.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pytest_gta.dataset import Dataset, Query, call_function
from pytest_gta.report.table import header_lines, identity_facts, model_time
from pytest_gta.scoring.answer import blacklist_hit, whitelist_hits
from pytest_gta.scoring.metrics import StepCaseScore
from pytest_gta.scoring.verdict import first_divergence
from pytest_gta.vocabulary import CATEGORY_NAMES, tool_category

# --------------------------------------------------------------------------------------------
# The run


def duration_text(seconds: Any) -> str:
    """A duration as a person reads it (``n/a`` when it is not a number)."""
    if not isinstance(seconds, int | float):
        return "n/a"
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, rest = divmod(int(seconds), 60)
    return f"{minutes} min {rest} s" if minutes < 60 else f"{minutes // 60} h {minutes % 60} min"


def facts(report: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The run's header as (label, value) pairs: what ran, on what, how, at what cost."""
    dataset = report.get("dataset") or {}
    settings = report.get("settings") or {}
    out = [
        ("model", f"{report.get('model')} (protocol {report.get('protocol')})"),
    ]
    agent = settings.get("agent")
    if isinstance(agent, Mapping) and agent.get("name"):
        out.append(("agent under test", f"{agent['name']} ({agent.get('kind')})"))
    out += identity_facts(report)
    out += [
        ("modes", ", ".join(settings.get("modes") or [])),
        (
            "dataset",
            f"{dataset.get('path')} ({dataset.get('source', '')}; {dataset.get('queries')} "
            f"queries, {dataset.get('selected')} selected)",
        ),
        ("dataset sha256", str(dataset.get("sha256"))),
    ]
    if settings.get("tools"):
        out.append(("tools", str(settings["tools"])))
    routes = settings.get("tool_routes")
    if isinstance(routes, Mapping) and routes:
        out.append(("tool routes", ", ".join(f"{k}: {v}" for k, v in routes.items())))
    backends = settings.get("tool_backends")
    if isinstance(backends, Mapping):
        sandbox = [
            f"{name}: {info['sandbox']}"
            for name, info in backends.items()
            if isinstance(info, Mapping) and info.get("sandbox")
        ]
        if sandbox:
            out.append(("sandbox", ", ".join(sandbox)))
    if settings.get("sim_model"):
        out.append(
            ("similarity", f"{settings['sim_model']} (pass at >= {settings.get('sim_threshold')})")
        )
    generation = settings.get("generation")
    if isinstance(generation, Mapping) and generation:
        out.append(("generation", ", ".join(f"{k} {v}" for k, v in generation.items())))
    for key in ("limit", "ids", "max_turns", "shard"):
        if settings.get(key) is not None:
            out.append((key.replace("_", " "), str(settings[key])))
    if isinstance(report.get("epochs"), int) and report["epochs"] > 1:
        out.append(("epochs", str(report["epochs"])))
    usage = report.get("usage") or {}
    if usage.get("calls") or usage.get("cached_calls"):
        cost = usage.get("cost_usd")
        out.append(
            (
                "usage",
                f"{usage.get('calls')} model calls ({usage.get('cached_calls')} from the cache), "
                f"{usage.get('input_tokens')} tokens in, {usage.get('output_tokens')} out"
                + ("" if cost is None else f", about ${float(cost):.4f}")
                + model_time(usage),
            )
        )
    out.append(("duration", duration_text(report.get("duration_s"))))
    out.append(("pytest-gta", str(settings.get("pytest_gta", ""))))
    return out


def run_warnings(report: Mapping[str, Any]) -> list[str]:
    """What a reader must know before trusting the numbers: an interrupted or stopped run."""
    out = []
    lines = header_lines(report)
    if lines and lines[0].startswith("INTERRUPTED"):
        out.append(lines[0])
    if report.get("stopped"):
        out.append(f"stopped early: {report['stopped']}")
    return out


def flips(report: Mapping[str, Any]) -> dict[str, str]:
    """``{"mode-query_id": "regressed" | "fixed"}`` against the baseline (empty without one)."""
    comparison = report.get("comparison")
    if not isinstance(comparison, Mapping):
        return {}
    out = {}
    for kind in ("regressed", "fixed"):
        for entry in comparison.get("flipped", {}).get(kind, []):
            key = (entry.get("mode"), str(entry.get("query_id")))
            out["{}-{}".format(*key)] = kind
    return out


# --------------------------------------------------------------------------------------------
# Steps


def call_parts(step: Mapping[str, Any]) -> tuple[str, Any] | None:
    """``(tool name, arguments)`` of a call step, or ``None`` if its record is malformed."""
    try:
        function = call_function(step)
    except (KeyError, IndexError, TypeError, AttributeError):
        return None
    if not isinstance(function, Mapping):  # a text or a list where the call belongs
        return None
    return str(function.get("name")), function.get("arguments")


@dataclass(frozen=True)
class StepView:
    """A recorded or reference step as the page shows it.

    ``kind`` is ``call`` (``tool``, ``category``, ``arguments``, ``error``), ``output``
    (``content``, a tool's output), ``answer`` (``content``), ``other`` (any other role, its
    ``content``) or ``raw`` (not a step record at all: ``content`` is the value itself).
    """

    kind: str
    role: Any = None
    content: Any = None
    tool: str = ""
    category: str = ""
    arguments: Any = None
    #: ``(type, message)`` of a call that failed.
    error: tuple[Any, str] | None = None


def step_view(step: Any) -> StepView:
    """What a step is: a call (with its tool, arguments and error), an output or an answer."""
    if not isinstance(step, Mapping):
        return StepView("raw", content=step)
    role = step.get("role")
    if step.get("tool_calls"):
        parts = call_parts(step)
        name, args = parts if parts else ("?", step.get("tool_calls"))
        error = step.get("error")
        failed = (error.get("type"), str(error.get("msg"))) if isinstance(error, Mapping) else None
        return StepView(
            "call", role, tool=name, category=tool_category(name), arguments=args, error=failed
        )
    if role == "tool":
        return StepView("output", role, step.get("content"))
    if role == "assistant":
        return StepView("answer", role, step.get("content"))
    return StepView("other", role, step.get("content"))


def _call_indices(steps: Sequence[Any]) -> list[int]:
    return [i for i, s in enumerate(steps) if isinstance(s, Mapping) and s.get("tool_calls")]


def final_answer(steps: Sequence[Any]) -> str | None:
    """The model's answer: the content of its last assistant step without a call."""
    for step in reversed(steps):
        if (
            isinstance(step, Mapping)
            and step.get("role") == "assistant"
            and not step.get("tool_calls")
        ):
            return str(step.get("content"))
    return None


def generated_images(case: Mapping[str, Any]) -> list[str]:
    """Paths of images the case's tools produced (tool outputs of type image), in order."""
    paths = []
    for step in case.get("steps") or []:
        if not isinstance(step, Mapping) or step.get("role") != "tool":
            continue
        content = step.get("content")
        for item in content if isinstance(content, list) else [content]:
            if isinstance(item, Mapping) and item.get("type") == "image":
                paths.append(str(item.get("content")))
    return list(dict.fromkeys(paths))


def tokens(case: Mapping[str, Any]) -> int:
    """The case's tokens in and out (0 for recorded predictions)."""
    props = case.get("properties") or {}
    return int(props.get("gta_tokens_in", 0) or 0) + int(props.get("gta_tokens_out", 0) or 0)


# --------------------------------------------------------------------------------------------
# Where a case went wrong


@dataclass(frozen=True)
class Divergence:
    """Where the model's chain first left the reference's (indices into the shown lists)."""

    reference: int | None
    model: int | None
    why: str


def e2e_divergence(reference: Sequence[Any], steps: Sequence[Any]) -> Divergence | None:
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
        ref_parts = call_parts(reference[ref_i])
        if got_i is None:
            expected = ref_parts[0] if ref_parts else "?"
            return Divergence(ref_i, None, f"the model answered; the reference called {expected}")
        got_parts = call_parts(steps[got_i])
        expected = ref_parts[0] if ref_parts else "?"
        got = got_parts[0] if got_parts else "?"
        if expected != got:
            return Divergence(
                ref_i, got_i, f"expected a call to {expected}; the model called {got}"
            )
        if isinstance(steps[got_i].get("error"), Mapping):
            return Divergence(ref_i, got_i, f"the call to {got} failed")
    return None


def step_divergence(primitives: Any, ref: Any, threshold: Any) -> int | None:
    """The first step-mode step the scorer judged wrong, as the case's verdict points at it.

    ``primitives`` are the per-step outcomes the scorer recorded (the case entry's
    ``primitives``), ``ref`` the query's reference answer and ``threshold`` the run's
    ``sim_threshold``. Without a usable threshold (a hand-made report) a subjective summary
    cannot be judged and counts as matching; primitives that are not the scorer's shape (a
    hostile report) mark no step rather than a wrong one.
    """
    if not isinstance(primitives, Mapping):
        return None
    try:
        scored = StepCaseScore.from_json(primitives)
    except (KeyError, TypeError, ValueError, AttributeError, OverflowError):
        return None
    usable = isinstance(threshold, int | float) and not isinstance(threshold, bool)
    return first_divergence(scored, ref, float(threshold) if usable else -math.inf)


# --------------------------------------------------------------------------------------------
# One case


@dataclass(frozen=True)
class CaseFacts:
    """The line of facts above a case's drill-down and the message that says why it failed."""

    outcome: str
    score: float
    mode: Any
    type: Any
    duration: str
    tokens: int
    #: ``tool by backend`` per tool the case used (end to end).
    backends: list[str]
    message: str
    #: An infrastructure error (shown as an error record) rather than the model being wrong.
    message_is_error: bool


def case_facts(case: Mapping[str, Any]) -> CaseFacts:
    """The facts of one case, its failure message included."""
    outcome = str(case.get("outcome"))
    backends = case.get("backends") or {}
    return CaseFacts(
        outcome=outcome,
        score=float(case.get("score") or 0.0),
        mode=case.get("mode"),
        type=case.get("type"),
        duration=duration_text(case.get("duration")),
        tokens=tokens(case),
        backends=[f"{k} by {v}" for k, v in backends.items()],
        message=str(case["message"]) if case.get("message") else "",
        message_is_error=outcome == "error",
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

    step: Any
    #: The model's raw text for a call or an answer (``None`` for a tool's output).
    reply: str | None
    diverges: bool


def e2e_turns(case: Mapping[str, Any], mark: int | None) -> list[Turn]:
    """The model's end-to-end steps, each call or answer beside the reply it came from."""
    replies = case.get("replies") or []
    out = []
    turn = 0
    for index, step in enumerate(case.get("steps") or []):
        is_output = isinstance(step, Mapping) and step.get("role") == "tool"
        reply = None
        if not is_output and turn < len(replies):
            reply = str(replies[turn])
            turn += 1
        out.append(Turn(step, reply, index == mark))
    return out


@dataclass(frozen=True)
class StepPair:
    """Step mode: one reference step and what the model predicted from the prefix before it."""

    number: int
    reference: Any
    #: ``None`` when the run was cut short before this step.
    model: Any
    reply: str | None
    diverges: bool


def step_pairs(case: Mapping[str, Any], query: Query | None, threshold: Any) -> list[StepPair]:
    """Per reference step (per model step without the dataset), the pair and the scorer's mark."""
    steps = case.get("steps") or []
    replies = case.get("replies") or []
    ref = query.gt_answer if query is not None else None
    wrong = step_divergence(case.get("primitives"), ref, threshold)
    indices = query.assistant_indices if query is not None else tuple(range(len(steps)))
    return [
        StepPair(
            number=n + 1,
            reference=query.dialogs[index] if query is not None else None,
            model=steps[n] if n < len(steps) else None,
            reply=str(replies[n]) if n < len(replies) else None,
            diverges=n == wrong,
        )
        for n, index in enumerate(indices)
    ]


# --------------------------------------------------------------------------------------------
# How a case was scored


def score_text(raw: Any) -> str:
    """A recorded score (``[kind, value]``) as ``0.1234 (kind)``, or ``n/a``."""
    if isinstance(raw, list | tuple) and len(raw) == 2:
        kind, value = raw
        try:
            return f"{float(value):.4f} ({kind})"
        except (TypeError, ValueError):
            return "n/a"
    return "n/a"


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
    gt_type: Any
    pred_type: Any
    tool_ok: bool
    args_ok: bool
    answer: str
    error: Any


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
    threshold: Any
    #: End to end: the Ans+I score of an image query, else the answer score ("" for none).
    imggen: str
    answer_score: str
    #: End to end: ``(category, reference, model, matched)`` call counts for the F1 metrics.
    categories: list[tuple[str, Any, Any, Any]]
    #: Step mode: per reference step.
    steps: list[StepRow]


def _whitelist(answer: str, ref: Mapping[str, Any]) -> WhitelistCheck:
    try:
        hits = whitelist_hits(answer, ref)
        black = blacklist_hit(answer, ref)
    except (KeyError, TypeError, re.error):
        hits, black = [], None
    groups = [
        ([str(alias) for alias in group], hit)
        for group, hit in zip(ref.get("whitelist", []), hits, strict=False)
    ]
    blacklist = ref.get("blacklist")
    aliases = [str(a) for g in blacklist for a in g] if blacklist else None
    return WhitelistCheck(groups, aliases, black)


def scoring(case: Mapping[str, Any], query: Query | None, threshold: Any) -> Scoring | None:
    """How the case was scored; ``None`` when it was not (the case did not finish)."""
    primitives = case.get("primitives")
    if not isinstance(primitives, Mapping):
        return None
    answer = final_answer(case.get("steps") or [])
    ref = query.gt_answer if query is not None else None
    e2e = case.get("mode") == "e2e"
    if e2e:
        answer_score = primitives.get("answer")
    else:
        outcomes = primitives.get("steps") or []
        last = outcomes[-1] if outcomes and isinstance(outcomes[-1], Mapping) else {}
        answer_score = last.get("answer")
    objective = None
    references = None
    if isinstance(ref, Mapping) and answer is not None:
        objective = _whitelist(answer, ref)
    elif isinstance(ref, list):
        references = ref
    imggen = shown_score = ""
    categories = []
    steps = []
    if e2e:
        if primitives.get("imggen") is not None:
            imggen = score_text(primitives["imggen"])
        elif answer_score is not None and not isinstance(ref, list):
            shown_score = score_text(answer_score)
        categories = [
            (
                c,
                primitives.get("reference", {}).get(c, 0),
                primitives.get("predicted", {}).get(c, 0),
                primitives.get("hits", {}).get(c, 0),
            )
            for c in CATEGORY_NAMES
        ]
    else:
        steps = [
            StepRow(
                number=n + 1,
                gt_type=o.get("gt_type"),
                pred_type=o.get("pred_type"),
                tool_ok=bool(o.get("tool_ok")),
                args_ok=bool(o.get("args_ok")),
                answer=score_text(o.get("answer")) if o.get("answer") else "",
                error=o.get("error") or "",
            )
            for n, o in enumerate(primitives.get("steps") or [])
            if isinstance(o, Mapping)
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

    id: Any
    outcome: Any
    mode: Any
    type: Any
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


def case_row(case: Mapping[str, Any], query: Query | None, flip: str) -> CaseRow:
    """What the case table knows of one case."""
    tools = list(query.called_tools) if query is not None else []
    search = " ".join(
        [
            str(case.get("id")),
            query.text if query is not None else "",
            str(case.get("message") or ""),
            *tools,
        ]
    ).lower()
    duration = case.get("duration")
    seconds = float(duration) if isinstance(duration, int | float) else -1.0
    return CaseRow(
        id=case.get("id"),
        outcome=case.get("outcome"),
        mode=case.get("mode"),
        type=case.get("type"),
        tools=tools,
        categories=list(query.categories) if query is not None else [],
        search=search,
        score=float(case.get("score") or 0.0),
        seconds=seconds,
        duration=duration_text(duration) if seconds >= 0 else "",
        tokens=tokens(case),
        flip=flip,
        message=str(case.get("message") or ""),
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


def case_table(report: Mapping[str, Any], dataset: Dataset | None) -> CaseTable:
    """Every case as a row; cases that flipped against the baseline come first."""
    flipped = flips(report)
    cases = list(report.get("cases", []))
    order = {"regressed": 0, "fixed": 1}

    def query_of(case: Mapping[str, Any]) -> Query | None:
        return None if dataset is None else dataset.queries.get(str(case.get("query_id")))

    def flip_of(case: Mapping[str, Any]) -> str:
        return flipped.get(f"{case.get('mode')}-{case.get('query_id')}", "")

    cases.sort(key=lambda c: order.get(flip_of(c), 2))
    queries = [q for q in map(query_of, cases) if q is not None]
    return CaseTable(
        rows=[case_row(c, query_of(c), flip_of(c)) for c in cases],
        modes=sorted({str(c.get("mode")) for c in cases}),
        types=sorted({str(c.get("type")) for c in cases}),
        tools=sorted({t for q in queries for t in q.called_tools}),
        flipped=bool(flipped),
    )
