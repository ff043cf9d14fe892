"""Running and scoring one case: a (query, mode) pair.

This is the seam between the pytest machinery and the pure parts: it runs the right loop (or
fetches recorded predictions), scores the result with the official primitives, decides the
outcome, and packs everything into builtins that travel on the test report.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, cast

import pytest

from pytest_gta import outward
from pytest_gta.case import Case
from pytest_gta.dataset import Query
from pytest_gta.detail import CaseDetail
from pytest_gta.errors import GtaUnavailableError
from pytest_gta.models import base
from pytest_gta.models.base import BaseModelAdapter
from pytest_gta.outward import Cleaner
from pytest_gta.results.case import Verdict
from pytest_gta.run import loops
from pytest_gta.run.ahead import AheadWork
from pytest_gta.run.context import RunContext, needs_similarity
from pytest_gta.run.episode import AgentRun, Ahead, Played, play
from pytest_gta.scoring.metrics import E2ECaseScore, StepCaseScore, score_e2e_case, score_step_case
from pytest_gta.scoring.similarity import Similarity
from pytest_gta.scoring.verdict import judge_e2e, judge_step
from pytest_gta.types import Usage
from pytest_gta.vocabulary import CATEGORY_NAMES, ERROR_KINDS, MODEL_S_PROPERTY, Mode

#: Characters of a model's reply shown in a failed case's message.
REPLY_SHOWN = 300


def clip(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters, saying so (secrets redacted before the cut)."""
    return outward.clip(text, limit)


class Scorer:
    """Scores episodes; the similarity model loads on first need."""

    def __init__(self, similarity: Callable[[], Similarity], threshold: float) -> None:
        self._factory = similarity
        self._similarity: Similarity | None = None
        self._lock = threading.Lock()
        self.threshold = threshold

    def similarity(self) -> Similarity:
        """The similarity model, made once (episodes are scored in pool threads too)."""
        with self._lock:
            if self._similarity is None:
                self._similarity = self._factory()
            return self._similarity

    def score(
        self,
        mode: Mode,
        query: Query,
        predictions: list[dict[str, Any]],
        gold: list[dict[str, Any]],
    ) -> tuple[StepCaseScore | E2ECaseScore, Verdict]:
        """The case's metric primitives and its verdict."""
        ref = query.gt_answer
        similarity = self.similarity() if needs_similarity(query, mode) else None
        if mode == "step":
            step = score_step_case(predictions, gold, ref, similarity)
            return step, judge_step(predictions, gold, ref, step, self.threshold)
        e2e = score_e2e_case(predictions, gold, ref, similarity)
        return e2e, judge_e2e(predictions, gold, ref, e2e, self.threshold)


@dataclass
class CaseResult:
    """Everything known about a finished case."""

    case: Case
    model: str
    predictions: list[dict[str, Any]]
    gold: list[dict[str, Any]]
    score: StepCaseScore | E2ECaseScore
    verdict: Verdict
    replies: list[str] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)
    duration: float = 0.0
    backends: dict[str, str] = field(default_factory=dict)
    #: The agent under test's run, tool log and model traffic (``None``: the project's loop).
    agent: AgentRun | None = None
    #: Seconds the case waited on the model (``None``: no model was called, as for replayed
    #: predictions, or the agent's model was not reached through the proxy).
    model_s: float | None = None

    @property
    def passed(self) -> bool:
        """Whether the query was solved."""
        return self.verdict.passed

    def check(self) -> None:
        """Fail the current test with the verdict's explanation unless the case passed.

        The explanation says what diverged in the record's terms (``call NoAction ...``); the
        model's own words for that turn follow, so a failure can be read without the report.
        """
        if self.passed:
            return
        message = f"{self.case.id}: {self.verdict.message}"
        wrote = self.reply_of_verdict()
        if wrote is not None:
            message += f"\nthe model wrote: {clip(repr(wrote), REPLY_SHOWN)}"
        pytest.fail(message, pytrace=False)

    def reply_of_verdict(self) -> str | None:
        """The model's reply in the turn the verdict points at, if there is one."""
        turn = self.verdict.turn
        if turn is None or not self.replies or not -len(self.replies) <= turn < len(self.replies):
            return None
        return self.replies[turn]

    @property
    def reported_score(self) -> float:
        """The verdict's score within [0, 1].

        Similarities are float32 cosines, which can exceed 1 by a rounding step
        (``1.0000003576278687``); the metrics keep the exact value, a dashboard gets a score.
        """
        return min(1.0, max(0.0, float(self.verdict.score)))

    def properties(self) -> list[tuple[str, Any]]:
        """Flat per-case properties for JUnit XML (builtins only: execnet refuses the rest)."""
        props: list[tuple[str, Any]] = [
            ("gta_score", self.reported_score),
            ("gta_passed", bool(self.passed)),
        ]
        score = self.score
        if isinstance(score, StepCaseScore):
            summary = score.summary
            props += [
                ("gta_ref_steps", len(score.steps)),
                ("gta_ref_tool_steps", score.tool_steps),
                ("gta_inst_correct", score.inst_correct),
                ("gta_tool_correct", score.tool_correct),
                ("gta_arg_correct", score.arg_correct),
                ("gta_summ_score", None if summary is None else float(summary.value)),
                ("gta_tool_calls", score.tool_calls),
                ("gta_tool_call_errors", score.tool_call_errors),
            ]
            errors = score.errors()
        else:
            props += [
                ("gta_answer_score", None if score.answer is None else float(score.answer.value)),
                ("gta_imggen_score", None if score.imggen is None else float(score.imggen.value)),
                ("gta_tool_calls", score.tool_calls),
                ("gta_tool_call_errors", score.tool_call_errors),
                ("gta_turns", len(self.replies)),
            ]
            for category in CATEGORY_NAMES:
                props += [
                    (f"gta_ref_calls_{category}", score.reference[category]),
                    (f"gta_pred_calls_{category}", score.predicted[category]),
                    (f"gta_hit_calls_{category}", score.hits[category]),
                ]
            errors = score.errors
        props += [(f"gta_errors_{kind}", int(errors.get(kind, 0))) for kind in ERROR_KINDS]
        usage = self.usage
        if usage.calls or usage.cached_calls or usage.input_tokens or usage.output_tokens:
            props += [
                ("gta_tokens_in", usage.input_tokens),
                ("gta_tokens_out", usage.output_tokens),
                ("gta_model_calls", usage.calls),
                ("gta_cached_calls", usage.cached_calls),
            ]
        if self.model_s is not None:
            props.append((MODEL_S_PROPERTY, round(float(self.model_s), 6)))
        # JUnit writes every property as text: leave undefined values out rather than "None".
        return [(name, value) for name, value in props if value is not None]

    def detail(self) -> CaseDetail:
        """The full payload for the controller's report (JSON-able builtins).

        It travels on the setup report (``DETAIL_KEY``); the report's case entry is made from
        it (:func:`pytest_gta.report.schema.case_entry`).
        """
        payload: CaseDetail = {
            "score": self.score.to_json(),
            "verdict": {
                "passed": self.passed,
                "score": self.reported_score,
                "message": self.verdict.message,
            },
            "steps": self.predictions,
            "replies": self.replies,
            "backends": self.backends,
            "duration": self.duration,
        }
        if self.agent is not None:
            payload["agent"] = self.agent.outcome.to_json()
            payload["tool_log"] = self.agent.tool_log
            payload["exchanges"] = self.agent.exchanges
        # Recorded steps may hold tuples, NaN, lone surrogates, huge numbers or secrets (they
        # come from a model or a prediction file): builtins any writer and execnet accept.
        cleaner = Cleaner()
        out = cast(CaseDetail, cleaner.value(payload))
        if cleaner.nonfinite:
            out["nonfinite"] = cleaner.nonfinite
        return out


def identity_properties(case: Case, model: str, agent: str | None = None) -> list[tuple[str, Any]]:
    """Properties known before the case runs (they identify errored cases too).

    ``gta_epoch`` only in a repeated run (``--gta-epochs``), so single runs' JUnit is unchanged;
    ``gta_agent`` only with an agent under test (its callable or command).
    """
    props: list[tuple[str, Any]] = [
        ("gta_query_id", case.query.qid),
        ("gta_mode", case.mode),
        ("gta_type", case.query.type),
        ("gta_model", model),
    ]
    if agent is not None:
        props.append(("gta_agent", agent))
    if case.repeated:
        props.append(("gta_epoch", case.epoch))
    return props


def run_case(case: Case, ctx: RunContext, work: AheadWork | None = None) -> CaseResult:
    """Run (or fetch) one case and score it.

    Which model answers the case is decided here: recorded predictions are looked up; a step
    prompt goes to the answers generated ahead (``work.step_model``, a batch or the pool's),
    else to the model; an end-to-end episode generated ahead (``work.take``) is taken, its
    failure raised here, in the case, else the episode is played now (:func:`play`).

    Raises:
        GtaUnavailableError: nothing to evaluate here (no record, no backend for a tool).
        GtaInfrastructureError: the model or a tool backend broke.
    """
    # Taken before the clock starts: waiting for the pool is not the case's time.
    ahead = work.take(case) if work is not None and case.mode == "e2e" else None
    start = time.perf_counter()
    query = case.query
    model = ctx.model
    replies: list[str] = []
    usage = Usage()
    backends: dict[str, str] = {}
    scored = None
    agent = None
    model_s = None
    if base.replays(model) and ctx.agent is None:
        recorded = model.recorded(query, case.mode)
        if recorded is None:
            raise GtaUnavailableError(
                f"{model.name} has no recorded {case.mode} prediction for query {query.qid}"
            )
        predictions, gold = recorded.predictions, recorded.gold
    else:
        step_model = work.step_model if work is not None else None
        played, scored = _generated(case, ctx, step_model, ahead)
        episode, backends, agent = played.episode, played.backends, played.agent
        predictions, gold = episode.predictions, episode.gold
        replies, usage = [t.reply for t in episode.turns], played.usage
        model_s = played.model_s
    if scored is None:
        scored = ctx.scorer.score(case.mode, query, predictions, gold)
    score, verdict = scored
    ahead_s = ahead.seconds if ahead is not None else None
    return CaseResult(
        case=case,
        model=model.name,
        predictions=predictions,
        gold=gold,
        score=score,
        verdict=verdict,
        replies=replies,
        usage=usage,
        # An episode played ahead took its time in the pool, before the case began.
        duration=time.perf_counter() - start + (ahead_s or 0.0),
        backends=backends,
        agent=agent,
        model_s=model_s,
    )


def _generated(
    case: Case, ctx: RunContext, step_model: BaseModelAdapter | None, ahead: Ahead | None
) -> tuple[Played, tuple[Any, Any] | None]:
    """The model's (or the agent's) episode of ``case``, and (score, verdict) if scored."""
    model = ctx.model
    if case.mode == "e2e" and ctx.agent is not None and ahead is None:
        return play(case, ctx, cast(BaseModelAdapter, model)), None
    if not base.generates(model):
        raise TypeError(f"{model.name} neither generates nor replays predictions")
    if case.mode == "step":
        episode = loops.run_step(ctx.dataset, case.query, step_model or model, epoch=case.epoch)
        return Played(episode), None
    if ahead is None:
        return play(case, ctx, model), None
    if isinstance(ahead.outcome, BaseException):
        raise ahead.outcome
    return ahead.outcome, ahead.scored
